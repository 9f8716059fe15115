"""Token-level metrics that ignore padding: accuracy and perplexity."""
from __future__ import annotations

from typing import NamedTuple, Optional

import keras
import tensorflow as tf
from keras import ops

from keras_transformer.hooks import replaceable
from keras_transformer.vocab_ids import PAD_ID


class LogitStatistics(NamedTuple):
    """Per-token statistics of logits `[..., vocab]`: what the metrics (and a fast loss) read of
    the `[tokens, vocab]` logits, by far the largest tensor of a training step."""
    probabilities: tf.Tensor  # softmax, [..., vocab]
    log_normalizer: tf.Tensor  # logsumexp, [...]
    predictions: tf.Tensor  # argmax, int32 [...]


@replaceable
def logit_statistics(logits: tf.Tensor) -> LogitStatistics:
    """Softmax, logsumexp and argmax of float32 `logits` (a kernel hook)."""
    return LogitStatistics(tf.nn.softmax(logits), tf.reduce_logsumexp(logits, axis=-1),
                           tf.argmax(logits, axis=-1, output_type=tf.int32))


def token_cross_entropy(y_true: tf.Tensor, logits: tf.Tensor,
                        statistics: Optional[LogitStatistics] = None) -> tf.Tensor:
    """Per-token `-log p_y` (unsmoothed) of int32 labels and float32 logits, from the logits'
    `statistics` (default: `logit_statistics(logits)`)."""
    true_logits = tf.gather(logits, y_true, batch_dims=y_true.shape.rank)
    if statistics is None:
        statistics = logit_statistics(logits)
    return statistics.log_normalizer - true_logits


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
        predictions = logit_statistics(ops.cast(y_pred, "float32")).predictions
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
