"""The learning-rate schedule of eq. (3) and the paper's Adam settings (section 5.3)."""
from typing import NamedTuple

import keras
import tensorflow as tf
from keras import ops

from keras_transformer.config import TransformerConfig


@keras.saving.register_keras_serializable(package="keras_transformer")
class TransformerSchedule(keras.optimizers.schedules.LearningRateSchedule):
    """lrate = scale * d_model^-0.5 * min(step^-0.5, step * warmup_steps^-1.5).

    `step` counts from 1 (the optimizer's iteration 0 is the paper's step 1), so the rate rises
    linearly for `warmup_steps` steps, peaks at step `warmup_steps`, then decays as step^-0.5.
    """

    def __init__(self, d_model: int, warmup_steps: int = 4000, scale: float = 1.0):
        if warmup_steps <= 0:
            raise ValueError(f"warmup_steps: must be positive, got {warmup_steps}")
        self.d_model = d_model
        self.warmup_steps = warmup_steps
        self.scale = scale

    def __call__(self, iteration):
        step = ops.cast(iteration, "float32") + 1.0
        return (self.scale * self.d_model ** -0.5
                * ops.minimum(ops.rsqrt(step), step * self.warmup_steps ** -1.5))

    def get_config(self) -> dict:
        return {"d_model": self.d_model, "warmup_steps": self.warmup_steps, "scale": self.scale}


@keras.saving.register_keras_serializable(package="keras_transformer")
class FusedAdam(keras.optimizers.Adam):
    """`keras.optimizers.Adam` that updates each variable with TensorFlow's fused
    `ResourceApplyAdam` kernel.

    Keras's Adam runs about a dozen element-wise ops per variable (each a pass over it) and
    recomputes the step's bias corrections for every variable: some 8,000 ops per `base` step.
    Here the bias corrections are computed once per step and each variable takes one kernel
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
        index = self._get_variable_index(variable)
        scalar = lambda value: tf.cast(value, dtype)  # noqa: E731
        tf.raw_ops.ResourceApplyAdam(
            var=variable.handle, m=self._momentums[index].handle,
            v=self._velocities[index].handle,
            beta1_power=scalar(learning_rate.beta_1_power),
            beta2_power=scalar(learning_rate.beta_2_power), lr=scalar(learning_rate.rate),
            beta1=scalar(self.beta_1), beta2=scalar(self.beta_2), epsilon=scalar(self.epsilon),
            grad=tf.cast(tf.convert_to_tensor(gradient), dtype))


class _AdamScalars(NamedTuple):
    """The scalars every variable's update of one step shares."""
    rate: tf.Tensor
    beta_1_power: tf.Tensor
    beta_2_power: tf.Tensor


def make_optimizer(config: TransformerConfig) -> FusedAdam:
    """Adam(beta1=0.9, beta2=0.98, epsilon=1e-9) driven by `TransformerSchedule`."""
    schedule = TransformerSchedule(config.d_model, config.warmup_steps, config.learning_rate_scale)
    return FusedAdam(learning_rate=schedule, beta_1=0.9, beta_2=0.98, epsilon=1e-9)
