"""The encoder-decoder Transformer (section 3) as a subclassed `keras.Model`."""
from __future__ import annotations

from typing import Any, Callable, NamedTuple, Optional, Union

import keras
import tensorflow as tf
from keras import ops

from keras_transformer.config import BOS_ID, PAD_ID, TransformerConfig
from keras_transformer.layers import (DecoderLayer, EncoderLayer, HeadsDense, HookDropout,
                                      LayerNorm, LearnedPositionalEmbedding, ScaledEmbedding,
                                      SinusoidalPositionalEncoding)
from keras_transformer.layers.attention import KeyValues, cache_index
from keras_transformer.layers.encoder_decoder import TransformerBlock
from keras_transformer.layers.layout import PADDED, Layout
from keras_transformer.layers.dense import lora_arguments
from keras_transformer.optimization import with_loss_scaling


class OutputProjection(NamedTuple):
    """The pre-softmax projection as `Transformer.output_logits` applies it
    (`Transformer.pre_softmax_projection`).

    matrix: `[d_model, n]` in the compute dtype, or `[n, d_model]` when `transposed`.
    bias: `[n]` float32, or None.
    transposed: the product is `hidden @ matrix^T` (a tied embedding's rows as stored).
    """

    matrix: tf.Tensor
    bias: Optional[tf.Tensor]
    transposed: bool


class DecodingConstants(NamedTuple):
    """What every step of a search reads and none changes, prepared once per search
    (`Transformer.init_decoding`).

    cross_attention: each decoder layer's keys and values of the encoder output (heads first:
        a sentence's serve all its rows untiled).
    cross_mask: `[batch, 1, src_len]`, True on real source tokens.
    positions: `[cache_length, d_model]`, the target positional encodings.
    output: the pre-softmax projection (of a shortlist's ids only, when given).
    never: `[n]` float32 added to the log-probabilities (`never_emitted`).
    unscored: optional `[n]` bool, True at the ids that only pad a shortlist to a static size.
    static_shapes: the step XLA compiles (`Transformer.init_decoding`).
    """

    cross_attention: tuple[KeyValues, ...]
    cross_mask: tf.Tensor
    positions: tf.Tensor
    output: OutputProjection
    never: tf.Tensor
    unscored: Optional[tf.Tensor]
    static_shapes: bool


class DecodingCache(NamedTuple):
    """What each step of a search writes (the search's loop state).

    self_attention: each decoder layer's self-attention cache, `[cache_length, rows, heads,
        dim]` keys and values, position-major (`MultiHeadAttention.init_cache`).
    ancestors: `[rows, cache_length]` int32, the cache row holding each position of each row's
        history. A row writes its newest position into its own cache row; a beam search moving
        hypotheses moves their ancestors (`reorder`), never the caches.
    """

    self_attention: tuple[KeyValues, ...]
    ancestors: tf.Tensor

    def reorder(self, parents) -> "DecodingCache":
        """Row `i` continuing row `parents[i]`: only the ancestors move."""
        return DecodingCache(self.self_attention, tf.gather(self.ancestors, parents))


