"""One encoder layer: self-attention then feed-forward, each in a residual block (3.1)."""
import keras

from keras_transformer.kernels import PADDED
from keras_transformer.layers.block import TransformerBlock


@keras.saving.register_keras_serializable(package="keras_transformer")
class EncoderLayer(TransformerBlock):
    """Self-attention over the source, then the position-wise feed-forward network, each in a
    residual block (`TransformerBlock`'s settings)."""

    def build(self, input_shape) -> None:
        for layer in (self.self_attention, self.feed_forward, self.self_residual,
                      self.feed_forward_residual):
            layer.build(input_shape)

    def call(self, x, padding_mask=None, training=None, return_attention_scores: bool = False,
             layout=PADDED):
        """`padding_mask`: `[batch, 1, src_len]`, True on real tokens. `x` and the output are
        in `layout` (`kernels.PADDED`, or a `kernels.TokenLayout`: the real tokens only, packed
        `[N, d_model]`)."""
        attended, weights = self.self_attention(
            self.self_residual.normalize_input(x), attention_mask=padding_mask,
            query_layout=layout, training=training, return_attention_scores=True)
        x = self.feed_forward_block(self.self_residual(x, attended, training=training), training)
        return (x, weights) if return_attention_scores else x
