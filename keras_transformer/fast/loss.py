"""The loss and metrics side of a fast training step: the logits' factors, statistics shared
within a traced step, and label-smoothed cross-entropy with a written-out gradient, of the logits
(the `smoothed_cross_entropy` hook) or through their factors `hidden @ kernel`.

Per token, `-sum_k q_k log p_k` with `q = (1 - eps) one_hot(y) + eps / vocab` is
`logsumexp(z) - (1 - eps) z_y - eps mean(z)`.
"""
from __future__ import annotations

from typing import NamedTuple

import tensorflow as tf
from keras import ops

from keras_transformer.fast.twins import sum_of_rows

_MEMO = "_keras_transformer_logit_statistics"


class LogitStatistics(NamedTuple):
    """Per-token statistics of logits `[..., vocab]`, by far the largest tensor of a training
    step: what the loss and both metrics read of them."""
    probabilities: tf.Tensor  # softmax, [..., vocab]
    log_normalizer: tf.Tensor  # logsumexp, [...]
    predictions: tf.Tensor  # argmax, int32 [...]


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


def logit_statistics(logits: tf.Tensor) -> LogitStatistics:
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


def log_normalizer(logits: tf.Tensor) -> tf.Tensor:
    """`metrics.log_normalizer` from the statistics shared within the traced graph."""
    return logit_statistics(logits).log_normalizer


def predicted_ids(logits: tf.Tensor) -> tf.Tensor:
    """`metrics.predicted_ids` from the statistics shared within the traced graph."""
    return logit_statistics(logits).predictions


def _single_pass(logits: tf.Tensor) -> LogitStatistics:
    probabilities = tf.nn.softmax(logits)
    predictions = tf.argmax(logits, axis=-1, output_type=tf.int32)
    batch_dims = predictions.shape.rank
    top_logit = tf.gather(logits, predictions, batch_dims=batch_dims)
    top_probability = tf.gather(probabilities, predictions, batch_dims=batch_dims)
    return LogitStatistics(probabilities, top_logit - tf.math.log(top_probability), predictions)


def smoothed_cross_entropy(y_true: tf.Tensor, logits: tf.Tensor,
                           label_smoothing: float) -> tf.Tensor:
    """The reference `smoothed_cross_entropy` with the gradient `softmax(z) - q` written out
    with the forward pass's softmax (`logit_statistics`, shared with the metrics): autodiff of
    the gather of `z_y` would scatter into the whole `[tokens, vocab]` gradient, and
    TensorFlow's fused cross-entropy kernels are slower on CPU (benchmarks/loss_speed.py)."""
    statistics = logit_statistics(logits)
    cross_entropy = _cross_entropy(y_true, logits, statistics)

    @tf.custom_gradient
    def losses(logits):
        value = cross_entropy
        if label_smoothing:  # A pass over [tokens, vocab] that plain cross-entropy skips.
            value = ((1.0 - label_smoothing) * cross_entropy + label_smoothing
                     * (statistics.log_normalizer - tf.reduce_mean(logits, axis=-1)))

        def gradient(upstream):
            vocab = tf.shape(logits)[-1]
            off_value = label_smoothing / tf.cast(vocab, tf.float32)
            targets = tf.one_hot(y_true, vocab, on_value=1.0 - label_smoothing + off_value,
                                 off_value=off_value)
            return (statistics.probabilities - targets) * upstream[..., None]

        return value, gradient

    return losses(logits)


