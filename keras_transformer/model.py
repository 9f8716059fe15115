"""The encoder-decoder Transformer (section 3) as a subclassed `keras.Model`."""
from __future__ import annotations

from typing import Any, Optional, Union

import keras
import tensorflow as tf
from keras import ops

from keras_transformer.config import TransformerConfig
from keras_transformer.logit_factors import factored_logits
from keras_transformer.layers import (DecoderLayer, Dropout, EncoderLayer, LayerNormalization,
                                      LearnedPositionalEmbedding, ScaledEmbedding,
                                      SinusoidalPositionalEncoding, TokenLayout)
from keras_transformer.vocab_ids import PAD_ID


@keras.saving.register_keras_serializable(package="keras_transformer")
class Transformer(keras.Model):
    """`model((source_ids, target_input_ids))` -> logits `[batch, target_len, vocab]`.

    Ids are int32 with 0 as padding. `encode`/`decode` expose the two halves for inference,
    `decode_step` with `init_decode_cache` runs the decoder one position at a time, and
    `attention_weights` returns every layer's and head's attention distributions.
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
        input `positions` (`[N, 2]` (row, position) indices) the logits there only, `[N, vocab]`.

        With `positions` (the train and test steps pass them, except under XLA), every
        position-wise computation (embeddings, projections, feed-forward, residuals, norms,
        dropout) also runs on the real tokens only (`TokenLayout`): the padding of bucketed
        batches costs no work there. `positions` must then be real target input tokens.
        """
        source_ids, target_input_ids, *positions = inputs
        if not positions:
            return self.decode(target_input_ids, self.encode(source_ids, training=training),
                               source_padding_mask(source_ids), training=training)
        source_layout = TokenLayout(source_ids)
        encoder_output = self.encode(source_ids, training=training, layout=source_layout)
        return self.decode(target_input_ids, encoder_output, source_padding_mask(source_ids),
                           training=training, positions=positions[0],
                           layout=TokenLayout(target_input_ids), source_layout=source_layout)

    def encode(self, source_ids, training=None, return_attention_scores: bool = False,
               layout: Optional[TokenLayout] = None):
        """Encoder output `[batch, src_len, d_model]` (and per-layer self-attention weights).

        With `layout` (`TokenLayout(source_ids)`; dynamic shapes, so not under XLA) the layers
        run on the real tokens only, and the output is packed `[N, d_model]`.
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
               return_attention_scores: bool = False, positions=None,
               layout: Optional[TokenLayout] = None,
               source_layout: Optional[TokenLayout] = None):
        """Teacher-forced logits `[batch, tgt_len, vocab]` given the encoder output.

        `source_mask`: `[batch, src_len]`, True on real source tokens. `positions`: optional
        `[N, 2]` indices; the output projection then runs on those N positions only. `layout`
        (`TokenLayout(target_input_ids)`, with `positions`): the layers run on the real target
        tokens only, as in `encode`; `source_layout`: `encoder_output` is packed by it.
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
        if layout is not None:
            x = layout.unpack(x) if positions is None else layout.select(x, positions)
        elif positions is not None:
            x = tf.gather_nd(x, positions)
        logits = self._logits(x)
        return (logits, self_weights, cross_weights) if return_attention_scores else logits

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
        its `beam_size` hypotheses. `self`: per-layer key/value buffers
        `[batch * beam_size, heads, max_length, dim]`, filled one position per step. `rows`:
        the buffer row each hypothesis extends; a beam search sets it when hypotheses move, and
        the next step takes those rows as it writes (one copy of the buffers per step).
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
            "rows": tf.range(rows),
        }

    def decode_step(self, token_ids, step, cache, source_mask):
        """Logits `[batch, beam, vocab]` for the next token after `token_ids` `[batch, beam]`.

        `token_ids` sit at target position `step` (0 for the start token); `source_mask` is
        `[batch, src_len]`. Returns the logits and the updated cache (its buffers in the order
        of `token_ids`).
        """
        x = self.target_embedding(token_ids)
        x = x + self.target_positions(x[:, :1], start_index=step)
        cross_mask = ops.expand_dims(source_mask, 1)
        new_self = []
        for layer, self_cache, cross_cache in zip(self.decoder_layers, cache["self"],
                                                  cache["cross"]):
            x, self_cache = layer.step(x, self_cache, cross_cache, step, cross_mask,
                                       cache["rows"])
            new_self.append(self_cache)
        rows = tf.range(tf.shape(cache["rows"])[0])
        logits = self._logits(x, cache["output_kernel"])
        return logits, {**cache, "self": new_self, "rows": rows}

    # ------------------------------------------------------------------ distributed training
    def _maybe_symbolic_build(self, iterator=None, data_batch=None):
        """Builds compiled state (metrics, optimizer) from one replica's local batch.

        Keras 3 all-reduces a distributed batch eagerly here only to learn its shapes, which
        fails under MultiWorkerMirroredStrategy (a PerReplica batch cannot be converted); the
        local shapes are all the symbolic build needs.
        """
        if self._distribute_strategy is None or iterator is None:
            return super()._maybe_symbolic_build(iterator=iterator, data_batch=data_batch)
        for _, _, batches in iterator:
            data_batch = keras.tree.map_structure(self._local_value, next(batches))
            break
        with self.distribute_strategy.scope():
            self._symbolic_build(data_batch=data_batch)

    def train_step(self, data):
        return self._reducible_logs(super().train_step(self._at_target_tokens(data)))

    def test_step(self, data):
        return self._reducible_logs(super().test_step(self._at_target_tokens(data)))

    def _at_target_tokens(self, data):
        """`((source, target_in), target_out)` -> `((source, target_in, positions), labels)`
        with the N real (non-padding) target positions: the output projection, the loss and
        the metrics then work on `[N, vocab]`, not `[batch, len, vocab]` with its padding.
        Left unchanged under XLA, which needs static shapes.
        """
        x, y, sample_weight = keras.utils.unpack_x_y_sample_weight(data)
        if self.jit_compile or y is None or len(x) != 2:
            return data
        stray = ops.logical_and(ops.not_equal(y, PAD_ID), ops.equal(x[1], PAD_ID))
        tf.debugging.assert_equal(  # The decoder computes nothing at padding.
            tf.reduce_any(stray), False,
            message="labels: a real (non-padding) label sits where the target input is padding; "
                    "labels must be the target input shifted by one, padded alike")
        positions = tf.where(ops.not_equal(y, PAD_ID))
        if sample_weight is not None:
            sample_weight = tf.gather_nd(sample_weight, positions)
        return keras.utils.pack_x_y_sample_weight(
            (*x, positions), tf.gather_nd(y, positions), sample_weight)

    def _reducible_logs(self, logs):
        """Gives scalar logs a leading axis under multi-worker training.

        Keras 3 reduces each step's logs across workers with `reduce("MEAN", axis=0)`, which
        rejects scalars; with shape `[1]` the reduction returns the scalar mean.
        """
        strategy = self.distribute_strategy
        if not (isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy)
                and strategy.extended._in_multi_worker_mode()):
            return logs
        return keras.tree.map_structure(lambda value: ops.reshape(value, (1,)), logs)

    def _local_value(self, value):
        if isinstance(value, tf.distribute.DistributedValues):
            return self.distribute_strategy.experimental_local_results(value)[0]
        return value

    # ---------------------------------------------------------------------------- helpers
    def _embed(self, ids, embedding, position_encoding, dropout, training, layout=None):
        """Dropout(E[ids] * sqrt(d_model) + positions): `[batch, len, d_model]`, or with `layout`
        the real tokens only, `[N, d_model]`."""
        if layout is None:
            x = embedding(ids)
            return dropout(x + position_encoding(x), training=training)
        x = embedding(layout.pack(ids))
        return dropout(x + position_encoding(x, positions=layout.token_positions),
                       training=training)

    def _logits(self, hidden, output_kernel=None):
        """Float32 logits; `output_kernel` (`_output_kernel()`) replaces the layer's product.
        Without it they are `factored_logits`, whose loss skips passes over them."""
        if self.decoder_norm is not None:
            hidden = self.decoder_norm(hidden)
        if output_kernel is not None:
            return ops.cast(ops.matmul(hidden, ops.cast(output_kernel, hidden.dtype)), "float32")
        if self.output_projection is not None:
            return factored_logits(hidden, self.output_projection.kernel, transposed=False)
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
