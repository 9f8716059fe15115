"""Self-attention caches that a beam search never reorders: the fast twin of the `cached_step`
hook (`keras_transformer.decoding.transformer_search`).

The reference state is each hypothesis' own `[heads, max_len, dim]` cache rows, which the
search gathers along the hypotheses it keeps: a copy of every cache at every step. Here each
hypothesis keeps instead its `ancestors` `[rows, max_len]`: the cache row that holds each of its
positions (a hypothesis shares the positions of the parent it extends, and writes its newest
position into its own row). The state's own reorder gathers only the ancestors. The caches are
position-major `[max_len, rows, heads, dim]` buffers written in place at each step, from which
each row gathers the `step + 1` positions of its history: one copy of the written positions
instead of the whole buffer, and an attention over `step + 1` positions instead of `max_len`.
Under XLA (static shapes, no in-place op) the reference step runs.
"""
from __future__ import annotations

from typing import Any, Optional

import tensorflow as tf
from keras import ops

from keras_transformer.decoding import transformer_search
from keras_transformer.fast import compat
from keras_transformer.layers import DecoderLayer, MultiHeadAttention
from keras_transformer.layers.attention import heads_first, scaled_dot_product, tokens_first
from keras_transformer.model import Transformer, source_padding_mask


def cached_step(model: Transformer, source_ids: tf.Tensor, beam_size: int,
                buffer_length: tf.Tensor, vocabulary_ids: Optional[tf.Tensor] = None):
    """`transformer_search.cached_step` (same arguments, same step function outputs) with
    caches that are never reordered: `(step, state, reorder)`, the state's reorder moving the
    ancestors only."""
    if compat.in_xla_context():
        return transformer_search.cached_step.reference(model, source_ids, beam_size,
                                                        buffer_length, vocabulary_ids)
    encoder_output = model.encode(source_ids, training=False)
    fixed = transformer_search.output_kernel_for(
        {"output_kernel": model.output_kernel(), "cross": model.cross_cache(encoder_output)},
        vocabulary_ids)
    rows = ops.shape(encoder_output)[0] * beam_size
    state = {"self": [_buffers(layer.self_attention, rows, buffer_length, model.compute_dtype)
                      for layer in model.decoder_layers],
             "ancestors": tf.tile(tf.range(rows)[:, None], tf.stack([1, buffer_length]))}
    cross_mask = ops.expand_dims(source_padding_mask(source_ids), 1)
    never = transformer_search.never_emitted(vocabulary_ids, model.config.output_vocab_size)

    def step(token_ids, position, state):
        ancestors = tf.where(tf.range(buffer_length) == position, tf.range(rows)[:, None],
                             state["ancestors"])
        x = model.embed_step(token_ids, position)
        caches = []
        for layer, cache, cross in zip(model.decoder_layers, state["self"], fixed["cross"]):
            x, cache = _decoder_step(layer, x, cache, cross, position, cross_mask, ancestors)
            caches.append(cache)
        logits = model.step_logits(x, fixed["output_kernel"])
        return (transformer_search.log_probs(logits, never),
                {"self": caches, "ancestors": ancestors})

    def reorder(state: dict[str, Any], parents: tf.Tensor) -> dict[str, Any]:
        return {**state, "ancestors": tf.gather(state["ancestors"], parents)}

    return step, state, reorder


def _buffers(attention: MultiHeadAttention, rows, max_length, dtype) -> dict[str, tf.Tensor]:
    """Position-major key and value buffers `[max_len, rows, heads, dim]`, from `Empty`:
    stateful, so never folded into a graph constant that the in-place writes would then modify
    across runs."""
    def buffer(dim):
        shape = tf.stack([max_length, rows, attention.num_heads, dim])
        return tf.raw_ops.Empty(shape=shape, dtype=dtype, init=True)

    return {"key": buffer(attention.key_dim), "value": buffer(attention.value_dim)}


def _decoder_step(layer: DecoderLayer, x, cache, cross_cache, position, cross_mask, ancestors):
    """`DecoderLayer.step` with this module's caches."""
    batch, beam, d_model = ops.shape(x)[0], ops.shape(x)[1], x.shape[-1]
    per_hypothesis = ops.reshape(x, (batch * beam, 1, d_model))
    attention = layer.self_attention
    query = layer.self_residual.normalize_input(per_hypothesis)
    query_heads = heads_first(attention.project_query(query))
    key_buffer, keys = _extend(cache["key"], ancestors, attention.key_dense(query), position)
    value_buffer, values = _extend(cache["value"], ancestors, attention.value_dense(query),
                                   position)
    attended, _ = scaled_dot_product(query_heads, keys, values)
    per_hypothesis = layer.self_residual(
        per_hypothesis, attention.output_dense(tokens_first(attended)))
    x, _ = layer.cross_and_feed_forward(ops.reshape(per_hypothesis, (batch, beam, d_model)),
                                        cross_mask, None, cache=cross_cache)
    return x, {"key": key_buffer, "value": value_buffer}


def _extend(buffer: tf.Tensor, ancestors: tf.Tensor, update: tf.Tensor,
            step) -> tuple[tf.Tensor, tf.Tensor]:
    """`(buffer, visible)`: position `step` of every row, `update` `[rows, 1, heads, dim]`,
    written in place into the position-major `buffer` (which the search holds alone), and what
    each row attends to, `[rows, heads, step + 1, dim]`: its positions `0 .. step`, position
    `j` from row `ancestors[row, j]`."""
    step = tf.cast(step, tf.int32)
    rows, heads, dim = tf.shape(update)[0], tf.shape(update)[2], tf.shape(update)[3]
    new = tf.reshape(tf.cast(update, buffer.dtype), [1, rows, heads, dim])
    buffer = tf.raw_ops.InplaceUpdate(x=buffer, i=tf.reshape(step, [1]), v=new)
    positions = tf.range(step + 1)
    slots = ((positions[None, None, :] * rows + ancestors[:, None, :step + 1]) * heads
             + tf.range(heads)[None, :, None])  # [rows, heads, step + 1] into (position, row, head)
    return buffer, tf.gather(tf.reshape(buffer, [-1, dim]), slots)
