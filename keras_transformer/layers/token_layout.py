"""Real tokens only: position-wise sub-layers can skip the padding of a bucketed batch."""
from __future__ import annotations

import tensorflow as tf

from keras_transformer.vocab_ids import PAD_ID


class TokenLayout:
    """Where the N real tokens of a padded `[batch, len]` id tensor sit.

    Moves per-token tensors between the padded layout `[batch, len, ...]` that attention needs
    and the packed layout `[N, ...]` that is enough for everything position-wise (projections,
    feed-forward, residual, layer norm, dropout), which then does no work on padding. Tokens are
    packed in row-major order, as `tf.where` lists them. N is dynamic: not for XLA.
    """

    def __init__(self, ids: tf.Tensor):
        self.positions = tf.where(tf.not_equal(ids, PAD_ID))  # [N, 2] (row, position)
        self.padded_shape = tf.shape(ids, out_type=tf.int64)

    def pack(self, padded: tf.Tensor) -> tf.Tensor:
        """`[batch, len, ...]` -> `[N, ...]`."""
        return tf.gather_nd(padded, self.positions)

    def unpack(self, packed: tf.Tensor) -> tf.Tensor:
        """`[N, ...]` -> `[batch, len, ...]`, zeros at padding."""
        shape = tf.concat([self.padded_shape, tf.shape(packed, out_type=tf.int64)[1:]], axis=0)
        return tf.scatter_nd(self.positions, packed, shape)
