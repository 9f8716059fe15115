"""Dropout whose masks cost half the random numbers of Keras's."""
from __future__ import annotations

import keras
import tensorflow as tf

_LEVELS = 1 << 16  # masks compare 16-bit random integers against a threshold


@keras.saving.register_keras_serializable(package="keras_transformer")
class Dropout(keras.layers.Dropout):
    """`keras.layers.Dropout` (same arguments, seeding and inference behaviour) drawing each
    mask from 16 random bits, two per 32-bit Philox output, instead of a float32 uniform.

    The drop probability is the nearest multiple of 2^-16 (0.1 -> 0.100006) and kept values
    are scaled by the exact inverse of that keep probability, so the expectation is unchanged.
    Random-number generation was two thirds of Keras's dropout time on CPU. With `noise_shape`
    the Keras implementation runs.

    `call(..., shape=)` takes the inputs' shape from a tensor available before the inputs are
    (e.g. the residual input beside a sub-layer's output): the mask's random numbers are then
    drawn while the sub-layer still runs, not after it, off the step's critical path. The mask
    holds the kept values' scale, so that applying it (and its gradient) is one multiplication.
    """

    def call(self, inputs, training=False, shape=None):
        if not training or self.rate == 0 or self.noise_shape is not None:
            return super().call(inputs, training=training)
        dropped = min(round(self.rate * _LEVELS), _LEVELS - 1)
        if shape is None:
            shape = tf.shape(inputs)
        size = tf.reduce_prod(shape)
        bits = tf.random.stateless_uniform(
            [(size + 1) // 2], seed=_stateless_seed(self.seed_generator.next()),
            minval=None, maxval=None, dtype=tf.uint32)
        levels = tf.reshape(tf.bitcast(bits, tf.uint16), [-1])[:size]
        scale = tf.constant(_LEVELS / (_LEVELS - dropped), inputs.dtype)
        mask = tf.where(tf.reshape(levels >= dropped, shape), scale, tf.zeros((), inputs.dtype))
        return _times_mask(inputs, mask)


@tf.custom_gradient
def _times_mask(inputs, mask):
    """`inputs * mask`, differentiated for `inputs` only (one multiplication, where autodiff of
    a product with dynamic shapes adds broadcast reductions)."""
    return inputs * mask, lambda upstream: (upstream * mask, None)


def _stateless_seed(seed: tf.Tensor) -> tf.Tensor:
    """A SeedGenerator's int64 state as the int32 seed stateless ops take under XLA too."""
    if seed.dtype == tf.int32:
        return seed
    return tf.cast(tf.math.floormod(seed, tf.int32.max - 1), tf.int32)
