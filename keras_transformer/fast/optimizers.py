"""The fast twin of the `adam` hook: Adam (Kingma & Ba) with one fused kernel per variable."""
from __future__ import annotations

import keras
import tensorflow as tf

from keras_transformer import compat


@keras.saving.register_keras_serializable(package="keras_transformer")
class FusedAdam(keras.optimizers.Adam):
    """`keras.optimizers.Adam` that updates each variable with TensorFlow's fused
    `ResourceApplyAdam` kernel.

    Keras's Adam runs about a dozen element-wise ops per variable, each a pass over it, and
    recomputes the step's bias corrections for every variable: some 10,000 ops per `base` step.
    Here the bias corrections are computed once per step (by the step's first `update_step`,
    the public method a custom Keras optimizer overrides, and kept until `apply` returns) and
    each variable takes one kernel that reads and writes it and its two moments once. Same
    update rule, slot variables and checkpoints as `keras.optimizers.Adam` (gradient clipping,
    weight decay, EMA and gradient accumulation still come from the base class); no AMSGrad.
    A sparse gradient (`IndexedSlices`, from an embedding lookup) is summed into its dense form
    first, as the Adam rule reads it (Keras's Adam squares the slices before adding up repeated
    rows).
    """

    def __init__(self, *args, **kwargs):
        if kwargs.get("amsgrad"):
            raise ValueError("FusedAdam: amsgrad=True is not supported; use "
                             "keras.optimizers.Adam")
        super().__init__(*args, **kwargs)
        self._beta_powers = None

    def apply(self, grads, trainable_variables=None):
        """Keras's `apply`; the step's `update_step` calls (Keras makes them from here only)
        share one `beta_1^t`, `beta_2^t`, made by the first and dropped at the end."""
        try:
            return super().apply(grads, trainable_variables)
        finally:
            self._beta_powers = None

    def update_step(self, gradient, variable, learning_rate):
        """`variable`'s Adam update, one `ResourceApplyAdam`."""
        if self._beta_powers is None:
            step = tf.cast(self.iterations + 1, "float32")
            self._beta_powers = (tf.pow(tf.cast(self.beta_1, "float32"), step),
                                 tf.pow(tf.cast(self.beta_2, "float32"), step))
        dtype = variable.dtype
        scalar = lambda value: tf.cast(value, dtype)  # noqa: E731
        momentum, velocity = compat.adam_moments(self, variable)
        tf.raw_ops.ResourceApplyAdam(
            var=variable.handle, m=momentum.handle, v=velocity.handle,
            beta1_power=scalar(self._beta_powers[0]), beta2_power=scalar(self._beta_powers[1]),
            lr=scalar(learning_rate), beta1=scalar(self.beta_1), beta2=scalar(self.beta_2),
            epsilon=scalar(self.epsilon), grad=tf.cast(tf.convert_to_tensor(gradient), dtype))
