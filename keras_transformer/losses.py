"""Label-smoothed cross-entropy (section 5.4) normalized by the global number of target tokens,
and the guided alignment loss."""
from __future__ import annotations

import dataclasses

import keras
import tensorflow as tf
from keras import ops

from keras_transformer.hooks import replaceable
from keras_transformer.config import PAD_ID

_SMALLEST_PROBABILITY = 1e-9  # what an attention weight's log is taken of, at least


@replaceable
def smoothed_cross_entropy(y_true: tf.Tensor, logits: tf.Tensor,
                           label_smoothing: float) -> tf.Tensor:
    """Per-token `-sum_k q_k log p_k` with `q = (1 - eps) one_hot(y) + eps / vocab`, of int32
    labels and float32 logits `[..., vocab]` (a hook). With `log p_k = z_k -
    logsumexp(z)` it is `logsumexp(z) - (1 - eps) z_y - eps mean(z)`."""
    log_normalizer = tf.reduce_logsumexp(logits, axis=-1)
    true_logits = tf.gather(logits, y_true, batch_dims=y_true.shape.rank)
    return (log_normalizer - (1.0 - label_smoothing) * true_logits
            - label_smoothing * tf.reduce_mean(logits, axis=-1))


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
        token_losses = smoothed_cross_entropy(y_true, ops.cast(y_pred, "float32"),
                                              self.label_smoothing)
        return self.normalized(y_true, token_losses)

    def normalized(self, y_true, token_losses):
        """Per-token losses, zero at padding, divided by the global batch's target tokens (they
        sum to the loss)."""
        mask = ops.cast(ops.not_equal(y_true, PAD_ID), "float32")
        tokens = ops.sum(mask)
        replica_context = tf.distribute.get_replica_context()
        if replica_context is not None:
            tokens = replica_context.all_reduce(tf.distribute.ReduceOp.SUM, tokens)
        return token_losses * mask / ops.maximum(tokens, 1.0)

    def get_config(self) -> dict:
        return {**super().get_config(), "label_smoothing": self.label_smoothing}


@dataclasses.dataclass(frozen=True)
class GuidedAlignment:
    """Guided alignment (Garg et al. 2019): the encoder-decoder attention of decoder layer
    `layer`'s head `head` trained toward a statistical aligner's word alignment, its loss
    `weight` times the cross-entropy of the attention against the alignment, averaged over the
    global batch's target pieces that are linked to a source piece."""

    layer: int
    head: int
    weight: float = 0.05

    def __call__(self, attention: tf.Tensor, targets: tf.Tensor) -> tf.Tensor:
        """The loss of `attention`, the layer's float32 probabilities `[batch, heads, T, S]`,
        against `targets` `[batch, T, S]` (`batch_plan.alignment_targets`: each row sums to 1,
        or to 0 for a piece linked to none)."""
        probabilities = attention[:, self.head]
        cross_entropy = -tf.reduce_sum(
            targets * tf.math.log(tf.maximum(probabilities, _SMALLEST_PROBABILITY)))
        linked = tf.reduce_sum(targets)  # a linked piece's row sums to 1
        replica_context = tf.distribute.get_replica_context()
        if replica_context is not None:
            linked = replica_context.all_reduce(tf.distribute.ReduceOp.SUM, linked)
        return self.weight * cross_entropy / tf.maximum(linked, 1.0)
