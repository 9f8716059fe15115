"""The encoder-decoder Transformer (section 3) as a subclassed `keras.Model`."""
from __future__ import annotations

from typing import Any, Optional, Union

import keras
import tensorflow as tf
from keras import ops

from keras_transformer.config import PAD_ID, TransformerConfig
from keras_transformer.layers import (DecoderLayer, EncoderLayer, HeadsDense, HookDropout,
                                      LayerNorm, LearnedPositionalEmbedding, ScaledEmbedding,
                                      SinusoidalPositionalEncoding)
from keras_transformer.layers.attention import history_slots
from keras_transformer.layers.dense import lora_settings
from keras_transformer.layers.encoder_decoder import norm_weights, step_normalize
from keras_transformer.optimization import with_loss_scaling


@keras.saving.register_keras_serializable(package="keras_transformer")
class Transformer(keras.Model):
    """`model((source_ids, target_input_ids))` -> logits `[batch, target_len, vocab]`.

    Ids are int32 with 0 as padding. `encode`/`decode` expose the two halves for inference,
    `decode_step` with `init_decode_cache` runs the decoder one position at a time, and
    `attention_weights` returns every layer's and head's attention distributions. `fit` and
    `evaluate` run Keras's own steps (`keras_transformer.fast.FastTransformer` is this model
    with faster ones). `lora_rank=` (the adapters built with the model) or `enable_lora(rank)`
    (on a built model, e.g. after `load_weights`) fine-tunes low-rank adapters of the
    projections only.
    """

    def __init__(self, config: Union[TransformerConfig, dict[str, Any]],
                 lora_rank: Optional[int] = None, lora_alpha: Optional[float] = None, **kwargs):
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
            self.source_positions = SinusoidalPositionalEncoding(c.sinusoid_layout,
                                                                 name="positional_encoding")
            self.target_positions = self.source_positions
        else:
            self.source_positions = LearnedPositionalEmbedding(c.max_length,
                                                               name="source_positions")
            self.target_positions = LearnedPositionalEmbedding(c.max_length,
                                                               name="target_positions")
        self.source_dropout = HookDropout(c.dropout)
        self.target_dropout = HookDropout(c.dropout)
        embedding_norm = (lambda name: LayerNorm(
            epsilon=c.layer_norm_epsilon, name=name) if c.embedding_norm else None)
        self.source_embedding_norm = embedding_norm("source_embedding_norm")
        self.target_embedding_norm = embedding_norm("target_embedding_norm")
        layer_args = dict(num_heads=c.num_heads, key_dim=c.key_dim, value_dim=c.value_dim,
                          d_ff=c.d_ff, dropout=c.dropout, attention_dropout=c.attention_dropout,
                          attention_bias=c.attention_bias, norm=c.norm,
                          epsilon=c.layer_norm_epsilon, activation=c.activation,
                          **lora_settings(lora_rank, lora_alpha))
        self.encoder_layers = [EncoderLayer(**layer_args, name=f"encoder_layer_{i}")
                               for i in range(c.encoder_depth)]
        self.decoder_layers = [DecoderLayer(**layer_args, name=f"decoder_layer_{i}")
                               for i in range(c.decoder_depth)]
        # Pre-norm stacks end with a final normalization; post-norm layers already end with one.
        final_norm = (lambda name: LayerNorm(
            epsilon=c.layer_norm_epsilon, name=name) if c.norm == "pre" else None)
        self.encoder_norm = final_norm("encoder_norm")
        self.decoder_norm = final_norm("decoder_norm")
        self.output_bias = None
        self.build()
        self.lora_rank = self.lora_alpha = None
        if lora_rank:  # the projections built their adapters
            self._train_adapters_only()

    def build(self, input_shape=None) -> None:
        hidden = (None, None, self.config.d_model)
        # Shared layers (tied embeddings, one sinusoid table) appear twice; build them once.
        unique = {id(layer): layer for layer in (
            self.source_embedding, self.target_embedding, self.source_positions,
            self.target_positions, self.encoder_norm, self.decoder_norm, self.output_projection,
            self.source_embedding_norm, self.target_embedding_norm,
            *self.encoder_layers) if layer is not None}
        for layer in unique.values():
            layer.build(hidden)
        for layer in self.decoder_layers:
            layer.build(hidden, hidden)
        if self.config.output_bias:
            self.output_bias = self.add_weight(name="output_bias",
                                               shape=(self.config.output_vocab_size,),
                                               initializer="zeros", autocast=False)
        self.built = True

    def compile(self, optimizer="rmsprop", *args, auto_scale_loss: bool = True, **kwargs):
        """`keras.Model.compile`; under `mixed_float16` (with `auto_scale_loss`) the optimizer
        is wrapped in `optimization.LossScaleOptimizer`, whose overflow decision covers every
        replica, instead of Keras's own."""
        if auto_scale_loss:
            optimizer = with_loss_scaling(keras.optimizers.get(optimizer), self.dtype_policy)
        super().compile(optimizer, *args, auto_scale_loss=auto_scale_loss, **kwargs)

    def compile_from_config(self, config: dict[str, Any]) -> None:
        """Compiles as the saved `get_compile_config()` says, through `compile` above, and
        creates the optimizer's variables: `keras.models.load_model` then restores their saved
        values (Keras's own method does neither for a model whose `compile` is overridden)."""
        self.compile(**keras.saving.deserialize_keras_object(config))
        if self.built:
            self.optimizer.build(self.trainable_variables)

    def call(self, inputs, training=None):
        """`(source_ids, target_input_ids)` -> logits `[batch, tgt_len, vocab]` (float32)."""
        source_ids, target_input_ids = inputs
        encoder_output = self.encode(source_ids, training=training)
        return self.decode(target_input_ids, encoder_output, source_padding_mask(source_ids),
                           training=training)

    def encode(self, source_ids, training=None, return_attention_scores: bool = False):
        """Encoder output `[batch, src_len, d_model]` (and per-layer self-attention weights)."""
        x = self.embed(source_ids, "source", training)
        mask = ops.expand_dims(source_padding_mask(source_ids), 1)
        weights = []
        for layer in self.encoder_layers:
            x, layer_weights = layer(x, padding_mask=mask, training=training,
                                     return_attention_scores=True)
            weights.append(layer_weights)
        if self.encoder_norm is not None:
            x = self.encoder_norm(x)
        return (x, weights) if return_attention_scores else x

    def decode(self, target_input_ids, encoder_output, source_mask, training=None,
               return_attention_scores: bool = False):
        """Teacher-forced logits `[batch, tgt_len, vocab]` given the encoder output.

        Args:
            target_input_ids: `[batch, tgt_len]`, BOS first.
            encoder_output: `[batch, src_len, d_model]`.
            source_mask: `[batch, src_len]`, True on real source tokens.
            training: dropout.
            return_attention_scores: also return the per-layer self and encoder-decoder
                attention weights.
        """
        x = self.embed(target_input_ids, "target", training)
        self_mask = causal_mask(target_input_ids)
        cross_mask = ops.expand_dims(source_mask, 1)
        self_weights, cross_weights = [], []
        for layer in self.decoder_layers:
            x, (layer_self, layer_cross) = layer(
                x, encoder_output, self_mask=self_mask, cross_mask=cross_mask,
                training=training, return_attention_scores=True)
            self_weights.append(layer_self)
            cross_weights.append(layer_cross)
        logits = self.output_logits(x)
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
    def init_decode_cache(self, encoder_output, rows_per_sentence: int, max_length,
                          vocabulary_ids=None, static_shapes: bool = False) -> dict[str, Any]:
        """The decoder's state for `decode_step`: `rows_per_sentence` hypotheses (rows) of each
        sentence of `encoder_output` `[batch, src_len, d_model]`, at most `max_length`
        positions.

        Fixed during a search: `output`, what `step_logits` applies (`output_weights`, of
        `vocabulary_ids` only when given); `embedding`, the target positional encodings of
        positions `0 .. max_length - 1` as `positions` and, with `embedding_norm`, the norm's
        weights as `norm`; `layers`, each decoder layer's
        `DecoderLayer.step_weights` (its matrices, and the encoder keys and values each
        sentence's rows share). Written by each step: `self`, each layer's self-attention
        cache (`MultiHeadAttention.init_cache`, position-major), and `ancestors`
        `[rows, max_length]`, the cache row holding each position of each row's history. A
        row writes its newest position into its own cache row; a beam search moving
        hypotheses moves their ancestors (`reorder_decode_cache`), never the caches.
        `static_shapes`: buffers for XLA (`decode_step`'s), and a tied output matrix read as
        stored (`output_weights`' `tied_rows`).
        """
        dtype = self.compute_dtype
        rows = ops.shape(encoder_output)[0] * rows_per_sentence
        return {"output": self.output_weights(vocabulary_ids, tied_rows=static_shapes),
                "embedding": self._with_norm(
                    {"positions": self.target_positions.at(ops.arange(max_length))},
                    self.target_embedding_norm),
                "layers": [layer.step_weights(encoder_output, dtype)
                           for layer in self.decoder_layers],
                "self": [layer.self_attention.init_cache(rows, max_length, dtype, static_shapes)
                         for layer in self.decoder_layers],
                "ancestors": tf.tile(tf.range(rows)[:, None], tf.stack([1, max_length]))}

    def decode_step(self, token_ids, position, cache, source_mask, static_shapes: bool = False):
        """Logits `[batch, per sentence, vocab]` for the next token after `token_ids`
        `[batch, per sentence]` at target `position` (0 for the start token), and `cache`
        (`init_decode_cache`) with that position written.

        `source_mask`: `[batch, src_len]`, True on real source tokens. `static_shapes` (what
        XLA compiles): each row reads every position of its history, those after `position`
        masked, instead of its `position + 1` written ones.
        """
        ancestors = cache["ancestors"]
        rows, max_length = tf.shape(ancestors)[0], tf.shape(ancestors)[1]
        # Each row writes this position into its own cache row.
        ancestors = tf.where(tf.range(max_length) == position, tf.range(rows)[:, None],
                             ancestors)
        if static_shapes:
            slots = history_slots(ancestors, max_length, self.config.num_heads)
            written = (tf.range(max_length) <= position)[None, None]
        else:
            slots, written = history_slots(ancestors, position + 1, self.config.num_heads), None
        embedded = self.embed_step(token_ids, position, cache["embedding"])
        x = tf.reshape(embedded, [rows, -1])  # one row per hypothesis, each sentence's in turn
        cross_mask = ops.expand_dims(source_mask, 1)
        new_self = []
        for layer, weights, self_cache in zip(self.decoder_layers, cache["layers"],
                                              cache["self"]):
            x, self_cache = layer.step(x, weights, self_cache, position, slots=slots,
                                       written=written, cross_mask=cross_mask)
            new_self.append(self_cache)
        logits = self.step_logits(tf.reshape(x, tf.shape(embedded)), cache["output"])
        return logits, {**cache, "self": new_self, "ancestors": ancestors}

    def embed_step(self, token_ids, position, embedding: dict[str, Any]):
        """The decoder input `[batch, per sentence, d_model]` of `token_ids` at target
        `position`, with `embedding` (`init_decode_cache`'s: the positional encodings and the
        embedding norm's weights), as `embed` computes it at inference."""
        embedded = self.target_embedding(token_ids) + embedding["positions"][position]
        return step_normalize(embedded, embedding["norm"]) if "norm" in embedding else embedded

    @staticmethod
    def reorder_decode_cache(cache: dict[str, Any], parents) -> dict[str, Any]:
        """`cache` (`init_decode_cache`) with row `i` continuing row `parents[i]`: only the
        `ancestors` move (a beam search's reorder)."""
        return {**cache, "ancestors": tf.gather(cache["ancestors"], parents)}

    def step_logits(self, hidden, output: dict[str, tf.Tensor]):
        """Float32 logits `[batch, per sentence, vocab]` of a decoding step's output `hidden`
        with `output` (`output_weights()`: the final norm, the pre-softmax projection or its
        shortlisted part, and the bias)."""
        if "norm" in output:
            hidden = step_normalize(hidden, output["norm"])
        if "tied_rows" in output:  # h E^T, one product of all rows with E's rows as stored
            table = ops.cast(output["tied_rows"], hidden.dtype)
            logits = tf.matmul(tf.reshape(hidden, [-1, tf.shape(table)[1]]), table,
                               transpose_b=True)
            logits = tf.reshape(logits, tf.concat([tf.shape(hidden)[:-1], tf.shape(table)[:1]],
                                                  0))
        else:
            logits = ops.matmul(hidden, ops.cast(output["kernel"], hidden.dtype))
        logits = ops.cast(logits, "float32")
        return logits + output["bias"] if "bias" in output else logits

    # ---------------------------------------------------------------------------- helpers
    def embed(self, ids, side: str, training):
        """Dropout(E[ids] * sqrt(d_model) + positions) `[batch, len, d_model]` (section 3.4) of
        the `side` ("source" or "target")."""
        x = getattr(self, f"{side}_embedding")(ids)
        x = self.embedding_output(x + getattr(self, f"{side}_positions")(x), side)
        return getattr(self, f"{side}_dropout")(x, training=training)

    def embedding_output(self, x, side: str):
        """The embeddings plus positions `x` of the `side`, layer-normalized with
        `embedding_norm` (else as they are), before dropout."""
        norm = getattr(self, f"{side}_embedding_norm")
        return x if norm is None else norm(x)

    def output_logits(self, hidden):
        """Float32 logits `[..., vocab]` of the decoder output `hidden` (after the final norm of
        a pre-norm stack): the shared embedding's transpose, or the separate projection."""
        if self.decoder_norm is not None:
            hidden = self.decoder_norm(hidden)
        if self.output_projection is not None:
            logits = ops.cast(self.output_projection(hidden), "float32")
        else:
            logits = self.target_embedding.logits(hidden)
        return logits if self.output_bias is None else logits + ops.cast(self.output_bias,
                                                                          "float32")

    def output_weights(self, vocabulary_ids=None, tied_rows: bool = False) -> dict[str, Any]:
        """What `step_logits` applies, read once per search: the pre-softmax projection in the
        compute dtype, `{"kernel"}` `[d_model, vocab]` (`output_kernel`), or with `tied_rows`
        and a tied embedding its rows as stored, `{"tied_rows"}` `[vocab, d_model]` (what XLA
        multiplies by without the transposed copy, a pass over the largest matrix each search;
        TensorFlow's graph kernels run their steps faster on the copy); `output_bias` as
        `{"bias"}` `[vocab]` float32 (with `vocabulary_ids` `[n]`, their columns or rows
        only), and with a pre-norm stack's final norm its weights as `{"norm"}`."""
        if tied_rows and self.output_projection is None:
            table = self.target_embedding.embeddings
            if vocabulary_ids is not None:
                table = tf.gather(table, vocabulary_ids)
            weights = {"tied_rows": ops.cast(table, self.compute_dtype)}
        else:
            weights = {"kernel": self.output_kernel(vocabulary_ids)}
        if self.output_bias is not None:
            bias = ops.cast(self.output_bias, "float32")
            weights["bias"] = bias if vocabulary_ids is None else tf.gather(bias, vocabulary_ids)
        return self._with_norm(weights, self.decoder_norm)

    @staticmethod
    def _with_norm(weights: dict[str, Any], norm) -> dict[str, Any]:
        """`weights` plus `norm`'s as `{"norm"}` (`norm_weights`) when there is a norm."""
        return weights if norm is None else {**weights, "norm": norm_weights(norm)}

    def output_kernel(self, vocabulary_ids=None):
        """The pre-softmax projection as a `[d_model, vocab]` tensor in the compute dtype (a
        transposed copy when tied), so that decoding steps neither transpose nor cast it; with
        `vocabulary_ids` `[n]` (a shortlist), only their columns, `[d_model, n]`, picked before
        the copy."""
        if self.output_projection is not None:
            kernel = self.output_projection.kernel
            mode = self.output_projection.quantization_mode
            if mode == "int8":  # Keras's int8 `Dense.kernel` is the stored values: dequantize
                kernel = ops.cast(kernel, "float32") / self.output_projection.kernel_scale
            elif mode is not None:
                raise ValueError(f"output_projection: decoding reads no {mode} kernel; "
                                 "quantize with 'int8'")
            if vocabulary_ids is not None:
                kernel = tf.gather(kernel, vocabulary_ids, axis=1)
        else:
            embeddings = self.target_embedding.embeddings
            if vocabulary_ids is not None:
                embeddings = tf.gather(embeddings, vocabulary_ids)
            kernel = tf.transpose(embeddings)
        return ops.cast(kernel, self.compute_dtype)

    # ---------------------------------------------------------------------------------- LoRA
    def projections(self) -> list[HeadsDense]:
        """Every attention projection (W^Q, W^K, W^V, W^O) and feed-forward map, layer by
        layer, encoder first."""
        projections = []
        for layer in (*self.encoder_layers, *self.decoder_layers):
            attentions = [layer.self_attention] + (
                [layer.cross_attention] if isinstance(layer, DecoderLayer) else [])
            for attention in attentions:
                projections += [attention.query_dense, attention.key_dense,
                                attention.value_dense, attention.output_dense]
            projections += [layer.feed_forward.inner, layer.feed_forward.outer]
        return projections

    def enable_lora(self, rank: int, lora_alpha: Optional[float] = None) -> None:
        """Gives each projection (`projections()`) trainable LoRA adapters of `rank`
        (`HeadsDense.enable_lora`, scale `lora_alpha / rank`, 1 by default) and freezes every
        other weight: kernels, biases, embeddings, layer norms, the output bias. Compile after
        it. (`Transformer(config, lora_rank=rank)` builds the same model at once.)"""
        if self.lora_rank:
            raise ValueError(f"LoRA is already enabled (rank {self.lora_rank})")
        for dense in self.projections():
            dense.enable_lora(rank, lora_alpha)
        self._train_adapters_only()

    def lora_adapters(self) -> list[keras.Variable]:
        """Each projection's `lora_kernel_a` and `lora_kernel_b`, in `projections()` order; []
        without LoRA. The model's other weights are a plain model's, in its order."""
        return [adapter for dense in self.projections() if dense.lora_enabled
                for adapter in (dense.lora_kernel_a, dense.lora_kernel_b)]

    def _train_adapters_only(self) -> None:
        """Freezes every weight but the projections' adapters and records their rank and
        alpha."""
        adapters = {id(adapter) for adapter in self.lora_adapters()}
        for weight in self.weights:
            weight.trainable = id(weight) in adapters
        first = self.projections()[0]
        self.lora_rank, self.lora_alpha = first.lora_rank, first.lora_alpha

    def quantize(self, mode=None, **kwargs) -> None:
        """`keras.Model.quantize`, refused with LoRA enabled before any layer changes (the
        projections quantize to int8 only, without adapters: quantize `merge_lora()`'s model)."""
        if self.lora_rank:
            raise ValueError("LoRA is enabled: quantize the merged model (merge_lora()) instead")
        super().quantize(mode, **kwargs)

    def merge_lora(self) -> "Transformer":
        """A new plain model of the same config and name that computes what this LoRA model
        computes: each projection's kernel is this one's effective `kernel` (the adapters'
        scaled product folded in), every other weight a copy. This model is left as it is. An
        export of the merged model serves one kernel per projection."""
        if not self.lora_rank:
            raise ValueError("LoRA is not enabled; there is nothing to merge")
        merged = type(self)(self.config, name=self.name)
        weights = {weight.path: weight for weight in self.weights}
        for weight in merged.weights:
            weight.assign(weights[weight.path])
        for dense, merged_dense in zip(self.projections(), merged.projections()):
            merged_dense.kernel.assign(dense.kernel)
        return merged

    def get_config(self) -> dict[str, Any]:
        return {"name": self.name, "config": self.config.to_dict(),
                **lora_settings(self.lora_rank, self.lora_alpha)}

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
