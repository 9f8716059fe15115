"""One decoder layer: masked self-attention, encoder-decoder attention, feed-forward (3.1)."""
import keras
from keras import ops

from keras_transformer.kernels import PADDED
from keras_transformer.layers.block import TransformerBlock


@keras.saving.register_keras_serializable(package="keras_transformer")
class DecoderLayer(TransformerBlock):
    """Masked self-attention, encoder-decoder attention, then the position-wise feed-forward
    network, each in a residual block (`TransformerBlock`'s settings); `step` runs one position
    with a key/value cache."""

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
             return_attention_scores: bool = False, layout=PADDED, source_layout=PADDED):
        """Teacher-forced pass over a whole target prefix.

        `self_mask`: `[batch, tgt_len, tgt_len]` (causal and padding); `cross_mask`:
        `[batch, 1, src_len]`. `x` and the output are in `layout` (`kernels.PADDED`, or a
        `kernels.TokenLayout` of the target: the real tokens only, packed `[N, d_model]`),
        `encoder_output` in `source_layout`.
        With `return_attention_scores`, also returns `(self_weights, cross_weights)`.
        """
        attended, self_weights = self.self_attention(
            self.self_residual.normalize_input(x), attention_mask=self_mask,
            query_layout=layout, training=training, return_attention_scores=True)
        x = self.self_residual(x, attended, training=training)
        x, cross_weights = self._cross_and_feed_forward(
            x, cross_mask, training, key_value=encoder_output, query_layout=layout,
            key_layout=source_layout)
        return (x, (self_weights, cross_weights)) if return_attention_scores else x

    def step(self, x, self_cache, cross_cache, step, cross_mask, ancestors):
        """One incremental decoding position for `beam` hypotheses of each sentence.

        `x`: `[batch, beam, d_model]`, the hypotheses' newest positions. Self-attention runs per
        hypothesis against `self_cache` (from `init_cache`; updated and returned), its
        positions in the cache rows `ancestors` `[batch * beam, max_len]`. Encoder-decoder
        attention treats the beam axis as the query axis, so the encoder keys/values in
        `cross_cache` (`[batch, heads, src_len, dim]`) serve every hypothesis of a sentence
        without being tiled or gathered.
        """
        batch, beam, d_model = ops.shape(x)[0], ops.shape(x)[1], x.shape[-1]
        per_hypothesis = ops.reshape(x, (batch * beam, 1, d_model))
        attended, self_cache = self.self_attention(
            self.self_residual.normalize_input(per_hypothesis), cache=self_cache,
            cache_step=step, cache_ancestors=ancestors)
        per_hypothesis = self.self_residual(per_hypothesis, attended)
        x, _ = self._cross_and_feed_forward(
            ops.reshape(per_hypothesis, (batch, beam, d_model)), cross_mask, None,
            cache=cross_cache)
        return x, self_cache

    def _cross_and_feed_forward(self, x, cross_mask, training, key_value=None, cache=None,
                                query_layout=PADDED, key_layout=PADDED):
        attended, cross_weights = self.cross_attention(
            self.cross_residual.normalize_input(x), key_value=key_value,
            attention_mask=cross_mask, cache=cache, query_layout=query_layout,
            key_layout=key_layout, training=training, return_attention_scores=True)
        x = self.cross_residual(x, attended, training=training)
        return self.feed_forward_block(x, training), cross_weights