def smoothed_cross_entropy_through_factors(y_true: tf.Tensor, factors: LogitFactors,
                         label_smoothing: float) -> tf.Tensor:
    """`smoothed_cross_entropy` as a function of the logits' factors `hidden @ kernel`: the loss
    depends on the weights through the factors, and its gradient with respect to the logits
    tensor is None.

    With `u` the upstream per-token scales, the gradient `G = u (softmax - q)` reaches the
    factors as `G kernel^T` and `hidden^T G`. Only the softmax enters the two products; the rest
    of `G` is applied on the `[tokens, d_model]` side: `u` scales the rows, the one-hot's
    `(1 - eps)` is a gather of the labels' kernel rows for `hidden` and a segment sum over the
    labels for `kernel`, and the constant `eps / vocab` a rank-one term. The mean logit is
    `hidden @ mean(kernel)`. So no pass over `[tokens, vocab]` is left but the softmax, the
    metrics' argmax and the products. In a reduced-precision compute dtype the softmax and
    `u hidden` enter the products rounded (autodiff rounds `G` once): the label's probability
    gets back what rounding took from it, since the one-hot term nearly cancels it, and the
    gradients stay within 2x of autodiff's rounding error (tests/unit/test_losses.py).
    """
    eps = label_smoothing
    logits, hidden, kernel, transposed = factors
    hidden = tf.reshape(hidden, (-1, tf.shape(hidden)[-1]))
    vocab = kernel.shape[0 if transposed else 1]
    statistics = logit_statistics(logits)
    cross_entropy = _cross_entropy(y_true, logits, statistics)

    @tf.custom_gradient
    def losses(hidden, kernel):
        hidden_32 = tf.cast(hidden, tf.float32)
        value = cross_entropy
        if eps:
            kernel_32 = tf.cast(kernel, tf.float32)
            mean_kernel = (sum_of_rows(kernel_32) if transposed
                           else tf.reduce_sum(kernel_32, axis=1)) / vocab
            mean_logits = tf.reshape(tf.linalg.matvec(hidden_32, mean_kernel),
                                     tf.shape(cross_entropy))
            value = ((1.0 - eps) * cross_entropy
                     + eps * (statistics.log_normalizer - mean_logits))

        def gradient(upstream):
            token_scales = tf.reshape(tf.cast(upstream, tf.float32), (-1, 1))  # u, [tokens, 1]
            labels = tf.reshape(y_true, (-1,))
            probabilities = tf.reshape(statistics.probabilities, (-1, vocab))
            rounded = tf.cast(probabilities, hidden.dtype)
            weighted_hidden = hidden_32 * token_scales
            hidden_operand = tf.cast(weighted_hidden, hidden.dtype)
            if transposed:
                d_hidden = tf.linalg.matmul(rounded, kernel)
                d_kernel = tf.linalg.matmul(rounded, hidden_operand, transpose_a=True)
                label_rows = tf.gather(kernel, labels)
            else:
                d_hidden = tf.linalg.matmul(rounded, kernel, transpose_b=True)
                d_kernel = tf.linalg.matmul(hidden_operand, rounded, transpose_a=True)
                label_rows = tf.transpose(tf.gather(kernel, labels, axis=1))
            label_coefficients = tf.fill(tf.shape(labels), eps - 1.0)  # one-hot: -(1 - eps)
            if rounded.dtype != probabilities.dtype:
                label_coefficients += (_at_labels(probabilities, labels)
                                       - tf.cast(_at_labels(rounded, labels), tf.float32))
            d_hidden = (tf.cast(d_hidden, tf.float32)
                        + label_coefficients[:, None] * tf.cast(label_rows, tf.float32))
            kernel_correction = tf.math.unsorted_segment_sum(
                label_coefficients[:, None] * weighted_hidden, labels, vocab)  # [vocab, d_model]
            if eps:  # -eps / vocab in every column of G
                d_hidden -= eps * mean_kernel
                kernel_correction -= eps / vocab * tf.linalg.matvec(
                    hidden_32, token_scales[:, 0], transpose_a=True)
            if not transposed:
                kernel_correction = tf.transpose(kernel_correction)
            d_kernel += tf.cast(kernel_correction, d_kernel.dtype)
            return tf.cast(d_hidden * token_scales, hidden.dtype), tf.cast(d_kernel, kernel.dtype)

        return value, gradient

    return losses(hidden, kernel)


def _cross_entropy(y_true: tf.Tensor, logits: tf.Tensor, statistics: LogitStatistics
                   ) -> tf.Tensor:
    """`metrics.token_cross_entropy` with the shared `statistics`' log-normalizer (whichever
    implementation is installed)."""
    return statistics.log_normalizer - tf.gather(logits, y_true, batch_dims=y_true.shape.rank)


def _at_labels(values, labels):
    """`values[t, labels[t]]` of `[tokens, vocab]` values."""
    return tf.gather(values, labels[:, None], batch_dims=1)[:, 0]
