"""Where a batch's tokens sit while the position-wise sub-layers run.

A layout moves per-token tensors between the form the position-wise computations (embeddings,
projections, feed-forward, residual, layer norm, dropout) get and the padded heads-first form
`[batch, heads, len, dim]` that attention's batched matmuls need. The reference layout keeps the
padded `[batch, len, ...]` form throughout; the fast `TokenLayout` packs the N real tokens of a
bucketed batch into `[N, ...]`, so that nothing position-wise works on padding.
"""
from __future__ import annotations

from typing import Optional

import tensorflow as tf

from keras_transformer.vocab_ids import PAD_ID


class PaddedLayout:
    """Tokens stay `[batch, len, ...]`: every move is the identity or a transpose."""

    token_positions: Optional[tf.Tensor] = None  # positions are the second axis

    def pack(self, padded: tf.Tensor) -> tf.Tensor:
        return padded

    def unpack(self, tokens: tf.Tensor) -> tf.Tensor:
        return tokens

    def expand_heads(self, tokens: tf.Tensor) -> tf.Tensor:
        """`[batch, len, heads, dim]` -> `[batch, heads, len, dim]`."""
        return tf.transpose(tokens, [0, 2, 1, 3])

    def pack_heads(self, padded: tf.Tensor) -> tf.Tensor:
        """`[batch, heads, len, dim]` -> `[batch, len, heads, dim]`."""
        return tf.transpose(padded, [0, 2, 1, 3])

    def select(self, tokens: tf.Tensor, positions: tf.Tensor) -> tf.Tensor:
        """`tokens` at `positions` (`[M, 2]` (row, position) indices) -> `[M, ...]`."""
        return tf.gather_nd(tokens, positions)


PADDED = PaddedLayout()


def reference(ids: tf.Tensor) -> PaddedLayout:
    """The padded layout (the same for every batch)."""
    return PADDED


def fast(ids: tf.Tensor) -> "TokenLayout":
    """The packed layout of `ids`' real tokens."""
    return TokenLayout(ids)


class TokenLayout:
    """The N real tokens of a padded `[batch, len]` id tensor, packed `[N, ...]`.

    Tokens are packed in row-major order, as `tf.where` lists them. N is dynamic: not for XLA.
    Every move is a gather (scatters are slower on CPU), and each move's gradient is the
    opposite move. Same methods as `PaddedLayout`.
    """

    def __init__(self, ids: tf.Tensor):
        real = tf.not_equal(ids, PAD_ID)
        self.positions = tf.where(real)  # [N, 2] (row, position)
        self.padded_shape = tf.shape(ids, out_type=tf.int64)
        count = tf.shape(self.positions)[0]
        # The packed row of each real position; padding gets row N (past the end, see unpack)
        # or row 0 (see expand_heads).
        row = tf.reshape(tf.cumsum(tf.reshape(tf.cast(real, tf.int32), [-1])), tf.shape(ids)) - 1
        self._row_or_end = tf.where(real, row, count)
        self._row_or_first = tf.where(real, row, 0)

    @property
    def token_positions(self) -> tf.Tensor:
        """`[N]`: each packed token's position in its sentence."""
        return self.positions[:, 1]

    def pack(self, padded: tf.Tensor) -> tf.Tensor:
        """`[batch, len, ...]` -> `[N, ...]`."""
        return _move(lambda x: tf.gather_nd(x, self.positions), padded, self.unpack)

    def unpack(self, packed: tf.Tensor) -> tf.Tensor:
        """`[N, ...]` -> `[batch, len, ...]`, zeros at padding."""
        def unpack(x):
            return tf.gather(tf.concat([x, tf.zeros_like(x[:1])], axis=0), self._row_or_end)

        return _move(unpack, packed, self.pack)

    def expand_heads(self, packed: tf.Tensor) -> tf.Tensor:
        """`[N, heads, dim]` -> `[batch, heads, len, dim]`, heads first as attention's batched
        matmuls want them, with copies of real rows at padding, which carry no gradient: for
        consumers whose real outputs do not depend on padding rows (attention with padding keys
        masked and padding queries dropped). The move and the transpose are one gather."""
        return _move(lambda x: _gather_heads(x, self._row_or_first), packed, self.pack_heads)

    def pack_heads(self, padded: tf.Tensor) -> tf.Tensor:
        """`[batch, heads, len, dim]` -> `[N, heads, dim]`, as one gather."""
        def pack(x):
            heads, dim = x.shape[1], x.shape[3]
            rows, positions = self.positions[:, :1], self.positions[:, 1:]
            flat_rows = ((rows * heads + tf.range(heads, dtype=tf.int64)) * self.padded_shape[1]
                         + positions)  # [N, heads] rows of x as [batch * heads * len, dim]
            return tf.gather(tf.reshape(x, [-1, dim]), flat_rows)

        return _move(pack, padded, self._unpack_heads)

    def _unpack_heads(self, packed: tf.Tensor) -> tf.Tensor:
        """`[N, heads, dim]` -> `[batch, heads, len, dim]`, zeros at padding (`pack_heads`'s
        gradient)."""
        def unpack(x):
            return _gather_heads(tf.concat([x, tf.zeros_like(x[:1])], axis=0), self._row_or_end)

        return _move(unpack, packed, self.pack_heads)

    def select(self, packed: tf.Tensor, positions: tf.Tensor) -> tf.Tensor:
        """`pack(unpack(packed))` at other `positions` (`[M, 2]`, each a real token here) ->
        `[M, ...]`, without the padded copy. On CPU a padding position raises an error."""
        return tf.gather(packed, tf.gather_nd(self._row_or_end, positions))


def _move(move, source: tf.Tensor, gradient) -> tf.Tensor:
    """`move(source)`, with `gradient(upstream)` as its gradient (autodiff of a gather is a
    slower segment sum or scatter)."""
    source = tf.convert_to_tensor(source)
    if not source.dtype.is_floating:
        return move(source)

    @tf.custom_gradient
    def moved(x):
        return move(x), gradient

    return moved(source)


def _gather_heads(packed: tf.Tensor, packed_row: tf.Tensor) -> tf.Tensor:
    """`packed[packed_row[b, t], h]` at `[b, h, t]`: `[rows, heads, dim]` ->
    `[batch, heads, len, dim]`."""
    heads, dim = packed.shape[1], packed.shape[2]
    flat_rows = packed_row[:, None, :] * heads + tf.range(heads)[:, None]
    return tf.gather(tf.reshape(packed, [-1, dim]), flat_rows)
