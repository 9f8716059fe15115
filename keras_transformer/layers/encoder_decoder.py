"""The encoder and decoder layers of section 3.1: self-attention, (in the decoder)
encoder-decoder attention, and the feed-forward network, each in a residual block."""
import functools
from typing import Callable, Optional, Sequence

import keras

from keras_transformer.config import renamed
from keras_transformer.layers.attention import CacheIndex, KeyValues, MultiHeadAttention
from keras_transformer.layers.dense import lora_arguments
from keras_transformer.layers.feed_forward import PositionwiseFeedForward
from keras_transformer.layers.layout import PADDED, Layout
from keras_transformer.layers.residual import ResidualNorm


class TransformerBlock(keras.layers.Layer):
    """Base of `EncoderLayer` and `DecoderLayer`: their hyperparameters and common sub-layers. The
    hyperparameters are `TransformerConfig`'s fields of the same names (`FIELDS`), the model passes
    them down as they are, under the same names."""

    FIELDS = ("num_heads", "key_dim", "value_dim", "d_ff", "dropout", "attention_dropout",
              "attention_bias", "norm", "layer_norm_epsilon", "activation")

    def __init__(self, num_heads: int, key_dim: int, value_dim: int, d_ff: int,
                 dropout: float = 0.1, attention_dropout: float = 0.0,
                 attention_bias: bool = True, norm: str = "post",
                 layer_norm_epsilon: float = 1e-6, activation: str = "relu",
                 lora_rank: Optional[int] = None, lora_alpha: Optional[float] = None, **kwargs):
        super().__init__(**kwargs)
        self.lora = lora_arguments(lora_rank, lora_alpha)  # the projections' LoRA adapters
        self.hyperparameters = dict(
            num_heads=num_heads, key_dim=key_dim, value_dim=value_dim, d_ff=d_ff,
            dropout=dropout, attention_dropout=attention_dropout, attention_bias=attention_bias,
            norm=norm, layer_norm_epsilon=layer_norm_epsilon, activation=activation, **self.lora)
        self.self_attention = self.attention("self_attention")
        self.self_residual = self.residual("self_residual")
        self.feed_forward = PositionwiseFeedForward(d_ff, activation, **self.lora,
                                                    name="feed_forward")
        self.feed_forward_residual = self.residual("feed_forward_residual")

    def attention(self, name: str) -> MultiHeadAttention:
        s = self.hyperparameters
        return MultiHeadAttention(s["num_heads"], s["key_dim"], s["value_dim"],
                                  dropout=s["attention_dropout"],
                                  attention_bias=s["attention_bias"], **self.lora, name=name)

    def residual(self, name: str) -> ResidualNorm:
        s = self.hyperparameters
        return ResidualNorm(s["norm"], s["dropout"], s["layer_norm_epsilon"], name=name)

    def blocks(self, x, attentions: Sequence[Callable], training=None) -> tuple:
        """The layer's order of section 3.1, the one place it is written: each attention, then the
        feed-forward network, each in its residual block (`residuals`),
        `x = residual(x, sublayer(residual.normalize_input(x)))`, from the layer's input `x`, with
        dropout as `training` says; the output and a tuple of what each attention returned to keep.

        `attentions` are the attentions of the normalized input, in the layer's order, each
        returning its output and what the caller keeps of it (the attention probabilities, a cache).
        """
        residuals = self.residuals()
        kept = []
        for attention, residual in zip(attentions, residuals):
            attended, kept_part = attention(residual.normalize_input(x))
            x = residual(x, attended, training=training)
            kept.append(kept_part)
        last = residuals[-1]
        return last(x, self.feed_forward(last.normalize_input(x)), training=training), tuple(kept)

    def get_config(self) -> dict:
        return {**super().get_config(), **self.hyperparameters}

    @classmethod
    def from_config(cls, config: dict) -> "TransformerBlock":
        return cls(**renamed(config, {"epsilon": "layer_norm_epsilon"}))


