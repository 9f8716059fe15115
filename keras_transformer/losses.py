"""Label-smoothed cross-entropy (section 5.4) normalized by the global number of target tokens."""
import keras
import tensorflow as tf
from keras import ops

from keras_transformer.logit_factors import LogitFactors, factors_of
from keras_transformer.logit_statistics import logit_statistics
from keras_transformer.reductions import sum_of_rows
from keras_transformer.vocab_ids import PAD_ID


@keras.saving.register_keras_serializable(package="keras_transformer")
class LabelSmoothedCrossEntropy(keras.losses.Loss):
    """Cross-entropy against `(1 - eps) * one_hot(y) + eps / vocab`, averaged over real tokens.

    Padding targets (id 0) contribute nothing. The average is over the target tokens of the
    *global* batch: under a `tf.distribute` strategy each replica divides its own sum by the
    token count all-reduced across replicas, and the replicas' gradients add up to those of the
    global mean, so neither the loss nor the update depends on how the batch was split. (The
    reduction is always "sum": Keras rescales only mean reductions across replicas.)
    """

    def __init__(self, label_smoothing: float = 0.1, name: str = "label_smoothed_cross_entropy",
                 **kwargs):
        kwargs.pop("reduction", None)
        super().__init__(name=name, reduction="sum", **kwargs)
        self.label_smoothing = label_smoothing

    def call(self, y_true, y_pred):
        y_true = ops.cast(y_true, "int32")
        mask = ops.cast(ops.not_equal(y_true, PAD_ID), "float32")
        token_losses = smoothed_token_losses(y_true, y_pred, self.label_smoothing) * mask
        tokens = ops.sum(mask)
        replica_context = tf.distribute.get_replica_context()
        if replica_context is not None:
            tokens = replica_context.all_reduce(tf.distribute.ReduceOp.SUM, tokens)
        return token_losses / ops.maximum(tokens, 1.0)

    def get_config(self) -> dict:
        return {**super().get_config(), "label_smoothing": self.label_smoothing}


def smoothed_token_losses(y_true, logits, label_smoothing: float):
    """Per-token `-sum_k q_k log p_k` with `q = (1 - eps) one_hot(y) + eps / vocab`.

    With `log p_k = z_k - logsumexp(z)` this is `logsumexp(z) - (1 - eps) z_y - eps mean(z)`,
    whose gradient `softmax(z) - q` is written out with the forward pass's softmax
    (`logit_statistics`, shared with the metrics): autodiff of the gather of `z_y` would
    scatter into the whole `[tokens, vocab]` gradient, and TensorFlow's fused cross-entropy
    kernels are slower on CPU (benchmarks/loss_speed.py). Logits from `factored_logits` (the
    model's) are differentiated through their factors (`_losses_through_factors`).
    """
    y_true = tf.cast(y_true, tf.int32)
    logits = tf.cast(logits, tf.float32)
    statistics = logit_statistics(logits)
    cross_entropy = token_cross_entropy(y_true, logits)
    factors = factors_of(logits)
    if factors is not None:
        return _losses_through_factors(y_true, cross_entropy, statistics, factors,
                                       label_smoothing)

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


def _losses_through_factors(y_true, cross_entropy, statistics, factors: LogitFactors,
                            label_smoothing: float):
    """`smoothed_token_losses` as a function of the logits' factors `hidden @ kernel`.

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
    hidden, kernel, transposed = factors
    vocab = kernel.shape[0 if transposed else 1]

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


def token_cross_entropy(y_true, logits):
    """Per-token `-log p_y` (no gradient; the loss above has one)."""
    logits = tf.cast(logits, tf.float32)
    y_true = tf.cast(y_true, tf.int32)
    true_logits = tf.gather(logits, y_true, batch_dims=y_true.shape.rank)
    return logit_statistics(logits).log_normalizer - true_logits
