"""Per-token label-smoothed cross-entropy `-sum_k q_k log p_k`, `q = (1 - eps) one_hot(y) +
eps / vocab` (section 5.4), of float32 logits or of their factors (`LogitFactors`).

With `log p_k = z_k - logsumexp(z)` this is `logsumexp(z) - (1 - eps) z_y - eps mean(z)`.
"""
from __future__ import annotations

import tensorflow as tf

from keras_transformer.kernels import reductions
from keras_transformer.kernels.statistics import fast as shared_statistics
from keras_transformer.logit_factors import LogitFactors


def token_cross_entropy(y_true: tf.Tensor, logits: tf.Tensor, statistics) -> tf.Tensor:
    """Per-token `-log p_y` given the logits' `LogitStatistics` (no gradient is defined here;
    the losses below have theirs)."""
    true_logits = tf.gather(logits, y_true, batch_dims=y_true.shape.rank)
    return statistics.log_normalizer - true_logits


def reference(y_true: tf.Tensor, logits: tf.Tensor, label_smoothing: float) -> tf.Tensor:
    """The formula above, differentiated by autodiff."""
    log_normalizer = tf.reduce_logsumexp(logits, axis=-1)
    true_logits = tf.gather(logits, y_true, batch_dims=y_true.shape.rank)
    return (log_normalizer - (1.0 - label_smoothing) * true_logits
            - label_smoothing * tf.reduce_mean(logits, axis=-1))


def fast(y_true: tf.Tensor, logits: tf.Tensor, label_smoothing: float) -> tf.Tensor:
    """`reference` with the gradient `softmax(z) - q` written out with the forward pass's
    softmax (`statistics.fast`, shared with the metrics): autodiff of the gather of `z_y`
    would scatter into the whole `[tokens, vocab]` gradient, and TensorFlow's fused
    cross-entropy kernels are slower on CPU (benchmarks/loss_speed.py)."""
    statistics = shared_statistics(logits)
    cross_entropy = token_cross_entropy(y_true, logits, statistics)

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


def reference_through_factors(y_true: tf.Tensor, factors: LogitFactors,
                              label_smoothing: float) -> tf.Tensor:
    """`reference` of the factors' logits."""
    return reference(y_true, factors.logits, label_smoothing)


def fast_through_factors(y_true: tf.Tensor, factors: LogitFactors,
                         label_smoothing: float) -> tf.Tensor:
    """`fast` as a function of the logits' factors `hidden @ kernel`: the loss depends on the
    weights through the factors, and its gradient with respect to the logits tensor is None.

    With `u` the upstream per-token weights, the gradient `G = u (softmax - q)` reaches the
    factors as `G kernel^T` and `hidden^T G`. Only the softmax enters the two products; the rest
    of `G` is applied on the `[tokens, d_model]` side: `u` scales the rows, the one-hot's
    `(1 - eps)` is a gather of the labels' kernel rows for `hidden` and a segment sum over the
    labels for `kernel`, and the constant `eps / vocab` a rank-one term. The mean logit is
    `hidden @ mean(kernel)`. So no pass over `[tokens, vocab]` is left but the softmax, the
    metrics' argmax and the products. In a reduced-precision compute dtype the softmax and
    `u hidden` enter the products rounded (autodiff rounds `G` once): the label's probability
    gets back what rounding took from it, since the one-hot term nearly cancels it, and the
    gradients stay within 2x of autodiff's rounding error (tests/test_losses.py).
    """
    eps = label_smoothing
    logits, hidden, kernel, transposed = factors
    hidden = tf.reshape(hidden, (-1, tf.shape(hidden)[-1]))
    vocab = kernel.shape[0 if transposed else 1]
    statistics = shared_statistics(logits)
    cross_entropy = token_cross_entropy(y_true, logits, statistics)

    @tf.custom_gradient
    def losses(hidden, kernel):
        hidden_32 = tf.cast(hidden, tf.float32)
        value = cross_entropy
        if eps:
            kernel_32 = tf.cast(kernel, tf.float32)
            mean_kernel = (reductions.sum_of_rows(kernel_32) if transposed
                           else tf.reduce_sum(kernel_32, axis=1)) / vocab
            mean_logits = tf.reshape(tf.linalg.matvec(hidden_32, mean_kernel),
                                     tf.shape(cross_entropy))
            value = ((1.0 - eps) * cross_entropy
                     + eps * (statistics.log_normalizer - mean_logits))

        def gradient(upstream):
            weights = tf.reshape(tf.cast(upstream, tf.float32), (-1, 1))  # u, [tokens, 1]
            labels = tf.reshape(y_true, (-1,))
            probabilities = tf.reshape(statistics.probabilities, (-1, vocab))
            rounded = tf.cast(probabilities, hidden.dtype)
            weighted_hidden = hidden_32 * weights
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
                    hidden_32, weights[:, 0], transpose_a=True)
            if not transposed:
                kernel_correction = tf.transpose(kernel_correction)
            d_kernel += tf.cast(kernel_correction, d_kernel.dtype)
            return tf.cast(d_hidden * weights, hidden.dtype), tf.cast(d_kernel, kernel.dtype)

        return value, gradient

    return losses(hidden, kernel)


def _at_labels(values, labels):
    """`values[t, labels[t]]` of `[tokens, vocab]` values."""
    return tf.gather(values, labels[:, None], batch_dims=1)[:, 0]