@keras.saving.register_keras_serializable(package="keras_transformer")
class EncoderLayer(TransformerBlock):
    """Self-attention over the source, then the position-wise feed-forward network."""

    def build(self, input_shape) -> None:
        for layer in (self.self_attention, self.feed_forward, self.self_residual,
                      self.feed_forward_residual):
            layer.build(input_shape)

    def call(self, x, padding_mask=None, training=None, return_attention: bool = False,
             layout: Layout = PADDED):
        """`x`: `[batch, src_len, d_model]` (or as `layout` holds the tokens, `layout.py`);
        `padding_mask`: `[batch, 1, src_len]`, True on real tokens. Returns the output (and the
        attention probabilities when asked for)."""
        x, (probabilities,) = self.blocks(x, [functools.partial(
            self.self_attention, attention_mask=padding_mask, training=training,
            return_attention=True, layouts=(layout, layout))], training=training)
        return (x, probabilities) if return_attention else x

    def residuals(self) -> tuple[ResidualNorm, ResidualNorm]:
        """The residual blocks, in the layer's order: self-attention, feed-forward network."""
        return self.self_residual, self.feed_forward_residual


@keras.saving.register_keras_serializable(package="keras_transformer")
class DecoderLayer(TransformerBlock):
    """Masked self-attention, encoder-decoder attention, then the feed-forward network; over a
    whole target prefix (training, scoring, attention maps) or, with caches, one position of
    every hypothesis (incremental decoding), through the same sub-layers."""

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

    def call(self, x, encoder_output=None, self_mask=None, cross_mask=None,
             self_cache: Optional[KeyValues] = None, cross_cache: Optional[KeyValues] = None,
             cache_index: Optional[CacheIndex] = None, training=None,
             return_attention: bool = False,
             layouts: tuple[Layout, Layout] = (PADDED, PADDED)):
        """The layer over a teacher-forced target prefix, or one decoding position: of `x`
        `[batch, tgt_len, d_model]`, in a decoding step `[batch, per sentence, d_model]` (each
        hypothesis' input at `cache_index.position`), the output `[batch, tgt_len, d_model]`, then
        the self-attention cache with this position written when `cache_index` is given, or else
        `(self_probabilities, cross_probabilities)` when `return_attention` asks for them.

        `encoder_output` is `[batch, src_len, d_model]` (None given `cross_cache`); `self_mask`
        `[batch, tgt_len, tgt_len]`, causal and padding (unused in a step); `cross_mask`
        `[batch, 1, src_len]`, True on real source tokens. `self_cache` is, with `cache_index`, this
        layer's self-attention cache (`MultiHeadAttention.init_cache`); `cross_cache` the encoder
        output's keys and values, projected once (`MultiHeadAttention.project_key_value`);
        `cache_index` a decoding step's (`attention.cache_index`). `training` turns dropout on.
        `layouts` are the token layouts (`layout.py`) of `x` and of `encoder_output`.
        """
        target, source = layouts
        x, (self_kept, cross_kept) = self.blocks(x, [
            functools.partial(self.self_attention, attention_mask=self_mask, cache=self_cache,
                              cache_index=cache_index, training=training,
                              return_attention=True, layouts=(target, target)),
            functools.partial(self.cross_attention, key_value=encoder_output,
                              attention_mask=cross_mask, cache=cross_cache, training=training,
                              return_attention=True, layouts=layouts)], training=training)
        if cache_index is not None:
            return x, self_kept
        return (x, (self_kept, cross_kept)) if return_attention else x

    def residuals(self) -> tuple[ResidualNorm, ResidualNorm, ResidualNorm]:
        """The residual blocks, in the layer's order: masked self-attention, encoder-decoder
        attention, feed-forward network."""
        return self.self_residual, self.cross_residual, self.feed_forward_residual
