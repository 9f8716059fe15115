"""Layer normalization with its gradient written out (fewer passes than autodiff's)."""
from __future__ import annotations

import keras
import tensorflow as tf

from keras_transformer.reductions import sum_of_rows


@keras.saving.register_keras_serializable(package="keras_transformer")
class LayerNormalization(keras.layers.LayerNormalization):
    """`keras.layers.LayerNormalization` (same arguments, weights and values) that runs
    `layer_norm` in its usual form: over the last axis, centered and scaled."""

    def call(self, inputs):
        if self.axis != [-1] or not (self.center and self.scale) or self.rms_scaling:
            return super().call(inputs)
        return layer_norm(inputs, self.gamma, self.beta, self.epsilon)


def layer_norm(x, gamma, beta, epsilon: float):
    """`(x - mean) / sqrt(var + epsilon) * gamma + beta` over the last axis, computed in float32
    and returned in `x`'s dtype, like `keras.layers.LayerNormalization`.

    The backward pass uses the closed form
    `dx = inv * (g - mean(g) - x_hat * mean(g * x_hat))` with `g = dy * gamma`, instead of
    differentiating the dozen element-wise ops of the forward pass one by one.
    """
    dtype = x.dtype

    @tf.custom_gradient
    def normalize(x, gamma, beta):
        x = tf.cast(x, tf.float32)
        centered = x - tf.reduce_mean(x, axis=-1, keepdims=True)
        inv = tf.math.rsqrt(tf.reduce_mean(tf.square(centered), axis=-1, keepdims=True)
                            + epsilon)
        normalized = centered * inv

        def gradient(upstream):
            upstream = tf.cast(upstream, tf.float32)
            scaled = upstream * gamma
            dx = inv * (scaled - tf.reduce_mean(scaled, axis=-1, keepdims=True)
                        - normalized * tf.reduce_mean(scaled * normalized, axis=-1,
                                                      keepdims=True))
            return (tf.cast(dx, dtype), sum_of_rows(upstream * normalized),
                    sum_of_rows(upstream))

        return tf.cast(normalized * gamma + beta, dtype), gradient

    return normalize(x, tf.cast(gamma, tf.float32), tf.cast(beta, tf.float32))
