"""One encoder layer: self-attention then feed-forward, each in a residual block (3.1)."""
import keras

from keras_transformer.layers.attention import MultiHeadAttention
from keras_transformer.layers.feed_forward import PositionwiseFeedForward
from keras_transformer.layers.residual import ResidualNorm


@keras.saving.register_keras_serializable(package="keras_transformer")
class EncoderLayer(keras.layers.Layer):
    def __init__(self, num_heads: int, key_dim: int, value_dim: int, d_ff: int,
                 dropout: float = 0.1, attention_dropout: float = 0.0, norm: str = "post",
                 epsilon: float = 1e-6, **kwargs):
        super().__init__(**kwargs)
        self.settings = dict(num_heads=num_heads, key_dim=key_dim, value_dim=value_dim,
                             d_ff=d_ff, dropout=dropout, attention_dropout=attention_dropout,
                             norm=norm, epsilon=epsilon)
        self.self_attention = MultiHeadAttention(num_heads, key_dim, value_dim,
                                                 dropout=attention_dropout, name="self_attention")
        self.feed_forward = PositionwiseFeedForward(d_ff, name="feed_forward")
        self.attention_residual = ResidualNorm(norm, dropout, epsilon, name="attention_residual")
        self.feed_forward_residual = ResidualNorm(norm, dropout, epsilon,
                                                  name="feed_forward_residual")

    def build(self, input_shape) -> None:
        for layer in (self.self_attention, self.feed_forward, self.attention_residual,
                      self.feed_forward_residual):
            layer.build(input_shape)

    def call(self, x, padding_mask=None, training=None, return_attention_scores: bool = False):
        """`padding_mask`: `[batch, 1, src_len]`, True on real tokens."""
        normed = self.attention_residual.normalize_input(x)
        attended, weights = self.self_attention(normed, attention_mask=padding_mask,
                                                training=training, return_attention_scores=True)
        x = self.attention_residual(x, attended, training=training)
        x = self.feed_forward_residual(
            x, self.feed_forward(self.feed_forward_residual.normalize_input(x)), training=training)
        return (x, weights) if return_attention_scores else x

    def get_config(self) -> dict:
        return {**super().get_config(), **self.settings}
