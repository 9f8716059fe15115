"""The Transformer's `fit`/`evaluate` steps: the loss gets the logits' factors explicitly, and
with fast kernels only real target tokens are projected and scored."""
from __future__ import annotations

import keras
import tensorflow as tf
from keras import ops

from keras_transformer import compat, kernels
from keras_transformer.logit_factors import LogitFactors
from keras_transformer.vocab_ids import PAD_ID


class FitSteps(compat.LocalBatchSymbolicBuild):
    """`train_step`, `test_step` and `compute_loss` of a `keras.Model` with a
    `logit_factors(inputs, training)` method (the `Transformer`).

    The steps are Keras's (forward, `compute_loss`, loss tracking and scaling, gradients,
    `apply_gradients`, `compute_metrics`) with the model's `LogitFactors` as `y_pred`:
    `compute_loss` hands them to a loss that has `call_on_factors` (`LabelSmoothedCrossEntropy`),
    and everything else (other losses, sample weights, `add_loss` terms, the metrics) gets the
    logits. Batches are `((source_ids, target_input_ids), target_output_ids)`.
    """

    def train_step(self, data):
        x, y, sample_weight = self._at_target_tokens(data)
        with tf.GradientTape() as tape:
            factors = self.logit_factors(x, training=True)
            loss = self.compute_loss(x=x, y=y, y_pred=factors, sample_weight=sample_weight,
                                     training=True)
            self._track_loss(loss, x)
            scaled_loss = self.optimizer.scale_loss(loss)
        gradients = tape.gradient(scaled_loss, self.trainable_weights)
        self.optimizer.apply_gradients(zip(gradients, self.trainable_weights))
        return self._reducible_logs(self.compute_metrics(x, y, factors.logits, sample_weight))

    def test_step(self, data):
        x, y, sample_weight = self._at_target_tokens(data)
        factors = self.logit_factors(x, training=False)
        loss = self.compute_loss(x=x, y=y, y_pred=factors, sample_weight=sample_weight,
                                 training=False)
        self._track_loss(loss, x)
        return self._reducible_logs(self.compute_metrics(x, y, factors.logits, sample_weight))

    def compute_loss(self, x=None, y=None, y_pred=None, sample_weight=None, training=True):
        """Keras's `compute_loss`; given `LogitFactors`, the compiled loss's `call_on_factors`
        when it has one and nothing else adds to the loss, else the loss of the logits."""
        if isinstance(y_pred, LogitFactors):
            if (sample_weight is None and not self.losses
                    and hasattr(self.loss, "call_on_factors")):
                return self.loss.call_on_factors(y, y_pred)
            y_pred = y_pred.logits
        return super().compute_loss(x=x, y=y, y_pred=y_pred, sample_weight=sample_weight,
                                    training=training)

    def _track_loss(self, loss, x) -> None:
        """Reports the step's loss as `fit`'s "loss", as Keras's own steps do: per replica,
        scaled back up by the replica count, weighted by the batch size."""
        replicas = tf.distribute.get_strategy().num_replicas_in_sync
        compat.loss_tracker(self).update_state(
            loss * ops.cast(replicas, loss.dtype), sample_weight=tf.shape(x[0])[0])

    def _at_target_tokens(self, data):
        """`((source, target_in), target_out)` -> `(x, y, sample_weight)`: `x` gains the N
        real target positions `[N, 2]` and `y` is the labels there, so that the output
        projection, the loss and the metrics work on `[N, vocab]`, not `[batch, len, vocab]`
        with its padding. Unchanged under XLA (static shapes) and with reference kernels (the
        plain padded computation, padding masked in the loss).
        """
        x, y, sample_weight = keras.utils.unpack_x_y_sample_weight(data)
        if compat.in_xla_context() or y is None or len(x) != 2:
            return x, y, sample_weight
        stray = ops.logical_and(ops.not_equal(y, PAD_ID), ops.equal(x[1], PAD_ID))
        tf.debugging.assert_equal(  # Meaningless logits (and none at all with packed tokens).
            tf.reduce_any(stray), False,
            message="labels: a real (non-padding) label sits where the target input is padding; "
                    "labels must be the target input shifted by one, padded alike")
        if not kernels.packs_tokens():
            return x, y, sample_weight
        positions = tf.where(ops.not_equal(y, PAD_ID))
        if sample_weight is not None:
            sample_weight = tf.gather_nd(sample_weight, positions)
        return (*x, positions), tf.gather_nd(y, positions), sample_weight

    def _reducible_logs(self, logs):
        """Gives scalar logs a leading axis under multi-worker training.

        Keras 3 reduces each step's logs across workers with `reduce("MEAN", axis=0)`, which
        rejects scalars; with shape `[1]` the reduction returns the scalar mean.
        """
        if not compat.in_multi_worker_mode(self.distribute_strategy):
            return logs
        return keras.tree.map_structure(lambda value: ops.reshape(value, (1,)), logs)
