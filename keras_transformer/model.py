"""The encoder-decoder Transformer (section 3) as a subclassed `keras.Model`."""
from __future__ import annotations

from typing import Any, Union

import keras
import tensorflow as tf
from keras import ops

from keras_transformer import kernels
from keras_transformer.config import TransformerConfig
from keras_transformer.fit_steps import FitSteps
from keras_transformer.kernels import PADDED
from keras_transformer.layers import (DecoderLayer, Dropout, EncoderLayer, LayerNormalization,
                                      LearnedPositionalEmbedding, ScaledEmbedding,
                                      SinusoidalPositionalEncoding)
from keras_transformer.logit_factors import LogitFactors, factor_logits
from keras_transformer.vocab_ids import PAD_ID


@keras.saving.register_keras_serializable(package="keras_transformer")
class Transformer(FitSteps, keras.Model):
    """`model((source_ids, target_input_ids))` -> logits `[batch, target_len, vocab]`.

    Ids are int32 with 0 as padding. `encode`/`decode` expose the two halves for inference,
    `decode_step` with `init_decode_cache` runs the decoder one position at a time, and
    `attention_weights` returns every layer's and head's attention distributions. Training
    with `fit`/`evaluate` goes through `FitSteps`.
    """

    def __init__(self, config: Union[TransformerConfig, dict[str, Any]], **kwargs):
        super().__init__(**kwargs)
        if isinstance(config, dict):
            config = TransformerConfig.from_saved(config)
        self.config = config
        c = config
        self.source_embedding = ScaledEmbedding(
            c.vocab_size, c.d_model,
            name="shared_embedding" if c.share_embeddings else "source_embedding")
        self.target_embedding = (self.source_embedding if c.share_embeddings else ScaledEmbedding(
            c.output_vocab_size, c.d_model, name="target_embedding"))
        self.output_projection = (None if c.tie_output else keras.layers.Dense(
            c.output_vocab_size, use_bias=False, name="output_projection"))
        if c.positional == "sinusoidal":
            self.source_positions = SinusoidalPositionalEncoding(name="positional_encoding")
            self.target_positions = self.source_positions
        else:
            self.source_positions = LearnedPositionalEmbedding(c.max_length,
                                                               name="source_positions")
            self.target_positions = LearnedPositionalEmbedding(c.max_length,
                                                               name="target_positions")
        self.source_dropout = Dropout(c.dropout)
        self.target_dropout = Dropout(c.dropout)
        layer_args = dict(num_heads=c.num_heads, key_dim=c.key_dim, value_dim=c.value_dim,
                          d_ff=c.d_ff, dropout=c.dropout, attention_dropout=c.attention_dropout,
                          attention_bias=c.attention_bias, norm=c.norm,
                          epsilon=c.layer_norm_epsilon)
        self.encoder_layers = [EncoderLayer(**layer_args, name=f"encoder_layer_{i}")
                               for i in range(c.num_layers)]
        self.decoder_layers = [DecoderLayer(**layer_args, name=f"decoder_layer_{i}")
                               for i in range(c.num_layers)]
        # Pre-norm stacks end with a final normalization; post-norm layers already end with one.
        final_norm = (lambda name: LayerNormalization(
            epsilon=c.layer_norm_epsilon, name=name) if c.norm == "pre" else None)
        self.encoder_norm = final_norm("encoder_norm")
        self.decoder_norm = final_norm("decoder_norm")
        self.build()

    def build(self, input_shape=None) -> None:
        hidden = (None, None, self.config.d_model)
        # Shared layers (tied embeddings, one sinusoid table) appear twice; build them once.
        unique = {id(layer): layer for layer in (
            self.source_embedding, self.target_embedding, self.source_positions,
            self.target_positions, self.encoder_norm, self.decoder_norm, self.output_projection,
            *self.encoder_layers) if layer is not None}
        for layer in unique.values():
            layer.build(hidden)
        for layer in self.decoder_layers:
            layer.build(hidden, hidden)
        self.built = True

    # ----------------------------------------------------------------------------- training
    def call(self, inputs, training=None):
        """`(source_ids, target_input_ids)` -> logits `[batch, tgt_len, vocab]`, or with a third
        input `positions` (`[N, 2]` (row, position) indices) the logits there only, `[N, vocab]`
        (see `logit_factors`)."""
        return self.logit_factors(inputs, training=training).logits

    def logit_factors(self, inputs, training=None) -> LogitFactors:
        """`call`'s logits with their factors `hidden @ kernel` (for a loss that differentiates
        through them).

        With `positions` (the train and test steps pass them), every position-wise computation
        (embeddings, projections, feed-forward, residuals, norms, dropout) runs in
        `kernels.token_layout`: with fast kernels on the real tokens only, so that the padding
        of bucketed batches costs no work there. `positions` must then be real target input
        tokens.
        """
        source_ids, target_input_ids, *positions = inputs
        source_layout = target_layout = PADDED
        if positions:
            source_layout = kernels.token_layout(source_ids)
            target_layout = kernels.token_layout(target_input_ids)
        encoder_output = self.encode(source_ids, training=training, layout=source_layout)
        factors, _, _ = self._decode_factors(
            target_input_ids, encoder_output, source_padding_mask(source_ids), training,
            positions=positions[0] if positions else None, layout=target_layout,
            source_layout=source_layout)
        return factors

    def encode(self, source_ids, training=None, return_attention_scores: bool = False,
               layout=PADDED):
        """Encoder output `[batch, src_len, d_model]` (and per-layer self-attention weights).

        With `layout` a `kernels.TokenLayout(source_ids)` (dynamic shapes, so not under XLA)
        the layers run on the real tokens only, and the output is packed `[N, d_model]`.
        """
        x = self._embed(source_ids, self.source_embedding, self.source_positions,
                        self.source_dropout, training, layout)
        mask = ops.expand_dims(source_padding_mask(source_ids), 1)
        weights = []
        for layer in self.encoder_layers:
            x, layer_weights = layer(x, padding_mask=mask, training=training,
                                     return_attention_scores=True, layout=layout)
            weights.append(layer_weights)
        if self.encoder_norm is not None:
            x = self.encoder_norm(x)
        return (x, weights) if return_attention_scores else x

    def decode(self, target_input_ids, encoder_output, source_mask, training=None,
               return_attention_scores: bool = False):
        """Teacher-forced logits `[batch, tgt_len, vocab]` given the encoder output
        `[batch, src_len, d_model]` (and per-layer self and encoder-decoder attention weights).

        `source_mask`: `[batch, src_len]`, True on real source tokens.
        """
        factors, self_weights, cross_weights = self._decode_factors(
            target_input_ids, encoder_output, source_mask, training)
        if return_attention_scores:
            return factors.logits, self_weights, cross_weights
        return factors.logits

    def _decode_factors(self, target_input_ids, encoder_output, source_mask, training,
                        positions=None, layout=PADDED, source_layout=PADDED):
        """`decode`'s logits as `LogitFactors`, and the attention weights.

        `positions`: optional `[N, 2]` indices; the output projection then runs on those N
        positions only. `layout`: the target's layout, `source_layout` that of
        `encoder_output`.
        """
        x = self._embed(target_input_ids, self.target_embedding, self.target_positions,
                        self.target_dropout, training, layout)
        self_mask = causal_mask(target_input_ids)
        cross_mask = ops.expand_dims(source_mask, 1)
        self_weights, cross_weights = [], []
        for layer in self.decoder_layers:
            x, (layer_self, layer_cross) = layer(
                x, encoder_output, self_mask=self_mask, cross_mask=cross_mask,
                training=training, return_attention_scores=True, layout=layout,
                source_layout=source_layout)
            self_weights.append(layer_self)
            cross_weights.append(layer_cross)
        x = layout.unpack(x) if positions is None else layout.select(x, positions)
        return self._output_factors(x), self_weights, cross_weights

    def attention_weights(self, source_ids, target_input_ids) -> dict[str, list]:
        """Every layer's attention, each `[batch, heads, query_len, key_len]`, at inference."""
        encoder_output, encoder_self = self.encode(source_ids, return_attention_scores=True)
        _, decoder_self, encoder_decoder = self.decode(
            target_input_ids, encoder_output, source_padding_mask(source_ids),
            return_attention_scores=True)
        return {"encoder_self": encoder_self, "decoder_self": decoder_self,
                "encoder_decoder": encoder_decoder}

    # ------------------------------------------------------------------ incremental decoding
    def init_decode_cache(self, encoder_output, beam_size: int, max_length) -> dict[str, Any]:
        """Decoder state for `decode_step`.

        `cross`: each layer's encoder keys/values, computed once per sentence and shared by
        its `beam_size` hypotheses. `self`: per-layer key/value caches of `batch * beam_size`
        rows and `max_length` positions (`kernels.decode_buffer`), filled one position per
        step. `ancestors` `[batch * beam_size, max_length]`: the cache row holding each
        position of each hypothesis (its own row to begin with; a beam search gathers the
        rows of the parents its hypotheses extend, `decode_step` sets the newest position).
        `output_kernel`: the pre-softmax projection `[d_model, vocab]`, laid out once per search
        (a product with the transposed `[vocab, d_model]` embedding is much slower for the few
        rows of a decoding step).
        """
        rows = ops.shape(encoder_output)[0] * beam_size
        return {
            "output_kernel": self._output_kernel(),
            "cross": [layer.cross_attention.project_key_value(encoder_output)
                      for layer in self.decoder_layers],
            "self": [layer.self_attention.init_cache(rows, max_length, self.compute_dtype)
                     for layer in self.decoder_layers],
            "ancestors": tf.tile(tf.range(rows)[:, None], tf.stack([1, max_length])),
        }

    def decode_step(self, token_ids, step, cache, source_mask):
        """Logits `[batch, beam, vocab]` for the next token after `token_ids` `[batch, beam]`.

        `token_ids` sit at target position `step` (0 for the start token); `source_mask` is
        `[batch, src_len]`. Returns the logits and the updated cache (each hypothesis's
        position `step` written into its own row).
        """
        x = self.target_embedding(token_ids)
        x = x + self.target_positions(x[:, :1], start_index=step)
        cross_mask = ops.expand_dims(source_mask, 1)
        ancestors = cache["ancestors"]
        rows, max_length = tf.shape(ancestors)[0], tf.shape(ancestors)[1]
        ancestors = tf.where(tf.range(max_length) == step, tf.range(rows)[:, None], ancestors)
        new_self = []
        for layer, self_cache, cross_cache in zip(self.decoder_layers, cache["self"],
                                                  cache["cross"]):
            x, self_cache = layer.step(x, self_cache, cross_cache, step, cross_mask, ancestors)
            new_self.append(self_cache)
        if self.decoder_norm is not None:
            x = self.decoder_norm(x)
        logits = ops.cast(ops.matmul(x, ops.cast(cache["output_kernel"], x.dtype)), "float32")
        return logits, {**cache, "self": new_self, "ancestors": ancestors}

    # ---------------------------------------------------------------------------- helpers
    def _embed(self, ids, embedding, position_encoding, dropout, training, layout):
        """Dropout(E[ids] * sqrt(d_model) + positions) in `layout`: `[batch, len, d_model]`, or
        with a `TokenLayout` the real tokens only, `[N, d_model]`."""
        x = embedding(layout.pack(ids))
        return dropout(x + position_encoding(x, positions=layout.token_positions),
                       training=training)

    def _output_factors(self, hidden) -> LogitFactors:
        """Float32 logits of the decoder output `hidden`, with their factors."""
        if self.decoder_norm is not None:
            hidden = self.decoder_norm(hidden)
        if self.output_projection is not None:
            return factor_logits(hidden, self.output_projection.kernel, transposed=False)
        return self.target_embedding.logits(hidden)

    def _output_kernel(self):
        """The pre-softmax projection as a `[d_model, vocab]` tensor in the compute dtype (a
        copy when tied), so that decoding steps neither transpose nor cast it."""
        if self.output_projection is not None:
            kernel = self.output_projection.kernel
        else:
            kernel = tf.transpose(self.target_embedding.embeddings)
        return ops.cast(kernel, self.compute_dtype)

    def get_config(self) -> dict[str, Any]:
        return {"name": self.name, "config": self.config.to_dict()}

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> "Transformer":
        return cls(**config)  # `__init__` reads a saved config dict with `from_saved`


def source_padding_mask(ids):
    """`[batch, len]` booleans, True on real (non-padding) tokens."""
    return ops.not_equal(ids, PAD_ID)


def causal_mask(target_ids):
    """`[batch, len, len]`: query i may see key j iff j <= i and key j is not padding."""
    length = ops.shape(target_ids)[1]
    positions = ops.arange(length)
    lower_triangle = ops.expand_dims(positions, 1) >= ops.expand_dims(positions, 0)
    return ops.logical_and(ops.expand_dims(lower_triangle, 0),
                           ops.expand_dims(source_padding_mask(target_ids), 1))