@keras.saving.register_keras_serializable(package="keras_transformer")
class Transformer(keras.Model):
    """`model((source_ids, target_input_ids))` -> logits `[batch, target_len, vocab]`.

    Ids are int32 with 0 as padding. `encode`/`decode` expose the two halves for inference,
    `decode_step` with `init_decoding` runs the decoder one position at a time, and
    `attention_probabilities` returns every layer's and head's attention distributions. `fit` and
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
            c.vocab_size, c.d_model, scaled=c.scale_embedding,
            name="shared_embedding" if c.share_embeddings else "source_embedding")
        self.target_embedding = (self.source_embedding if c.share_embeddings else ScaledEmbedding(
            c.target_vocab_size, c.d_model, scaled=c.scale_embedding, name="target_embedding"))
        self.output_projection = (None if c.tie_output else keras.layers.Dense(
            c.target_vocab_size, use_bias=False, name="output_projection"))
        if c.positional == "sinusoidal":
            self.source_positions = SinusoidalPositionalEncoding(
                c.sinusoid_layout, offset=c.position_offset, name="positional_encoding")
            self.target_positions = self.source_positions
        else:
            self.source_positions, self.target_positions = (LearnedPositionalEmbedding(
                c.max_length, offset=c.position_offset, name=f"{side}_positions")
                for side in ("source", "target"))
        self.source_dropout = HookDropout(c.dropout)
        self.target_dropout = HookDropout(c.dropout)
        embedding_norm = (lambda name: LayerNorm(
            epsilon=c.layer_norm_epsilon, name=name) if c.embedding_norm else None)
        self.source_embedding_norm = embedding_norm("source_embedding_norm")
        self.target_embedding_norm = embedding_norm("target_embedding_norm")
        layer_args = {**{field: getattr(c, field) for field in TransformerBlock.FIELDS},
                      **lora_arguments(lora_rank, lora_alpha)}
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
                                               shape=(self.config.target_vocab_size,),
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

    def call(self, inputs, training=None, return_attention: bool = False,
             layouts: tuple[Layout, Layout] = (PADDED, PADDED),
             output: Optional[Callable] = None):
        """`(source_ids, target_input_ids)` -> logits `[batch, tgt_len, vocab]` (float32): `decode`
        of `encode`. The other arguments are `decode`'s (`layouts`: the source's, the
        target's)."""
        source_ids, target_input_ids = inputs
        encoder_output = self.encode(source_ids, training=training, layout=layouts[0])
        return self.decode(target_input_ids, encoder_output, source_padding_mask(source_ids),
                           training=training, return_attention=return_attention,
                           layouts=layouts, output=output)

    def encode(self, source_ids, training=None, return_attention: bool = False,
               layout: Layout = PADDED):
        """Encoder output `[batch, src_len, d_model]` (and per-layer self-attention probabilities);
        with a `layout` (`layers/layout.py`), the tokens as it holds them."""
        x = self.embed(source_ids, "source", training, layout=layout)
        mask = ops.expand_dims(source_padding_mask(source_ids), 1)
        probabilities = []
        for layer in self.encoder_layers:
            x, layer_probabilities = layer(x, padding_mask=mask, training=training,
                                           return_attention=True, layout=layout)
            probabilities.append(layer_probabilities)
        if self.encoder_norm is not None:
            x = self.encoder_norm(x)
        return (x, probabilities) if return_attention else x

    def decode(self, target_input_ids, encoder_output, source_mask, training=None,
               return_attention: bool = False,
               layouts: tuple[Layout, Layout] = (PADDED, PADDED),
               output: Optional[Callable] = None):
        """Teacher-forced logits `[batch, tgt_len, vocab]` of `target_input_ids`
        `[batch, tgt_len]` (BOS first) given the `encoder_output` `[batch, src_len, d_model]` and
        `source_mask` `[batch, src_len]` (True on real source tokens), with dropout as `training`
        says; `return_attention` also returns the per-layer self and encoder-decoder
        attention probabilities.

        A faster training step passes in what it changes: `layouts` (`layers/layout.py`), how
        the source's tokens (`encoder_output`'s) and the target's are held, in that order, and
        `output`, what to return of the last layer's output in the target's layout instead of
        the logits (the logits' factors at the labelled tokens, say)."""
        source_layout, target_layout = layouts
        x = self.embed(target_input_ids, "target", training, layout=target_layout)
        self_mask = causal_mask(target_input_ids)
        cross_mask = ops.expand_dims(source_mask, 1)
        self_probabilities, cross_probabilities = [], []
        for layer in self.decoder_layers:
            x, (layer_self, layer_cross) = layer(
                x, encoder_output, self_mask=self_mask, cross_mask=cross_mask,
                training=training, return_attention=True,
                layouts=(target_layout, source_layout))
            self_probabilities.append(layer_self)
            cross_probabilities.append(layer_cross)
        result = (self.output_logits(target_layout.unpack(x)) if output is None
                  else output(x))
        return (result, self_probabilities, cross_probabilities) if return_attention else result

    def attention_probabilities(self, source_ids, target_input_ids) -> dict[str, list]:
        """Every layer's attention, each `[batch, heads, query_len, key_len]`, at inference."""
        encoder_output, encoder_self = self.encode(source_ids, return_attention=True)
        _, decoder_self, encoder_decoder = self.decode(
            target_input_ids, encoder_output, source_padding_mask(source_ids),
            return_attention=True)
        return {"encoder_self": encoder_self, "decoder_self": decoder_self,
                "encoder_decoder": encoder_decoder}

    # ------------------------------------------------------------------ incremental decoding
    def init_decoding(self, encoder_output, source_mask, rows_per_sentence: int, cache_length,
                      vocabulary_ids=None, unscored=None, static_shapes: bool = False
                      ) -> tuple["DecodingConstants", "DecodingCache"]:
        """What `decode_step` needs for `rows_per_sentence` hypotheses (rows) of each sentence (its
        beam, or its samples) of `encoder_output` `[batch, src_len, d_model]` (`source_mask`
        `[batch, src_len]`, their padding mask, True on real tokens), at most `cache_length`
        positions (what the caches hold): the search's constants and the empty cache its steps
        write.

        `vocabulary_ids`, optional `[n]`, are the ids the log-probabilities are computed for (a
        shortlist); `unscored`, optional `[n]` bool, is True at the ids of `vocabulary_ids` that
        only pad it to a static size (log-probability -inf, outside the normalization).
        `static_shapes` gives the sizes XLA compiles, the one place a static-shape build differs:
        caches of zeros read whole (`attention.cache_index`), written by a dynamic update slice,
        and a tied output matrix read as stored (`pre_softmax_projection`).
        """
        rows = ops.shape(encoder_output)[0] * rows_per_sentence
        constants = DecodingConstants(
            cross_attention=tuple(layer.cross_attention.project_key_value(encoder_output)
                                  for layer in self.decoder_layers),
            cross_mask=ops.expand_dims(source_mask, 1),
            positions=self.target_positions.at(ops.arange(cache_length)),
            output=self.pre_softmax_projection(vocabulary_ids, rows_as_stored=static_shapes),
            never=never_emitted(vocabulary_ids, self.config.target_vocab_size),
            unscored=unscored, static_shapes=static_shapes)
        cache = DecodingCache(
            self_attention=tuple(layer.self_attention.init_cache(
                rows, cache_length, self.compute_dtype, static_shapes)
                for layer in self.decoder_layers),
            ancestors=tf.tile(tf.range(rows)[:, None], tf.stack([1, cache_length])))
        return constants, cache

    def decode_step(self, token_ids, position, cache: "DecodingCache",
                    constants: "DecodingConstants") -> tuple[tf.Tensor, "DecodingCache"]:
        """The log-probabilities `[batch, per sentence, n]` of the next token after
        `token_ids` `[batch, per sentence]` at target `position` (0 for the start token), over
        the ids `init_decoding` was given (`next_token_log_probs`), and `cache` with that
        position written: `decode`'s layers, each hypothesis one query. With `constants`
        bound, a step function of `keras_transformer.search`.

        Each row writes this position into its own cache row and reads its history through
        its ancestors (`DecodingCache`)."""
        ancestors = cache.ancestors
        rows, cache_length = tf.shape(ancestors)[0], tf.shape(ancestors)[1]
        ancestors = tf.where(tf.range(cache_length) == position, tf.range(rows)[:, None],
                             ancestors)
        index = cache_index(ancestors, position, self.config.num_heads, constants.static_shapes)
        x = self.embed(token_ids, "target", training=False,
                       positions=constants.positions[position])
        written = []
        for layer, self_cache, cross_cache in zip(self.decoder_layers, cache.self_attention,
                                                  constants.cross_attention):
            x, self_cache = layer(x, cross_mask=constants.cross_mask, self_cache=self_cache,
                                  cross_cache=cross_cache, cache_index=index, training=False)
            written.append(self_cache)
        return (next_token_log_probs(self.output_logits(x, constants.output), constants.never,
                                     constants.unscored),
                DecodingCache(tuple(written), ancestors))

    # ---------------------------------------------------------------------------- helpers
    def embed(self, ids, side: str, training, positions=None, layout: Layout = PADDED):
        """Dropout(E[ids] * sqrt(d_model) + positions) `[batch, len, d_model]` (section 3.4;
        `E[ids]` unscaled without `scale_embedding`) of the `side` ("source" or "target");
        `positions`: the encodings to add (default: those of positions `0 .. len - 1`; a
        decoding step's, of its position); `layout`: how the output holds the tokens."""
        x = getattr(self, f"{side}_embedding")(layout.pack(ids))
        if positions is None:
            table = getattr(self, f"{side}_positions")
            positions = (table(x) if layout.token_positions is None
                         else table.at(layout.token_positions))
        x = self.embedding_output(x + positions, side)
        return getattr(self, f"{side}_dropout")(x, training=training)

    def embedding_output(self, x, side: str):
        """The embeddings plus positions `x` of the `side`, layer-normalized with
        `embedding_norm` (else as they are), before dropout."""
        norm = getattr(self, f"{side}_embedding_norm")
        return x if norm is None else norm(x)

    def output_logits(self, hidden, projection: Optional["OutputProjection"] = None):
        """Float32 logits `[..., n]` of the decoder output `hidden` (after the final norm of a
        pre-norm stack) with `projection` (`pre_softmax_projection`; default: the whole
        vocabulary's, read now)."""
        if self.decoder_norm is not None:
            hidden = self.decoder_norm(hidden)
        matrix, bias, transposed = projection or self.pre_softmax_projection()
        rows = ops.reshape(hidden, (-1, self.config.d_model))
        logits = tf.matmul(rows, ops.cast(matrix, hidden.dtype), transpose_b=transposed)
        logits = ops.reshape(ops.cast(logits, "float32"), (*ops.shape(hidden)[:-1], -1))
        return logits if bias is None else logits + bias

    def pre_softmax_projection(self, vocabulary_ids=None, rows_as_stored: bool = False
                               ) -> "OutputProjection":
        """The pre-softmax linear transformation (section 3.4), as `output_logits` applies it:
        the shared embedding's transpose (or the separate projection's kernel) in the compute
        dtype, and `output_bias` in float32; with `vocabulary_ids` `[n]` (a shortlist) their
        columns only, picked before the transposed copy.

        `rows_as_stored`: a tied embedding's rows as stored, `[vocab, d_model]`, multiplied by
        transposed (what XLA runs without a copy; TensorFlow's graph kernels run the steps of a
        search faster on a copy made once)."""
        if self.output_projection is not None:
            kernel = self.output_projection.kernel
            mode = self.output_projection.quantization_mode
            if mode == "int8":  # Keras's int8 `Dense.kernel` is the stored values: dequantize
                kernel = ops.cast(kernel, "float32") / self.output_projection.kernel_scale
            elif mode is not None:
                raise ValueError(f"output_projection: no {mode} kernel is read; quantize with "
                                 "'int8'")
            if vocabulary_ids is not None:
                kernel = tf.gather(kernel, vocabulary_ids, axis=1)
            matrix, transposed = kernel, False
        else:
            matrix = self.target_embedding.embeddings
            if vocabulary_ids is not None:
                matrix = tf.gather(matrix, vocabulary_ids)
            matrix, transposed = ((matrix, True) if rows_as_stored
                                  else (tf.transpose(matrix), False))
        bias = None
        if self.output_bias is not None:
            bias = ops.cast(self.output_bias, "float32")
            if vocabulary_ids is not None:
                bias = tf.gather(bias, vocabulary_ids)
        return OutputProjection(ops.cast(matrix, self.compute_dtype), bias, transposed)

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
                **lora_arguments(self.lora_rank, self.lora_alpha)}

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> "Transformer":
        return cls(**config)  # `__init__` reads a saved config dict with `from_saved`


def never_emitted(vocabulary_ids: Optional[tf.Tensor], vocab_size: int) -> tf.Tensor:
    """`[n]` float32 added to the log-probabilities: -inf at PAD and BOS (never generated,
    though they stay in the normalization), else 0."""
    scored = tf.range(vocab_size) if vocabulary_ids is None else vocabulary_ids
    special = tf.logical_or(tf.equal(scored, PAD_ID), tf.equal(scored, BOS_ID))
    return tf.where(special, -float("inf"), 0.0)


def next_token_log_probs(logits: tf.Tensor, never: tf.Tensor,
                         unscored: Optional[tf.Tensor] = None) -> tf.Tensor:
    """Log-softmax over the scored ids (without the `unscored` ones, which only pad a
    shortlist), PAD and BOS excluded from the output (`never`). Over the whole vocabulary an
    emitted token's log-probability is exactly the model's (the one teacher forcing gives);
    over a shortlist it is renormalized."""
    logits = tf.cast(logits, tf.float32)
    if unscored is not None:
        logits = tf.where(unscored, -float("inf"), logits)
    return tf.nn.log_softmax(logits, axis=-1) + never


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
