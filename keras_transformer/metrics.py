"""Token-level metrics that ignore padding: accuracy and perplexity."""
import keras
from keras import ops

from keras_transformer import kernels
from keras_transformer.vocab_ids import PAD_ID


class _MaskedTokenMean(keras.metrics.Metric):
    """Sums a per-token quantity over non-padding targets and divides by their count."""

    def __init__(self, name: str, **kwargs):
        super().__init__(name=name, **kwargs)
        self.total = self.add_variable(shape=(), initializer="zeros", name="total")
        self.count = self.add_variable(shape=(), initializer="zeros", name="count")

    def token_values(self, y_true, y_pred):
        raise NotImplementedError

    def update_state(self, y_true, y_pred, sample_weight=None):
        y_true = ops.cast(y_true, "int32")
        mask = ops.cast(ops.not_equal(y_true, PAD_ID), "float32")
        self.total.assign_add(ops.sum(self.token_values(y_true, y_pred) * mask))
        self.count.assign_add(ops.sum(mask))

    def mean(self):
        return self.total / ops.maximum(self.count, 1.0)

    def result(self):
        return self.mean()


@keras.saving.register_keras_serializable(package="keras_transformer")
class MaskedTokenAccuracy(_MaskedTokenMean):
    """Fraction of non-padding target tokens whose argmax prediction is right."""

    def __init__(self, name: str = "token_accuracy", **kwargs):
        super().__init__(name=name, **kwargs)

    def token_values(self, y_true, y_pred):
        predictions = kernels.logit_statistics(ops.cast(y_pred, "float32")).predictions
        return ops.cast(ops.equal(predictions, y_true), "float32")


@keras.saving.register_keras_serializable(package="keras_transformer")
class Perplexity(_MaskedTokenMean):
    """exp of the mean (unsmoothed) cross-entropy per non-padding target token."""

    def __init__(self, name: str = "perplexity", **kwargs):
        super().__init__(name=name, **kwargs)

    def token_values(self, y_true, y_pred):
        return kernels.token_cross_entropy(y_true, ops.cast(y_pred, "float32"))

    def result(self):
        return ops.exp(self.mean())
