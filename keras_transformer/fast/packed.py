"""Packed tokens: a training step's forward pass with every position-wise computation on the
real tokens of a bucketed batch only, and the output logits as their factors.

A layout moves per-token tensors between the form the position-wise computations (embeddings,
projections, feed-forward, residual, layer norm, dropout) get and the padded heads-first form
`[batch, heads, len, dim]` that attention's batched matmuls need. `PADDED` keeps the padded
`[batch, len, ...]` form throughout (under XLA, whose shapes are static); `TokenLayout` packs
the N real tokens into `[N, ...]`, so that nothing position-wise works on padding.
`logit_factors` runs the core model's own layers and weights in a layout; it computes what
`Transformer.call` does (tests/unit/test_model.py checks values and gradients).
"""
from __future__ import annotations

from typing import Optional, Union

import tensorflow as tf
from keras import ops

from keras_transformer.fast.loss import LogitFactors, factor_logits
from keras_transformer.layers import DecoderLayer, EncoderLayer, MultiHeadAttention
from keras_transformer.layers.attention import scaled_dot_product_attention
from keras_transformer.model import Transformer, causal_mask, source_padding_mask
from keras_transformer.config import PAD_ID


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


Layout = Union[PaddedLayout, TokenLayout]


def logit_factors(model: Transformer, source_ids: tf.Tensor, target_input_ids: tf.Tensor,
                  positions: Optional[tf.Tensor] = None, training=None,
                  attention_of: Optional[int] = None
                  ) -> LogitFactors | tuple[LogitFactors, tf.Tensor]:
    """`model((source_ids, target_input_ids))`'s logits with their factors: the `LogitFactors` of
    the float32 logits (whose `logits` add the model's output bias, if any, which the factors leave
    out), the layers of the Transformer `model` run on `source_ids` `[batch, src_len]` and
    `target_input_ids` `[batch, tgt_len]`, with dropout as `training` says.

    `positions`, `[N, 2]` (row, position) indices of real target input tokens, makes the layers run
    on the real tokens only (`TokenLayout`) and the logits those at `positions`, `[N, vocab]`; None:
    the padded layout, logits `[batch, tgt_len, vocab]`. `attention_of`, a decoder layer: also
    its encoder-decoder attention weights, `[batch, heads, tgt_len, src_len]` (float32; at
    padding queries, copies of real rows).
    """
    packed = positions is not None
    source_layout = TokenLayout(source_ids) if packed else PADDED
    target_layout = TokenLayout(target_input_ids) if packed else PADDED
    encoder_output = _embed(model, source_ids, "source", source_layout, training)
    padding_mask = ops.expand_dims(source_padding_mask(source_ids), 1)
    for layer in model.encoder_layers:
        encoder_output = _encoder_layer(layer, encoder_output, padding_mask, source_layout,
                                        training)
    if model.encoder_norm is not None:
        encoder_output = model.encoder_norm(encoder_output)
    x = _embed(model, target_input_ids, "target", target_layout, training)
    self_mask = causal_mask(target_input_ids)
    cross_weights = []
    for layer in model.decoder_layers:
        x, weights = _decoder_layer(layer, x, encoder_output, (self_mask, padding_mask),
                                    (target_layout, source_layout), training)
        cross_weights.append(weights)
    x = target_layout.select(x, positions) if packed else x
    if model.decoder_norm is not None:
        x = model.decoder_norm(x)
    if model.output_projection is not None:
        factors = factor_logits(x, model.output_projection.kernel, transposed=False)
    else:
        factors = factor_logits(x, model.target_embedding.embeddings, transposed=True)
    if model.output_bias is not None:
        factors = factors._replace(
            logits=factors.logits + tf.cast(model.output_bias, tf.float32))
    return factors if attention_of is None else (factors, cross_weights[attention_of])


def _embed(model: Transformer, ids: tf.Tensor, side: str, layout: Layout, training):
    """`model.embed` of the source or target `ids` in `layout`."""
    embedding, positions, dropout = (getattr(model, f"{side}_{part}")
                                     for part in ("embedding", "positions", "dropout"))
    if layout is PADDED:
        return model.embed(ids, side, training)
    x = embedding(layout.pack(ids))
    x = model.embedding_output(x + positions.at(layout.token_positions), side)
    return dropout(x, training=training)


def _encoder_layer(layer: EncoderLayer, x, padding_mask, layout: Layout, training):
    """`EncoderLayer.call` in `layout`: the layer's own blocks, its attention in the layout."""
    x, _ = layer.blocks(x, [lambda query: _attention(
        layer.self_attention, query, None, padding_mask, (layout, layout), training)],
        training=training)
    return x


def _decoder_layer(layer: DecoderLayer, x, encoder_output, masks, layouts, training):
    """`DecoderLayer.call` in the target's layout: the layer's own blocks, its attentions in
    the layouts; `masks`: (self, cross), `layouts`: (target, source). Returns the output and
    the encoder-decoder attention weights."""
    x, (_, cross_weights) = layer.blocks(
        x,
        [lambda query: _attention(layer.self_attention, query, None, masks[0],
                                  (layouts[0], layouts[0]), training),
         lambda query: _attention(layer.cross_attention, query, encoder_output, masks[1],
                                  layouts, training)],
        training=training)
    return x, cross_weights


def _attention(attention: MultiHeadAttention, query, key_value, mask, layouts, training):
    """`MultiHeadAttention.call` with `query` in `layouts[0]` and `key_value` (None: `query`)
    in `layouts[1]`: the layer's projections and eq. (1), of which only the products see the
    padded heads-first form. Returns the output and the attention weights (what `blocks`
    keeps; unused ones cost nothing in a traced step)."""
    query_layout, key_layout = layouts
    source = query if key_value is None else key_value
    query_heads = query_layout.expand_heads(attention.query_dense(query))
    keys = key_layout.expand_heads(attention.key_dense(source))
    values = key_layout.expand_heads(attention.value_dense(source))
    attended, weights = scaled_dot_product_attention(
        query_heads, keys, values, mask,
        dropout=lambda weights: attention.dropout_layer(weights, training=training))
    return attention.output_dense(query_layout.pack_heads(attended)), weights
