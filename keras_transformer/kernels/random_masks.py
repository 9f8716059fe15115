"""Training-time dropout: zero each element with probability `rate`, scale the rest by
`1 / (1 - rate)`."""
from __future__ import annotations

from typing import Optional

import keras
import tensorflow as tf

_LEVELS = 1 << 16  # fast masks compare 16-bit random integers against a threshold


def reference(inputs: tf.Tensor, rate: float, seed_generator: keras.random.SeedGenerator,
              shape: Optional[tf.Tensor] = None) -> tf.Tensor:
    """`keras.random.dropout`, as `keras.layers.Dropout` runs it (`shape` is unused)."""
    return keras.random.dropout(inputs, rate, seed=seed_generator)


def fast(inputs: tf.Tensor, rate: float, seed_generator: keras.random.SeedGenerator,
         shape: Optional[tf.Tensor] = None) -> tf.Tensor:
    """Masks from 16 random bits, two per 32-bit Philox output, instead of a float32 uniform
    (random-number generation was two thirds of Keras's dropout time on CPU).

    The drop probability is the nearest multiple of 2^-16 (0.1 -> 0.100006) and kept values are
    scaled by the exact inverse of that keep probability, so the expectation is unchanged.
    `shape`, the inputs' shape taken from a tensor available before the inputs are (e.g. the
    residual input beside a sub-layer's output), lets the mask be drawn while the sub-layer
    still runs, off the step's critical path. The mask holds the kept values' scale, so that
    applying it (and its gradient) is one multiplication.
    """
    dropped = min(round(rate * _LEVELS), _LEVELS - 1)
    if shape is None:
        shape = tf.shape(inputs)
    size = tf.reduce_prod(shape)
    bits = tf.random.stateless_uniform(
        [(size + 1) // 2], seed=_stateless_seed(seed_generator.next()),
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
