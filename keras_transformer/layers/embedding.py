"""Token embedding scaled by sqrt(d_model) whose transpose is the pre-softmax projection (3.4)."""
import keras
from keras import ops

from keras_transformer.logit_factors import LogitFactors, factor_logits
from keras_transformer.vocab_ids import PAD_ID


@keras.saving.register_keras_serializable(package="keras_transformer")
class ScaledEmbedding(keras.layers.Layer):
    """`ids -> E[ids] * sqrt(d_model)`; `logits(x) = x E^T` reuses the same matrix.

    Masks padding (id 0) through `compute_mask`.
    """

    def __init__(self, vocab_size: int, d_model: int, **kwargs):
        super().__init__(**kwargs)
        self.vocab_size = vocab_size
        self.d_model = d_model

    def build(self, input_shape=None) -> None:
        self.embeddings = self.add_weight(
            name="embeddings", shape=(self.vocab_size, self.d_model),
            initializer=keras.initializers.RandomNormal(stddev=self.d_model ** -0.5))

    def call(self, ids):
        vectors = ops.take(self.embeddings, ops.cast(ids, "int32"), axis=0)
        return ops.cast(vectors, self.compute_dtype) * ops.cast(self.d_model ** 0.5,
                                                               self.compute_dtype)

    def compute_mask(self, ids, mask=None):
        return ops.not_equal(ids, PAD_ID)

    def logits(self, hidden) -> LogitFactors:
        """The tied pre-softmax linear transformation `hidden E^T`: float32 logits with their
        factors."""
        return factor_logits(hidden, self.embeddings, transposed=True)

    def get_config(self) -> dict:
        return {**super().get_config(), "vocab_size": self.vocab_size, "d_model": self.d_model}
