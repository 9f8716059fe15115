"""The fast twin of the `adam` hook: Adam (Kingma & Ba) with one fused kernel per variable."""
from __future__ import annotations

from typing import NamedTuple

import keras
import tensorflow as tf
from keras import ops

from keras_transformer import compat


def adam(**adam_arguments) -> keras.optimizers.Adam:
    """`FusedAdam(**adam_arguments)`, or Keras's Adam where the installed Keras lacks the
    private per-step hook it overrides."""
    if not compat.has_private_attribute(keras.optimizers.Adam, "_backend_update_step"):
        return keras.optimizers.Adam(**adam_arguments)
    return FusedAdam(**adam_arguments)


@keras.saving.register_keras_serializable(package="keras_transformer")
class FusedAdam(keras.optimizers.Adam):
    """`keras.optimizers.Adam` that updates each variable with TensorFlow's fused
    `ResourceApplyAdam` kernel.

    Keras's Adam runs about a dozen element-wise ops per variable (each a pass over it) and
    recomputes the step's bias corrections for every variable: some 8,000 ops per `base` step.
    Here the bias corrections are computed once per step (in Keras's private
    `_backend_update_step`, checked on `compat.CHECKED_ON`) and each variable takes one kernel
    that reads and writes it and its two moments once. Same update rule, slot variables and
    checkpoints as `keras.optimizers.Adam` (gradient clipping, weight decay, EMA and gradient
    accumulation still come from the base class); no AMSGrad. A sparse gradient
    (`IndexedSlices`, from an embedding lookup) is summed into its dense form first, as the
    Adam rule reads it (Keras's Adam squares the slices before adding up repeated rows).
    """

    def __init__(self, *args, **kwargs):
        if kwargs.get("amsgrad"):
            raise ValueError("FusedAdam: amsgrad=True is not supported; use "
                             "keras.optimizers.Adam")
        super().__init__(*args, **kwargs)

    def _backend_update_step(self, grads, trainable_variables, learning_rate):
        step = ops.cast(self.iterations + 1, "float32")
        scalars = _AdamScalars(ops.cast(learning_rate, "float32"),
                               ops.power(ops.cast(self.beta_1, "float32"), step),
                               ops.power(ops.cast(self.beta_2, "float32"), step))
        super()._backend_update_step(grads, trainable_variables, scalars)

    def update_step(self, gradient, variable, learning_rate):
        """`learning_rate`: the step's `_AdamScalars` (from `_backend_update_step`)."""
        dtype = variable.dtype
        momentum, velocity = compat.adam_moments(self, variable)
        scalar = lambda value: tf.cast(value, dtype)  # noqa: E731
        tf.raw_ops.ResourceApplyAdam(
            var=variable.handle, m=momentum.handle, v=velocity.handle,
            beta1_power=scalar(learning_rate.beta_1_power),
            beta2_power=scalar(learning_rate.beta_2_power), lr=scalar(learning_rate.rate),
            beta1=scalar(self.beta_1), beta2=scalar(self.beta_2), epsilon=scalar(self.epsilon),
            grad=tf.cast(tf.convert_to_tensor(gradient), dtype))


class _AdamScalars(NamedTuple):
    """The scalars every variable's update of one step shares."""
    rate: tf.Tensor
    beta_1_power: tf.Tensor
    beta_2_power: tf.Tensor
