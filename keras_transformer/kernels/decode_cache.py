"""The self-attention key/value caches of incremental decoding.

A search keeps, for each hypothesis row, its `ancestors` `[rows, max_len]`: the cache row that
holds each of its positions (a hypothesis shares the positions of the parent it extends, and
writes its newest position into its own row). At each step `extend_cache(buffer, ancestors,
update, step)` writes position `step` of every row and returns, per row, the keys (or values)
it attends to, `[rows, heads, length, dim]`; the attention masks the positions after `step`.

- reference: a `[rows, heads, max_len, dim]` buffer kept in hypothesis order: each step gathers
  every row's parent (`ancestors[:, step - 1]`), whole, and writes position `step` into the
  copy; the attention reads all `max_len` positions, those after `step` masked.
- fast: a position-major `[max_len, rows, heads, dim]` buffer that is never reordered: each
  step writes position `step` of every row in place, then gathers for each row the `step + 1`
  positions of its history from the rows that hold them: one copy of the written positions
  instead of the reference's copy of the whole buffer, and an attention over `step + 1`
  positions instead of `max_len`. Under XLA (static shapes, no in-place op): the reference's
  order, written with XLA's in-place scatter.
"""
from __future__ import annotations

import tensorflow as tf

from keras_transformer import compat


def reference_buffer(shape: tf.Tensor, dtype: tf.DType) -> tf.Tensor:
    """Zeros of `shape` `[rows, heads, max_len, dim]`."""
    return tf.zeros(shape, dtype)


def fast_buffer(shape: tf.Tensor, dtype: tf.DType) -> tf.Tensor:
    """`[max_len, rows, heads, dim]` (under XLA `shape` itself) from `Empty`: stateful, so
    never folded into a graph constant that the in-place writes would then modify across
    runs."""
    if not compat.in_xla_context():
        shape = tf.gather(shape, [2, 0, 1, 3])
    return tf.raw_ops.Empty(shape=shape, dtype=dtype, init=True)


def reference_extend_cache(buffer: tf.Tensor, ancestors: tf.Tensor, update: tf.Tensor,
                           step) -> tuple[tf.Tensor, tf.Tensor]:
    """The buffer in the order of the rows, each taken from its parent, with `update`
    `[rows, 1, heads, dim]` written at position `step`, as a gather and a scatter update; the
    attention reads the whole buffer."""
    step = tf.cast(step, tf.int32)
    taken = tf.gather(buffer, tf.gather(ancestors, tf.maximum(step - 1, 0), axis=1))
    shape = tf.shape(taken)
    row_heads = tf.reshape(tf.stack(tf.meshgrid(tf.range(shape[0]), tf.range(shape[1]),
                                                indexing="ij"), axis=-1), [-1, 2])
    indices = tf.concat([row_heads, tf.fill([shape[0] * shape[1], 1], step)], axis=1)
    values = tf.reshape(tf.cast(update, buffer.dtype), [-1, shape[3]])  # (row, head) order
    written = tf.tensor_scatter_nd_update(taken, indices, values)
    return written, written


def fast_extend_cache(buffer: tf.Tensor, ancestors: tf.Tensor, update: tf.Tensor,
                      step) -> tuple[tf.Tensor, tf.Tensor]:
    """Position `step` of every row written in place into the position-major buffer (which
    the search holds alone), then each row's positions `0 .. step` gathered from the rows
    in `ancestors` that hold them."""
    if compat.in_xla_context():
        return reference_extend_cache(buffer, ancestors, update, step)
    step = tf.cast(step, tf.int32)
    rows, heads, dim = tf.shape(update)[0], tf.shape(update)[2], tf.shape(update)[3]
    new = tf.reshape(tf.cast(update, buffer.dtype), [1, rows, heads, dim])
    buffer = tf.raw_ops.InplaceUpdate(x=buffer, i=tf.reshape(step, [1]), v=new)
    positions = tf.range(step + 1)
    slots = ((positions[None, None, :] * rows + ancestors[:, None, :step + 1]) * heads
             + tf.range(heads)[None, :, None])  # [rows, heads, step + 1] into (position, row, head)
    return buffer, tf.gather(tf.reshape(buffer, [-1, dim]), slots)
