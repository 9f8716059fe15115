"""A lean decoding step whose self-attention caches a beam search never reorders: the fast twin
of `keras_transformer.decoding.transformer_search.cached_step`, given to the searches as their
`step_builder` (`keras_transformer.fast.decoding_step()` picks it with the fast kernel set).

Caches. The reference state is each hypothesis' own `[heads, max_len, dim]` cache rows, which
the search gathers along the hypotheses it keeps: a copy of every cache at every step. Here each
hypothesis keeps instead its `ancestors` `[rows, max_len]`: the cache row that holds each of its
positions (a hypothesis shares the positions of the parent it extends, and writes its newest
position into its own row). The state's own reorder gathers only the ancestors. The caches are
position-major `[max_len, rows, heads, dim]` buffers written in place at each step, from which
each row gathers the `step + 1` positions of its history: one copy of the written positions
instead of the whole buffer, and an attention over `step + 1` positions instead of `max_len`.

Fewer ops a step. At one sentence a step's matmuls are small and the graph executor's cost per
op is much of the time, so whatever does not depend on the position is done once per search:
weights are read, flattened into matrices and cast once (the self-attention's query, key and
value projections fused into one matrix), the positional encodings are tabulated, and the
rows where a step gathers each hypothesis' history are computed once for all layers. The step
runs on `[rows, d_model]` matrices with the core's eq. (1), reference products and layer norms
(the fast kernels' custom gradients would add ops a search never differentiates).

Under XLA (static shapes) the same step runs with a static history: each row gathers all
`max_len` positions, those after the step masked, and a position is written by a scatter, which
XLA does in place. Against the reference caches this saves the where-select that writes a
position and the reorder's copy, two of the five passes over the caches a step makes.
"""
from __future__ import annotations

from typing import Any, Optional

import tensorflow as tf

from keras_transformer.decoding import transformer_search
from keras_transformer.fast import compat
from keras_transformer.layers import DecoderLayer, LayerNorm, ResidualNorm
from keras_transformer.layers.attention import (heads_first, scaled_dot_product_attention,
                                                tokens_first)
from keras_transformer.layers.dense import activate, linear
from keras_transformer.layers.residual import layer_norm
from keras_transformer.model import Transformer, source_padding_mask

Matrix = tuple[tf.Tensor, Optional[tf.Tensor]]  # a kernel `[in, out]` and its bias (or None)


def lean_step(model: Transformer, source_ids: tf.Tensor, beam_size: int,
                buffer_length: tf.Tensor, vocabulary_ids: Optional[tf.Tensor] = None,
                unscored: Optional[tf.Tensor] = None):
    """`transformer_search.cached_step` (same arguments, same step function outputs) with
    caches that are never reordered: `(step, state, reorder)`, the state's reorder moving the
    ancestors only."""
    static = compat.in_xla_context()
    dtype = model.compute_dtype
    encoder_output = model.encode(source_ids, training=False)
    rows = tf.shape(encoder_output)[0] * beam_size
    cross_mask = tf.expand_dims(source_padding_mask(source_ids), 1)
    layers = [_LayerStep(layer, encoder_output, cross_mask, dtype)
              for layer in model.decoder_layers]
    output = model.output_weights(vocabulary_ids)
    positions = model.target_positions.at(tf.range(buffer_length))
    heads = layers[0].heads
    state = {"self": [layer.empty_cache(rows, buffer_length, static) for layer in layers],
             "ancestors": tf.tile(tf.range(rows)[:, None], tf.stack([1, buffer_length]))}
    never = transformer_search.never_emitted(vocabulary_ids, model.config.output_vocab_size)

    def step(token_ids, position, state):
        ancestors = tf.where(tf.range(buffer_length) == position, tf.range(rows)[:, None],
                             state["ancestors"])
        if static:  # every position, the unwritten ones masked
            slots = _history_slots(ancestors, buffer_length - 1, heads)
            written = (tf.range(buffer_length) <= position)[None, None]
        else:
            slots, written = _history_slots(ancestors, position, heads), None
        embedded = model.target_embedding(token_ids)
        x = model.embedding_output(tf.reshape(embedded, [rows, -1]) + positions[position],
                                   "target")
        caches = []
        for layer, cache in zip(layers, state["self"]):
            x, cache = layer(x, cache, position, slots, written)
            caches.append(cache)
        logits = model.step_logits(tf.reshape(x, tf.shape(embedded)), output)
        return (transformer_search.log_probs(logits, never, unscored),
                {"self": caches, "ancestors": ancestors})

    def reorder(state: dict[str, Any], parents: tf.Tensor) -> dict[str, Any]:
        return {**state, "ancestors": tf.gather(state["ancestors"], parents)}

    return step, state, reorder


