"""Layer normalization through the kernel interface."""
from __future__ import annotations

import keras

from keras_transformer import kernels


@keras.saving.register_keras_serializable(package="keras_transformer")
class LayerNormalization(keras.layers.LayerNormalization):
    """`keras.layers.LayerNormalization` (same arguments, weights and values) that runs
    `kernels.layer_norm` in its usual form: over the last axis, centered and scaled."""

    def call(self, inputs):
        if self.axis != [-1] or not (self.center and self.scale) or self.rms_scaling:
            return super().call(inputs)
        return kernels.layer_norm(inputs, self.gamma, self.beta, self.epsilon)
