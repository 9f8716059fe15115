"""Softmax, log-normalizer and argmax of output logits: what the loss, its gradient and the
token metrics need of the `[tokens, vocab]` logits, by far the largest tensor of a step."""
from __future__ import annotations

from typing import NamedTuple

import tensorflow as tf

_MEMO = "_keras_transformer_logit_statistics"


class LogitStatistics(NamedTuple):
    """Per-token statistics of logits `[..., vocab]`."""
    probabilities: tf.Tensor  # softmax, [..., vocab]
    log_normalizer: tf.Tensor  # logsumexp, [...]
    predictions: tf.Tensor  # argmax, int32 [...]


def reference(logits: tf.Tensor) -> LogitStatistics:
    """The statistics of float32 `logits`, computed for each caller."""
    return LogitStatistics(tf.nn.softmax(logits), tf.reduce_logsumexp(logits, axis=-1),
                           tf.argmax(logits, axis=-1, output_type=tf.int32))


def fast(logits: tf.Tensor) -> LogitStatistics:
    """The statistics of float32 `logits`, computed once per traced graph and shared by every
    caller in it (computed separately, they cost about twice as much).

    Passes over the logits: one fused softmax, one argmax. The log-normalizer needs no
    further pass: at the argmax k, `logsumexp(z) = z_k - log softmax(z)_k`, and
    `softmax(z)_k >= 1 / vocab` never underflows.
    """
    if tf.executing_eagerly():
        return _single_pass(logits)
    # A cache of this pure function in the graph being traced (the tensors may be captures);
    # it lives as long as the graph.
    graph = tf.compat.v1.get_default_graph()
    if not hasattr(graph, _MEMO):
        setattr(graph, _MEMO, {})
    memo = getattr(graph, _MEMO)
    key = logits.ref()
    if key not in memo:
        memo[key] = _single_pass(logits)
    return memo[key]


def _single_pass(logits: tf.Tensor) -> LogitStatistics:
    probabilities = tf.nn.softmax(logits)
    predictions = tf.argmax(logits, axis=-1, output_type=tf.int32)
    batch_dims = predictions.shape.rank
    top_logit = tf.gather(logits, predictions, batch_dims=batch_dims)
    top_probability = tf.gather(probabilities, predictions, batch_dims=batch_dims)
    return LogitStatistics(probabilities, top_logit - tf.math.log(top_probability), predictions)
