"""`FastTransformer`: the core `Transformer` with `fit`/`evaluate` steps that run the fast
training path when the fast implementation is active, and the core model's plain forward pass
otherwise."""
from __future__ import annotations

from typing import Optional

import keras
import tensorflow as tf
from keras import ops

from keras_transformer import compat
from keras_transformer.fast import packed, selection
from keras_transformer.fast.loss import LogitFactors, smoothed_cross_entropy_through_factors
from keras_transformer.losses import GuidedAlignment, LabelSmoothedCrossEntropy
from keras_transformer.model import Transformer
from keras_transformer.config import PAD_ID


@keras.saving.register_keras_serializable(package="keras_transformer")
class FastTransformer(compat.LocalBatchSymbolicBuild, Transformer):
    """The `Transformer` (same layers, weights, config and inference) with faster training steps.

    With the fast implementation active, a step runs the layers on the real target tokens only
    (`Transformer.call` with `packed.call_arguments`; padded under XLA) and hands
    `LabelSmoothedCrossEntropy` the logits' factors, through which its gradient is written out;
    other losses, sample weights, `add_loss` terms and the metrics get the logits. With the
    reference implementation, the same step takes the core model's logits, whose loss is
    Keras's `compute_loss`. Either way the logged loss is the global batch's per-token loss
    (`_loss`) and multi-worker `fit` works (`compat`).
    Batches are `((source_ids, target_input_ids), target_output_ids)`; with `guided_alignment`
    set, `((source_ids, target_input_ids), target_output_ids, alignment_targets)`
    (`batch_plan.alignment_targets`), and the step adds its loss ("alignment_loss" in the logs).
    """

    guided_alignment: Optional[GuidedAlignment] = None

    def train_step(self, data):
        data, alignment_targets = self._alignment_targets(data)
        fast_path = selection.active() == selection.FAST
        x, y, sample_weight, positions = (self._at_target_tokens(data) if fast_path
                                          else (*keras.utils.unpack_x_y_sample_weight(data),
                                                None))
        guided = self.guided_alignment
        with tf.GradientTape() as tape:
            result = self(x, training=True, return_attention=guided is not None,
                          **(packed.call_arguments(self, x, positions) if fast_path else {}))
            if guided is not None:
                result, _, cross_probabilities = result
            factors, logits = (result, result.logits) if fast_path else (None, result)
            loss = self._loss(x, y, logits, factors, sample_weight, training=True)
            if guided is not None:
                alignment_loss = guided(cross_probabilities[guided.layer], alignment_targets)
                loss += alignment_loss
            scaled_loss = self.optimizer.scale_loss(loss)
        gradients = tape.gradient(scaled_loss, self.trainable_weights)
        self.optimizer.apply_gradients(zip(gradients, self.trainable_weights))
        logs = self.compute_metrics(x, y, logits, sample_weight)
        if guided is not None:
            replicas = tf.distribute.get_strategy().num_replicas_in_sync
            logs = {**logs, "alignment_loss": alignment_loss * replicas}
        return self._reducible_logs(logs)

    def _alignment_targets(self, data):
        """`data` without its alignment targets, and them (None without guided alignment); a
        ValueError when guided alignment has no targets to train toward."""
        if self.guided_alignment is None:
            return data, None
        if not (isinstance(data, tuple) and len(data) == 3):
            raise ValueError("guided alignment: batches must be ((source, target_in), "
                             "target_out, alignment_targets): prepare the data with word "
                             "alignments")
        return data[:2], data[2]

    def test_step(self, data):
        if selection.active() != selection.FAST:
            x, y, sample_weight = keras.utils.unpack_x_y_sample_weight(data)
            logits = self(x, training=False)
            self._loss(x, y, logits, None, sample_weight, training=False)
            return self._reducible_logs(self.compute_metrics(x, y, logits, sample_weight))
        x, y, sample_weight, positions = self._at_target_tokens(data)
        factors = self(x, training=False, **packed.call_arguments(self, x, positions))
        self._loss(x, y, factors.logits, factors, sample_weight, training=False)
        return self._reducible_logs(self.compute_metrics(x, y, factors.logits, sample_weight))

    def _loss(self, x, y, logits, factors: LogitFactors | None, sample_weight, training: bool):
        """The step's loss: through the logits' `factors` (the fast path) for
        `LabelSmoothedCrossEntropy` alone (and logits without an output bias, a term the
        factors do not carry), else Keras's `compute_loss` of the logits.

        `fit`'s "loss" is the global batch's: every replica's loss (its share of the global
        mean) counts alike, scaled up by the replica count, so that the logged figure is the
        per-token loss of a one-device run on the same batches. (Keras's own steps weight each
        replica by its rows, which differ between replicas of a token-budget batch.)
        """
        if (factors is not None and self.output_bias is None
                and isinstance(self.loss, LabelSmoothedCrossEntropy)
                and sample_weight is None and not self.losses):
            labels = ops.cast(y, "int32")
            loss = ops.sum(self.loss.normalized(labels, smoothed_cross_entropy_through_factors(
                labels, factors, self.loss.label_smoothing)))
        else:
            loss = self.compute_loss(x=x, y=y, y_pred=logits, sample_weight=sample_weight,
                                     training=training)
        replicas = tf.distribute.get_strategy().num_replicas_in_sync
        compat.loss_tracker(self).update_state(loss * ops.cast(replicas, loss.dtype))
        return loss

    def _at_target_tokens(self, data):
        """`((source, target_in), target_out)` -> `(x, y, sample_weight, positions)`: the N
        real target positions `[N, 2]` and `y` and `sample_weight` there, so that the output
        projection, the loss and the metrics work on `[N, vocab]`, not `[batch, len, vocab]`
        with its padding. Under XLA (static shapes) `positions` is None and the rest as given.
        """
        x, y, sample_weight = keras.utils.unpack_x_y_sample_weight(data)
        if compat.in_xla_context():
            return x, y, sample_weight, None
        stray = ops.logical_and(ops.not_equal(y, PAD_ID), ops.equal(x[1], PAD_ID))
        check = tf.debugging.assert_equal(  # Meaningless logits (none with packed tokens).
            tf.reduce_any(stray), False,
            message="labels: a real (non-padding) label sits where the target input is padding; "
                    "labels must be the target input shifted by one, padded alike")
        with tf.control_dependencies([check]):  # before the gathers it would make fail first
            positions = tf.where(ops.not_equal(y, PAD_ID))
        if sample_weight is not None:
            sample_weight = tf.gather_nd(sample_weight, positions)
        return x, tf.gather_nd(y, positions), sample_weight, positions

    def _reducible_logs(self, logs):
        """Gives scalar logs a leading axis under multi-worker training.

        Keras 3 reduces each step's logs across workers with `reduce("MEAN", axis=0)`, which
        rejects scalars; with shape `[1]` the reduction returns the scalar mean.
        """
        if not compat.in_multi_worker_mode(self.distribute_strategy):
            return logs
        return keras.tree.map_structure(lambda value: ops.reshape(value, (1,)), logs)
