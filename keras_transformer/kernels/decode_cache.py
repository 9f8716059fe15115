"""The self-attention key/value buffers of incremental decoding: `[rows, heads, max_len, dim]`,
one position written per step into the rows the hypotheses extend."""
from __future__ import annotations

import tensorflow as tf

from keras_transformer import compat


def reference_buffer(shape: tf.Tensor, dtype: tf.DType) -> tf.Tensor:
    """Zeros of `shape`."""
    return tf.zeros(shape, dtype)


def fast_buffer(shape: tf.Tensor, dtype: tf.DType) -> tf.Tensor:
    """Zeros of `shape` from `Empty`: stateful, so never folded into a graph constant that the
    in-place writes of `fast_extend_rows` would then modify across runs."""
    return tf.raw_ops.Empty(shape=shape, dtype=dtype, init=True)


def reference_extend_rows(buffer: tf.Tensor, rows: tf.Tensor, update: tf.Tensor,
                          step) -> tf.Tensor:
    """`buffer[rows]` with `update` `[batch, 1, heads, dim]` written at position `step`, as a
    gather and a scatter update."""
    taken = tf.gather(buffer, rows)
    shape = tf.shape(taken)
    row_heads = tf.reshape(tf.stack(tf.meshgrid(tf.range(shape[0]), tf.range(shape[1]),
                                                indexing="ij"), axis=-1), [-1, 2])
    indices = tf.concat([row_heads, tf.fill([shape[0] * shape[1], 1],
                                            tf.cast(step, tf.int32))], axis=1)
    values = tf.reshape(tf.cast(update, buffer.dtype), [-1, shape[3]])  # (row, head) order
    return tf.tensor_scatter_nd_update(taken, indices, values)


def fast_extend_rows(buffer: tf.Tensor, rows: tf.Tensor, update: tf.Tensor, step) -> tf.Tensor:
    """`reference_extend_rows` with the write in place into the gathered copy, which nothing
    else holds, so a step copies each buffer once (a scatter update copies it a second time).
    The gather must not be foldable into a constant: `buffer` comes from `fast_buffer` or an
    earlier step. Under XLA, which has no `InplaceUpdate` kernel and updates a scatter's
    operand in place itself, the scatter."""
    taken = tf.gather(buffer, rows)
    shape = tf.shape(taken)
    flat = tf.reshape(taken, [-1, shape[3]])  # One row per (row, head, position).
    indices = tf.range(shape[0] * shape[1]) * shape[2] + tf.cast(step, tf.int32)
    values = tf.reshape(tf.cast(update, buffer.dtype), [-1, shape[3]])
    if compat.in_xla_context():
        return tf.reshape(tf.tensor_scatter_nd_update(flat, indices[:, None], values), shape)
    return tf.reshape(tf.raw_ops.InplaceUpdate(x=flat, i=indices, v=values), shape)
