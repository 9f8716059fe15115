"""What encoder and decoder layers share: self-attention and feed-forward residual blocks."""
import keras

from keras_transformer.layers.attention import MultiHeadAttention
from keras_transformer.layers.feed_forward import PositionwiseFeedForward
from keras_transformer.layers.residual import ResidualNorm


class TransformerBlock(keras.layers.Layer):
    """Base of `EncoderLayer` and `DecoderLayer`: holds their settings and common sub-layers."""

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
        normed = self.feed_forward_residual.normalize_input(x)
        return self.feed_forward_residual(x, self.feed_forward(normed), training=training)

    def get_config(self) -> dict:
        return {**super().get_config(), **self.settings}
