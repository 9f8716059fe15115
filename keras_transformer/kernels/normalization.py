"""Layer normalization over the last axis, centered and scaled, computed in float32."""
from __future__ import annotations

import tensorflow as tf

from keras_transformer.kernels import reductions


def reference(x: tf.Tensor, gamma: tf.Tensor, beta: tf.Tensor, epsilon: float) -> tf.Tensor:
    """`(x - mean) / sqrt(var + epsilon) * gamma + beta` as `keras.layers.LayerNormalization`
    computes it (float32, returned in `x`'s dtype), differentiated by autodiff."""
    dtype = x.dtype
    x = tf.cast(x, tf.float32)
    mean, variance = tf.nn.moments(x, axes=[-1], keepdims=True)
    normalized = (x - mean) * tf.math.rsqrt(variance + epsilon)
    return tf.cast(normalized * tf.cast(gamma, tf.float32) + tf.cast(beta, tf.float32), dtype)


def fast(x: tf.Tensor, gamma: tf.Tensor, beta: tf.Tensor, epsilon: float) -> tf.Tensor:
    """`reference` with the backward pass in closed form,
    `dx = inv * (g - mean(g) - x_hat * mean(g * x_hat))` with `g = dy * gamma`, instead of
    differentiating the dozen element-wise ops of the forward pass one by one."""
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
            return (tf.cast(dx, dtype), reductions.sum_of_rows(upstream * normalized),
                    reductions.sum_of_rows(upstream))

        return tf.cast(normalized * gamma + beta, dtype), gradient

    return normalize(x, tf.cast(gamma, tf.float32), tf.cast(beta, tf.float32))
