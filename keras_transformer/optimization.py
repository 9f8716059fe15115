"""The learning-rate schedule of eq. (3), the paper's Adam settings (section 5.3), and dynamic
loss scaling for float16 that decides for all replicas at once."""
from __future__ import annotations

import keras
import tensorflow as tf
from keras import ops

from keras_transformer.config import TrainingSettings
from keras_transformer.hooks import replaceable


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


@replaceable
def adam(**adam_arguments) -> keras.optimizers.Adam:
    """`keras.optimizers.Adam(**adam_arguments)` (a hook: a replacement keeps its
    arguments, slots and checkpoints)."""
    return keras.optimizers.Adam(**adam_arguments)


def make_optimizer(d_model: int, training: TrainingSettings = TrainingSettings()
                   ) -> keras.optimizers.Adam:
    """Adam(beta1=0.9, beta2=0.98, epsilon=1e-9) driven by `TransformerSchedule` for a model of
    width `d_model` (through the `adam` hook)."""
    schedule = TransformerSchedule(d_model, training.warmup_steps, training.learning_rate_scale)
    return adam(learning_rate=schedule, beta_1=0.9, beta_2=0.98, epsilon=1e-9)


@keras.saving.register_keras_serializable(package="keras_transformer")
class LossScaleOptimizer(keras.optimizers.LossScaleOptimizer):
    """`keras.optimizers.LossScaleOptimizer` (dynamic loss scaling for `mixed_float16`) whose
    overflow check covers the gradients of every replica and worker of a `tf.distribute`
    strategy.

    Keras's checks the gradients one replica computed before they are all-reduced, and decides
    for all from the first replica's: an overflow on any other replica is summed into every
    weight (inf/NaN) while the scale stays. Here each replica's "any gradient not finite" is
    summed across the cluster, so every replica and worker takes the same branch (skip the
    step and halve the scale, or apply): none waits on a collective the others skip, and no
    inf or NaN reaches a weight or an Adam moment. A skipped step does not advance
    `iterations` (as in Keras).
    """

    def check_finite(self, grads) -> tf.Tensor:
        finite = super().check_finite(grads)
        replica = tf.distribute.get_replica_context()
        if replica is None or replica.num_replicas_in_sync == 1:
            return finite
        overflows = replica.all_reduce(tf.distribute.ReduceOp.SUM,
                                       tf.cast(tf.logical_not(finite), tf.float32))
        return tf.equal(overflows, 0.0)


def with_loss_scaling(optimizer: keras.optimizers.Optimizer,
                      dtype_policy: keras.DTypePolicy) -> keras.optimizers.Optimizer:
    """`optimizer` wrapped in `LossScaleOptimizer` under a float16 policy (where Keras's
    `compile` would wrap it in its own), else as it is."""
    if (dtype_policy.compute_dtype != "float16"
            or isinstance(optimizer, keras.optimizers.LossScaleOptimizer)):
        return optimizer
    return LossScaleOptimizer(optimizer)