class _LayerStep:
    """`DecoderLayer.step` on `[rows, d_model]` with the position-major caches, from weights
    prepared once per search (call it with `(x, cache, position, slots, written)`): the
    layer's own `blocks` with sub-layers and residual blocks of its own."""

    def __init__(self, layer: DecoderLayer, encoder_output: tf.Tensor, cross_mask: tf.Tensor,
                 dtype: str):
        self.layer = layer
        own, cross = layer.self_attention, layer.cross_attention
        self.heads, self.key_dim, self.value_dim = own.num_heads, own.key_dim, own.value_dim
        projections = [dense.matrix(dtype)
                       for dense in (own.query_dense, own.key_dense, own.value_dense)]
        self.query_key_value = (tf.concat([kernel for kernel, _ in projections], axis=1),
                                None if projections[0][1] is None else
                                tf.concat([bias for _, bias in projections], axis=0))
        self.self_output = own.output_dense.matrix(dtype)
        self.cross_query = cross.query_dense.matrix(dtype)
        self.cross_output = cross.output_dense.matrix(dtype)
        self.cross_keys, self.cross_values = cross.project_key_value(encoder_output)
        self.cross_mask = cross_mask  # `[batch, 1, src_len]`, True on real source tokens
        self.inner = layer.feed_forward.inner.matrix(dtype)
        self.activation = layer.feed_forward.activation
        self.outer = layer.feed_forward.outer.matrix(dtype)
        self.blocks = [_Residual(block) for block in (layer.self_residual, layer.cross_residual,
                                                      layer.feed_forward_residual)]
        self.dtype = dtype

    def empty_cache(self, rows, max_length, static: bool) -> dict[str, tf.Tensor]:
        """Position-major key and value buffers `[max_len, rows, heads, dim]`: zeros under XLA
        (`static`), else from `Empty`, which is stateful, so never folded into a graph
        constant that the in-place writes would then modify across runs."""
        def buffer(dim):
            shape = tf.stack([max_length, rows, self.heads, dim])
            if static:
                return tf.zeros(shape, self.dtype)
            return tf.raw_ops.Empty(shape=shape, dtype=self.dtype, init=True)

        return {"key": buffer(self.key_dim), "value": buffer(self.value_dim)}

    def __call__(self, x, cache, position, slots, written=None
                 ) -> tuple[tf.Tensor, dict[str, tf.Tensor]]:
        """The layer's output `[rows, d_model]` for its input `x` at `position`, and the cache
        with that position written; `written`: `[1, 1, slots]`, True on the history slots up
        to `position`, when `slots` hold every position (XLA)."""
        x, (cache, _) = self.layer.blocks(
            x, lambda query: self._self_attention(query, cache, position, slots, written),
            lambda query: (self._cross_attention(query), None), self._feed_forward,
            self.blocks)
        return x, cache

    def _self_attention(self, x, cache, position, slots, written):
        with tf.name_scope("self_attention"):  # each part in its own scope, for profiles
            width = self.heads * self.key_dim
            query, key, value = tf.split(_linear(x, self.query_key_value),
                                         [width, width, self.heads * self.value_dim], axis=1)
            in_place = written is None
            key_buffer, keys = _extend(cache["key"], slots, key, position, in_place)
            value_buffer, values = _extend(cache["value"], slots, value, position, in_place)
            query = tf.reshape(query, [-1, self.heads, 1, self.key_dim])
            attended, _ = scaled_dot_product_attention(query, keys, values, written)
            return (_linear(self._concatenated(attended), self.self_output),
                    {"key": key_buffer, "value": value_buffer})

    def _cross_attention(self, x):
        with tf.name_scope("cross_attention"):
            per_sentence = tf.stack([tf.shape(self.cross_keys)[0], -1, self.heads,
                                     self.key_dim])  # the beam is the query axis
            query = tf.reshape(_linear(x, self.cross_query), per_sentence)
            attended, _ = scaled_dot_product_attention(heads_first(query), self.cross_keys,
                                                       self.cross_values, self.cross_mask)
            return _linear(self._concatenated(tokens_first(attended)), self.cross_output)

    def _feed_forward(self, x):
        with tf.name_scope("feed_forward"):
            inner = _linear(x, self.inner, relu=self.activation == "relu")
            if self.activation != "relu":
                inner = activate(inner, self.activation)
            return _linear(inner, self.outer)

    def _concatenated(self, attended: tf.Tensor) -> tf.Tensor:
        """The heads' outputs of each row side by side, `[rows, heads * d_v]` (W^O's input)."""
        return tf.reshape(attended, [-1, self.heads * self.value_dim])


