"""The encoder and decoder layers of section 3.1: self-attention, (in the decoder)
encoder-decoder attention, and the feed-forward network, each in a residual block."""
from typing import Any, Callable, Optional, Sequence

import keras
import tensorflow as tf

from keras_transformer.layers.attention import MultiHeadAttention, project
from keras_transformer.layers.dense import activate, lora_settings
from keras_transformer.layers.feed_forward import PositionwiseFeedForward
from keras_transformer.layers.residual import LayerNorm, ResidualNorm, layer_norm

NormWeights = tuple[tf.Tensor, tf.Tensor, float]  # a layer norm's gamma, beta and epsilon


class TransformerBlock(keras.layers.Layer):
    """Base of `EncoderLayer` and `DecoderLayer`: their settings and common sub-layers."""

    def __init__(self, num_heads: int, key_dim: int, value_dim: int, d_ff: int,
                 dropout: float = 0.1, attention_dropout: float = 0.0,
                 attention_bias: bool = True, norm: str = "post", epsilon: float = 1e-6,
                 activation: str = "relu", lora_rank: Optional[int] = None,
                 lora_alpha: Optional[float] = None, **kwargs):
        super().__init__(**kwargs)
        self.lora = lora_settings(lora_rank, lora_alpha)  # the projections' LoRA adapters
        self.settings = dict(num_heads=num_heads, key_dim=key_dim, value_dim=value_dim,
                             d_ff=d_ff, dropout=dropout, attention_dropout=attention_dropout,
                             attention_bias=attention_bias, norm=norm, epsilon=epsilon,
                             activation=activation, **self.lora)
        self.self_attention = self.attention("self_attention")
        self.self_residual = self.residual("self_residual")
        self.feed_forward = PositionwiseFeedForward(d_ff, activation, **self.lora,
                                                    name="feed_forward")
        self.feed_forward_residual = self.residual("feed_forward_residual")

    def attention(self, name: str) -> MultiHeadAttention:
        s = self.settings
        return MultiHeadAttention(s["num_heads"], s["key_dim"], s["value_dim"],
                                  dropout=s["attention_dropout"], use_bias=s["attention_bias"],
                                  **self.lora, name=name)

    def residual(self, name: str) -> ResidualNorm:
        return ResidualNorm(self.settings["norm"], self.settings["dropout"],
                            self.settings["epsilon"], name=name)

    def residual_blocks(self, x, attentions: Sequence[Callable], feed_forward: Callable,
                        residuals: Sequence, training=None) -> tuple:
        """Each attention, then the feed-forward network, each in its residual block:
        `x = residual(x, sublayer(residual.normalize_input(x)))`.

        Args:
            x: the layer's input.
            attentions: sub-layers returning their output and what the caller keeps of them
                (the weights, a cache), in the layer's order.
            feed_forward: the last sub-layer.
            residuals: one residual block per sub-layer.
            training: dropout.

        Returns:
            The output and a tuple of what each attention returned to keep.
        """
        kept = []
        for attention, residual in zip(attentions, residuals):
            attended, kept_part = attention(residual.normalize_input(x))
            x = residual(x, attended, training=training)
            kept.append(kept_part)
        last = residuals[-1]
        return last(x, feed_forward(last.normalize_input(x)), training=training), tuple(kept)

    def get_config(self) -> dict:
        return {**super().get_config(), **self.settings}


@keras.saving.register_keras_serializable(package="keras_transformer")
class EncoderLayer(TransformerBlock):
    """Self-attention over the source, then the position-wise feed-forward network."""

    def build(self, input_shape) -> None:
        for layer in (self.self_attention, self.feed_forward, self.self_residual,
                      self.feed_forward_residual):
            layer.build(input_shape)

    def call(self, x, padding_mask=None, training=None, return_attention_scores: bool = False):
        """`x`: `[batch, src_len, d_model]`; `padding_mask`: `[batch, 1, src_len]`, True on real
        tokens. Returns the output (and the attention weights when asked for)."""
        x, weights = self.blocks(x, lambda query: self.self_attention(
            query, attention_mask=padding_mask, training=training,
            return_attention_scores=True), training=training)
        return (x, weights) if return_attention_scores else x

    def blocks(self, x, self_attention: Callable, training=None):
        """The layer's order of section 3.1, the one place it is written: self-attention, then
        the feed-forward network, each in its residual block. `call` runs it with the layer's
        own self-attention, the packed training steps (`fast/packed.py`) with theirs.

        Args:
            x: the layer's input.
            self_attention: the attention of the normalized input to itself, returning its
                output and what the caller keeps of it (e.g. the weights).
            training: dropout.

        Returns:
            The output and what `self_attention` returned to keep.
        """
        x, (kept,) = self.residual_blocks(
            x, [self_attention], self.feed_forward,
            (self.self_residual, self.feed_forward_residual), training)
        return x, kept


