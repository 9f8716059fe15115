"""Label-smoothed cross-entropy (section 5.4) normalized by the global number of target tokens."""
import keras
import tensorflow as tf
from keras import ops

from keras_transformer.logit_statistics import logit_statistics
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
    kernels are slower on CPU (benchmarks/loss_speed.py).
    """
    y_true = tf.cast(y_true, tf.int32)
    logits = tf.cast(logits, tf.float32)
    statistics = logit_statistics(logits)
    cross_entropy = token_cross_entropy(y_true, logits)

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


def token_cross_entropy(y_true, logits):
    """Per-token `-log p_y` (no gradient; the loss above has one)."""
    logits = tf.cast(logits, tf.float32)
    y_true = tf.cast(y_true, tf.int32)
    true_logits = tf.gather(logits, y_true, batch_dims=y_true.shape.rank)
    return logit_statistics(logits).log_normalizer - true_logits
