"""Output logits that remember their factors `hidden @ kernel`, so a loss can differentiate
through the factors without materializing the gradient with respect to the logits.

The `[tokens, vocab]` logits are the largest tensor of a training step. Their gradient under
label-smoothed cross-entropy is `u * (softmax(z) - (1 - eps) one_hot(y) - eps / vocab)` (`u` the
per-token weight of the loss): a one-hot, a subtraction and a scaling, each one more pass over
that tensor, and the smoothing's mean logit one more in the forward pass. Given the factors,
`losses.smoothed_token_losses` multiplies the softmax itself into the two products and applies
the rest on the `[tokens, d_model]` side: `u` scales rows, the one-hot is a gather of the
labels' kernel rows (and a segment sum over the labels for the kernel), `eps / vocab` a rank-one
term, and the mean logit is `hidden @ mean(kernel)`.
"""
from __future__ import annotations

from typing import NamedTuple, Optional

import tensorflow as tf
from keras import ops

from keras_transformer.graph_memo import graph_memo


class LogitFactors(NamedTuple):
    """`logits = hidden @ kernel` (`kernel^T` when `transposed`), flattened to 2-D."""
    hidden: tf.Tensor  # [tokens, d_model], compute dtype
    kernel: tf.Tensor  # [vocab, d_model] when transposed, else [d_model, vocab]; compute dtype
    transposed: bool


def factored_logits(hidden, kernel, transposed: bool) -> tf.Tensor:
    """Float32 logits `[..., vocab]` of `hidden [..., d_model]` and `kernel` (`[vocab, d_model]`
    when `transposed`: a tied embedding matrix, multiplied with `transpose_b` so that its
    gradient comes out as `[vocab, d_model]`, without a transposed copy), remembered with their
    factors in the traced graph (`factors_of`). A loss that uses the factors depends on the
    weights directly, not through the logits: its gradient with respect to the logits tensor
    itself is None."""
    kernel = tf.cast(ops.convert_to_tensor(kernel), hidden.dtype)
    rows = tf.reshape(hidden, (-1, tf.shape(hidden)[-1]))
    logits = tf.cast(tf.linalg.matmul(rows, kernel, transpose_b=transposed), tf.float32)
    vocab = kernel.shape[0] if transposed else kernel.shape[1]
    logits = tf.reshape(logits, tf.concat([tf.shape(hidden)[:-1], [vocab]], axis=0))
    memo = graph_memo("logit_factors")
    if memo is not None:
        memo[logits.ref()] = LogitFactors(rows, kernel, transposed)
    return logits


def factors_of(logits: tf.Tensor) -> Optional[LogitFactors]:
    """The factors `factored_logits` made `logits` from in this graph, else None."""
    memo = graph_memo("logit_factors")
    return None if memo is None else memo.get(logits.ref())
