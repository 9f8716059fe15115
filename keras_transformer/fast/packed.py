"""Packed tokens: a training step's forward pass with every position-wise computation on the
real tokens of a bucketed batch only, and the output logits as their factors.

`TokenLayout` packs the N real tokens of a padded batch into `[N, ...]`, so that nothing
position-wise (embeddings, projections, feed-forward, residual, layer norm, dropout) works on
padding; it is a token layout of the core's layers (`layers/layout.py`). `call_arguments` are
what a training step passes `Transformer.call` for it (under XLA, whose shapes are static, the
padded layout) and for the logits' factors as the decoder's output (tests/unit/test_model.py
checks values and gradients against the core's own call).
"""
from __future__ import annotations

from typing import Optional

import tensorflow as tf

from keras_transformer.config import PAD_ID
from keras_transformer.fast.loss import LogitFactors, factor_logits
from keras_transformer.layers.layout import PADDED
from keras_transformer.model import Transformer


class TokenLayout:
    """The N real tokens of a padded `[batch, len]` id tensor, packed `[N, ...]`.

    Tokens are packed in row-major order, as `tf.where` lists them. N is dynamic: not for XLA.
    Every move is a gather (scatters are slower on CPU), and each move's gradient is the
    opposite move. A `layers.layout.Layout`, with `select` besides.
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


def call_arguments(model: Transformer, inputs: tuple[tf.Tensor, tf.Tensor],
                   positions: Optional[tf.Tensor] = None) -> dict:
    """The `layouts` and `output` with which `model(inputs, ...)` (`Transformer.call` of
    `inputs`, `(source_ids, target_input_ids)`) returns its logits' `LogitFactors` instead of the
    logits: float32, whose `logits` add the model's output bias, if any, which the factors leave
    out.

    `positions`, `[N, 2]` (row, position) indices of real target input tokens, makes the layers
    run on the real tokens only (`TokenLayout`) and the logits those at `positions`,
    `[N, vocab]`; None: the padded layout, logits `[batch, tgt_len, vocab]`. (Attention
    probabilities asked for come padded, `[batch, heads, tgt_len, src_len]`, with copies of
    real rows at padding queries.)
    """
    packed = positions is not None
    layouts = (tuple(TokenLayout(ids) for ids in inputs) if packed else (PADDED, PADDED))

    def output(x: tf.Tensor) -> LogitFactors:
        x = layouts[1].select(x, positions) if packed else x
        if model.decoder_norm is not None:
            x = model.decoder_norm(x)
        if model.output_projection is not None:
            factors = factor_logits(x, model.output_projection.kernel, transposed=False)
        else:
            factors = factor_logits(x, model.target_embedding.embeddings, transposed=True)
        if model.output_bias is not None:
            factors = factors._replace(
                logits=factors.logits + tf.cast(model.output_bias, tf.float32))
        return factors

    return {"layouts": layouts, "output": output}
