"""The learning-rate schedule of eq. (3) and the paper's Adam settings (section 5.3)."""
import keras
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
    """`keras.optimizers.Adam(**adam_arguments)` (a kernel hook: a replacement keeps its
    arguments, slots and checkpoints)."""
    return keras.optimizers.Adam(**adam_arguments)


def make_optimizer(d_model: int, training: TrainingSettings = TrainingSettings()
                   ) -> keras.optimizers.Adam:
    """Adam(beta1=0.9, beta2=0.98, epsilon=1e-9) driven by `TransformerSchedule` for a model of
    width `d_model` (through the `adam` hook)."""
    schedule = TransformerSchedule(d_model, training.warmup_steps, training.learning_rate_scale)
    return adam(learning_rate=schedule, beta_1=0.9, beta_2=0.98, epsilon=1e-9)
