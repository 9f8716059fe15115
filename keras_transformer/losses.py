"""Label-smoothed cross-entropy (section 5.4) normalized by the global number of target tokens."""
import keras
import tensorflow as tf
from keras import ops

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

    With `log p_k = z_k - logsumexp(z)` this is `logsumexp(z) - (1 - eps) z_y - eps mean(z)`:
    only reductions over the vocabulary, no `[batch, len, vocab]` log-probability tensor.
    """
    logits = ops.cast(logits, "float32")
    true_logits = ops.squeeze(
        ops.take_along_axis(logits, ops.expand_dims(y_true, -1), axis=-1), -1)
    return (ops.logsumexp(logits, axis=-1) - (1.0 - label_smoothing) * true_logits
            - label_smoothing * ops.mean(logits, axis=-1))
