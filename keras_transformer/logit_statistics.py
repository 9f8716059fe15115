"""Softmax, log-normalizer and argmax of output logits, computed once per step.

The loss, its gradient and the token metrics all need the same per-token quantities of the
`[tokens, vocab]` logits, by far the largest tensor of a training step. Computed separately
(logsumexp twice, a recomputed softmax in the gradient, Keras's argmax with its extra passes),
they cost about twice as much as the single set below that all of them share.
"""
from __future__ import annotations

from typing import NamedTuple

import tensorflow as tf

from keras_transformer.graph_memo import graph_memo


class LogitStatistics(NamedTuple):
    """Per-token statistics of logits `[..., vocab]`."""
    probabilities: tf.Tensor  # softmax, [..., vocab]
    log_normalizer: tf.Tensor  # logsumexp, [...]
    predictions: tf.Tensor  # argmax, int32 [...]


def logit_statistics(logits: tf.Tensor) -> LogitStatistics:
    """The statistics of float32 `logits`, shared by every caller in the same traced graph.

    Passes over the logits: one fused softmax, one argmax. The log-normalizer needs no
    further pass: at the argmax k, `logsumexp(z) = z_k - log softmax(z)_k`, and
    `softmax(z)_k >= 1 / vocab` never underflows.
    """
    memo = graph_memo("logit_statistics")
    if memo is None:
        return _statistics(logits)
    key = logits.ref()
    if key not in memo:
        memo[key] = _statistics(logits)
    return memo[key]


def _statistics(logits: tf.Tensor) -> LogitStatistics:
    probabilities = tf.nn.softmax(logits)
    predictions = tf.argmax(logits, axis=-1, output_type=tf.int32)
    batch_dims = predictions.shape.rank
    top_logit = tf.gather(logits, predictions, batch_dims=batch_dims)
    top_probability = tf.gather(probabilities, predictions, batch_dims=batch_dims)
    return LogitStatistics(probabilities, top_logit - tf.math.log(top_probability), predictions)
