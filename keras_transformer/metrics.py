"""Token-level metrics that ignore padding: accuracy and perplexity."""
from __future__ import annotations

import keras
import tensorflow as tf
from keras import ops

from keras_transformer.hooks import replaceable
from keras_transformer.config import PAD_ID


@replaceable
def log_normalizer(logits: tf.Tensor) -> tf.Tensor:
    """`logsumexp` of float32 `logits` `[..., vocab]` over the vocabulary (a hook)."""
    return tf.reduce_logsumexp(logits, axis=-1)


@replaceable
def predicted_ids(logits: tf.Tensor) -> tf.Tensor:
    """The argmax of float32 `logits` `[..., vocab]`, int32 (a hook)."""
    return tf.argmax(logits, axis=-1, output_type=tf.int32)


def token_cross_entropy(y_true: tf.Tensor, logits: tf.Tensor) -> tf.Tensor:
    """Per-token `-log p_y = logsumexp(z) - z_y` (unsmoothed) of int32 labels and float32
    logits."""
    true_logits = tf.gather(logits, y_true, batch_dims=y_true.shape.rank)
    return log_normalizer(logits) - true_logits


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
        predictions = predicted_ids(ops.cast(y_pred, "float32"))
        return ops.cast(ops.equal(predictions, y_true), "float32")


@keras.saving.register_keras_serializable(package="keras_transformer")
class Perplexity(_MaskedTokenMean):
    """exp of the mean (unsmoothed) cross-entropy per non-padding target token."""

    def __init__(self, name: str = "perplexity", **kwargs):
        super().__init__(name=name, **kwargs)

    def token_values(self, y_true, y_pred):
        return token_cross_entropy(y_true, ops.cast(y_pred, "float32"))

    def result(self):
        return ops.exp(self.mean())
