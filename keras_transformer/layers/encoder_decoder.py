"""The encoder and decoder layers of section 3.1: self-attention, (in the decoder)
encoder-decoder attention, and the feed-forward network, each in a residual block."""
import keras
from keras import ops

from keras_transformer.layers.attention import MultiHeadAttention
from keras_transformer.layers.feed_forward import PositionwiseFeedForward
from keras_transformer.layers.residual import ResidualNorm


class TransformerBlock(keras.layers.Layer):
    """Base of `EncoderLayer` and `DecoderLayer`: their settings and common sub-layers."""

    def __init__(self, num_heads: int, key_dim: int, value_dim: int, d_ff: int,
                 dropout: float = 0.1, attention_dropout: float = 0.0,
                 attention_bias: bool = True, norm: str = "post", epsilon: float = 1e-6,
                 **kwargs):
        super().__init__(**kwargs)
        self.settings = dict(num_heads=num_heads, key_dim=key_dim, value_dim=value_dim,
                             d_ff=d_ff, dropout=dropout, attention_dropout=attention_dropout,
                             attention_bias=attention_bias, norm=norm, epsilon=epsilon)
        self.self_attention = self.attention("self_attention")
        self.self_residual = self.residual("self_residual")
        self.feed_forward = PositionwiseFeedForward(d_ff, name="feed_forward")
        self.feed_forward_residual = self.residual("feed_forward_residual")

    def attention(self, name: str) -> MultiHeadAttention:
        s = self.settings
        return MultiHeadAttention(s["num_heads"], s["key_dim"], s["value_dim"],
                                  dropout=s["attention_dropout"], use_bias=s["attention_bias"],
                                  name=name)

    def residual(self, name: str) -> ResidualNorm:
        return ResidualNorm(self.settings["norm"], self.settings["dropout"],
                            self.settings["epsilon"], name=name)

    def feed_forward_block(self, x, training=None):
        """The residual feed-forward block: the last sub-layer of both layers."""
        normed = self.feed_forward_residual.normalize_input(x)
        return self.feed_forward_residual(x, self.feed_forward(normed), training=training)

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
        attended, weights = self.self_attention(
            self.self_residual.normalize_input(x), attention_mask=padding_mask,
            training=training, return_attention_scores=True)
        x = self.feed_forward_block(self.self_residual(x, attended, training=training), training)
        return (x, weights) if return_attention_scores else x


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
        attended, self_weights = self.self_attention(
            self.self_residual.normalize_input(x), attention_mask=self_mask, training=training,
            return_attention_scores=True)
        x = self.self_residual(x, attended, training=training)
        x, cross_weights = self.cross_and_feed_forward(x, cross_mask, training,
                                                       key_value=encoder_output)
        return (x, (self_weights, cross_weights)) if return_attention_scores else x

    def step(self, x, self_cache, cross_cache, index, cross_mask):
        """One incremental decoding position for `beam` hypotheses of each sentence.

        Args:
            x: `[batch, beam, d_model]`, the hypotheses' newest positions (position `index`).
            self_cache: this layer's self-attention cache (`MultiHeadAttention.init_cache`),
                one row per hypothesis.
            cross_cache: the encoder's keys/values `[batch, heads, src_len, dim]`.
            index: scalar int32, the position.
            cross_mask: `[batch, 1, src_len]`.

        Returns:
            The output `[batch, beam, d_model]` and the updated self-attention cache.

        Encoder-decoder attention treats the beam axis as the query axis, so the encoder
        keys/values serve every hypothesis of a sentence without being tiled or gathered.
        """
        batch, beam, d_model = ops.shape(x)[0], ops.shape(x)[1], x.shape[-1]
        per_hypothesis = ops.reshape(x, (batch * beam, 1, d_model))
        attended, self_cache = self.self_attention(
            self.self_residual.normalize_input(per_hypothesis), cache=self_cache,
            cache_index=index)
        per_hypothesis = self.self_residual(per_hypothesis, attended)
        x, _ = self.cross_and_feed_forward(ops.reshape(per_hypothesis, (batch, beam, d_model)),
                                           cross_mask, None, cache=cross_cache)
        return x, self_cache

    def cross_and_feed_forward(self, x, cross_mask, training, key_value=None, cache=None):
        """The encoder-decoder attention block (over `key_value`, or the keys/values in
        `cache`), then the feed-forward block; returns the output and the attention weights."""
        attended, cross_weights = self.cross_attention(
            self.cross_residual.normalize_input(x), key_value=key_value,
            attention_mask=cross_mask, cache=cache, training=training,
            return_attention_scores=True)
        x = self.cross_residual(x, attended, training=training)
        return self.feed_forward_block(x, training), cross_weights
