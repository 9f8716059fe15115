"""Output logits together with their factors `hidden @ kernel`: what the model hands a loss that
can differentiate through the factors (`LabelSmoothedCrossEntropy.call_on_factors`) without
materializing the gradient with respect to the `[tokens, vocab]` logits."""
from __future__ import annotations

from typing import NamedTuple

import tensorflow as tf
from keras import ops


class LogitFactors(NamedTuple):
    """`logits = hidden @ kernel` (`kernel^T` when `transposed`)."""
    logits: tf.Tensor  # float32 [..., vocab]
    hidden: tf.Tensor  # [..., d_model], compute dtype
    kernel: tf.Tensor  # [vocab, d_model] when transposed, else [d_model, vocab]; compute dtype
    transposed: bool


def factor_logits(hidden, kernel, transposed: bool) -> LogitFactors:
    """The float32 logits `[..., vocab]` of `hidden [..., d_model]` and `kernel` (`[vocab,
    d_model]` when `transposed`: a tied embedding matrix, multiplied with `transpose_b` so that
    its gradient comes out as `[vocab, d_model]`, without a transposed copy), with the factors."""
    kernel = tf.cast(ops.convert_to_tensor(kernel), hidden.dtype)
    rows = tf.reshape(hidden, (-1, tf.shape(hidden)[-1]))
    logits = tf.cast(tf.linalg.matmul(rows, kernel, transpose_b=transposed), tf.float32)
    vocab = kernel.shape[0] if transposed else kernel.shape[1]
    logits = tf.reshape(logits, tf.concat([tf.shape(hidden)[:-1], [vocab]], axis=0))
    return LogitFactors(logits, hidden, kernel, transposed)