class _Residual:
    """A `ResidualNorm` block at inference with its layer norm's weights read once (same
    interface): post-norm `LN(x + f(x))`, pre-norm `x + f(LN(x))`."""

    def __init__(self, block: ResidualNorm):
        norm: LayerNorm = block.layer_norm
        self.pre = block.norm == "pre"
        self.gamma, self.beta = tf.convert_to_tensor(norm.gamma), tf.convert_to_tensor(norm.beta)
        self.epsilon = norm.epsilon

    def normalize_input(self, x):
        return self._normalize(x) if self.pre else x

    def __call__(self, x, sublayer_output, training=None):
        summed = x + sublayer_output
        return summed if self.pre else self._normalize(summed)

    def _normalize(self, x):
        with tf.name_scope("layer_norm"):
            return layer_norm.reference(x, self.gamma, self.beta, self.epsilon)


def _linear(rows: tf.Tensor, matrix: Matrix, relu: bool = False) -> tf.Tensor:
    """`rows @ kernel + bias` (then ReLU) with the core's reference product."""
    return linear.reference(rows, *matrix, relu=relu)


def _history_slots(ancestors: tf.Tensor, step, heads: int) -> tf.Tensor:
    """`[rows, heads, step + 1]` indices into a position-major buffer flattened to `[max_len *
    rows * heads, dim]`: row `r`'s position `j` is in row `ancestors[r, j]` (the same for every
    layer's keys and values)."""
    step = tf.cast(step, tf.int32)
    rows = tf.shape(ancestors)[0]
    positions = tf.range(step + 1)
    return ((positions[None, None, :] * rows + ancestors[:, None, :step + 1]) * heads
            + tf.range(heads)[None, :, None])


def _extend(buffer: tf.Tensor, slots: tf.Tensor, update: tf.Tensor, step,
            in_place: bool = True) -> tuple[tf.Tensor, tf.Tensor]:
    """`(buffer, visible)`: position `step` of every row, `update` `[rows, heads * dim]`, written
    into the position-major `buffer` `[max_len, rows, heads, dim]` (which the search holds
    alone), and what each row attends to, `[rows, heads, positions, dim]`, gathered at `slots`
    (`_history_slots`).

    Args:
        buffer: the keys or values of every position written so far.
        slots: `[rows, heads, positions]` indices of each row's history.
        update: this position's keys or values.
        step: the position written.
        in_place: write with `InplaceUpdate` (graphs); False: with a scatter (what XLA
            compiles, and does in place).

    Returns:
        The written buffer and the gathered history.
    """
    dim = tf.shape(buffer)[3]
    new = tf.reshape(tf.cast(update, buffer.dtype), tf.concat([[1], tf.shape(buffer)[1:]], 0))
    step = tf.reshape(tf.cast(step, tf.int32), [1])
    if in_place:
        buffer = tf.raw_ops.InplaceUpdate(x=buffer, i=step, v=new)
    else:
        buffer = tf.tensor_scatter_nd_update(buffer, step[:, None], new)
    return buffer, tf.gather(tf.reshape(buffer, [-1, dim]), slots)