@keras.saving.register_keras_serializable(package="keras_transformer")
class DecoderLayer(TransformerBlock):
    """Masked self-attention, encoder-decoder attention, then the feed-forward network; `step`
    runs one position with a key/value cache."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.cross_attention = self.attention("cross_attention")
        self.cross_residual = self.residual("cross_residual")

    def build(self, input_shape, encoder_shape=None) -> None:
        self.self_attention.build(input_shape)
        self.cross_attention.build(input_shape, encoder_shape or input_shape)
        for layer in (self.feed_forward, self.self_residual, self.cross_residual,
                      self.feed_forward_residual):
            layer.build(input_shape)

    def call(self, x, encoder_output, self_mask=None, cross_mask=None, training=None,
             return_attention_scores: bool = False):
        """Teacher-forced pass over a whole target prefix.

        Args:
            x: `[batch, tgt_len, d_model]`.
            encoder_output: `[batch, src_len, d_model]`.
            self_mask: `[batch, tgt_len, tgt_len]`, causal and padding.
            cross_mask: `[batch, 1, src_len]`, True on real source tokens.
            training: dropout.
            return_attention_scores: also return `(self_weights, cross_weights)`.

        Returns:
            The output `[batch, tgt_len, d_model]` (and the weights).
        """
        x, weights = self.blocks(
            x,
            lambda query: self.self_attention(query, attention_mask=self_mask, training=training,
                                              return_attention_scores=True),
            lambda query: self.cross_attention(query, encoder_output, attention_mask=cross_mask,
                                               training=training, return_attention_scores=True),
            training=training)
        return (x, weights) if return_attention_scores else x

    def blocks(self, x, self_attention: Callable, cross_attention: Callable,
               feed_forward: Optional[Callable] = None, residuals: Optional[Sequence] = None,
               training=None):
        """The layer's order of section 3.1, the one place it is written: masked
        self-attention, encoder-decoder attention, then the feed-forward network, each in its
        residual block. `call` runs it with the layer's own sub-layers, the packed training
        steps (`fast/packed.py`) with their attentions, `step` with its decoding step's.

        Args:
            x: the layer's input.
            self_attention: the attention of the normalized input to the target so far,
                returning its output and what the caller keeps of it (the weights, a cache).
            cross_attention: the same for the attention to the encoder output.
            feed_forward: the feed-forward network (default: the layer's own).
            residuals: the three residual blocks (default: the layer's own).
            training: dropout.

        Returns:
            The output and `(self-attention's kept, cross-attention's kept)`.
        """
        return self.residual_blocks(
            x, [self_attention, cross_attention], feed_forward or self.feed_forward,
            residuals or self._residuals(), training)

    def step_weights(self, encoder_output, dtype) -> dict[str, Any]:
        """What `step` multiplies by, in `dtype`, read once per search: each attention's
        `MultiHeadAttention.step_weights` (the encoder-decoder attention's with the keys and
        values of `encoder_output` `[batch, src_len, d_model]`) and the feed-forward maps'
        matrices."""
        return {"self_attention": self.self_attention.step_weights(dtype),
                "cross_attention": self.cross_attention.step_weights(dtype, encoder_output),
                "inner": self.feed_forward.inner.matrix(dtype),
                "outer": self.feed_forward.outer.matrix(dtype),
                "norms": [norm_weights(block.layer_norm) for block in self._residuals()]}

    def step(self, x, weights: dict[str, Any], self_cache: dict, position, slots, written,
             cross_mask) -> tuple[Any, dict]:
        """One incremental decoding position of every hypothesis: `blocks` with the
        attentions' steps.

        Args:
            x: `[rows, d_model]`, each hypothesis' input at `position` (`rows = batch * per
                sentence`, each sentence's rows in turn).
            weights: `step_weights()`.
            self_cache: this layer's self-attention cache (`MultiHeadAttention.init_cache`).
            position: scalar int32.
            slots, written: each row's self-attention history (`MultiHeadAttention.step`).
            cross_mask: `[batch, 1, src_len]`, True on real source tokens.

        Returns:
            The output `[rows, d_model]` and the cache with `position` written.
        """
        def feed_forward(x):
            with tf.name_scope(self.feed_forward.name):
                activation = self.feed_forward.activation
                inner = project(x, weights["inner"], relu=activation == "relu")
                return project(inner if activation == "relu" else activate(inner, activation),
                               weights["outer"])

        x, (self_cache, _) = self.blocks(
            x,
            lambda query: self.self_attention.step(query, weights["self_attention"], self_cache,
                                                   position, slots, written),
            lambda query: (self.cross_attention.attend_step(
                query, weights["cross_attention"], cross_mask), None),
            feed_forward,
            [_StepResidual(block, norm) for block, norm in zip(self._residuals(),
                                                                weights["norms"])])
        return x, self_cache

    def _residuals(self) -> tuple[ResidualNorm, ResidualNorm, ResidualNorm]:
        """The residual blocks, in the layer's order."""
        return self.self_residual, self.cross_residual, self.feed_forward_residual


def norm_weights(norm: LayerNorm) -> NormWeights:
    """`norm`'s weights, read once per search for `step_normalize`."""
    return tf.convert_to_tensor(norm.gamma), tf.convert_to_tensor(norm.beta), norm.epsilon


def step_normalize(x, weights: NormWeights):
    """A decoding step's layer norm of `x` with `norm_weights`: the kernel's reference."""
    with tf.name_scope("layer_norm"):
        return layer_norm.reference(x, *weights)


class _StepResidual:
    """A `ResidualNorm` block in a decoding step, with its interface (`normalize_input`, then
    the block's output): post-norm `LN(x + f(x))`, pre-norm `x + f(LN(x))`, without dropout,
    its layer norm's weights read once per search (`norm_weights`)."""

    def __init__(self, block: ResidualNorm, weights: NormWeights):
        self.pre = block.norm == "pre"
        self.normalize = lambda x: step_normalize(x, weights)

    def normalize_input(self, x):
        return self.normalize(x) if self.pre else x

    def __call__(self, x, sublayer_output, training=None):
        summed = x + sublayer_output
        return summed if self.pre else self.normalize(summed)
