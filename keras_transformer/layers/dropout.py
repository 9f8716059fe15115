"""Dropout through the kernel interface."""
from __future__ import annotations

import keras
import tensorflow as tf

from keras_transformer import kernels


@keras.saving.register_keras_serializable(package="keras_transformer")
class Dropout(keras.layers.Dropout):
    """`keras.layers.Dropout` (same arguments, seeding and inference behaviour) whose training
    masks come from `kernels.dropout` (with fast kernels: 16-bit masks, the rate rounded to a
    multiple of 2^-16 with the expectation kept exact).

    `call(..., shape=)` takes the inputs' shape from a tensor available before the inputs are
    (e.g. the residual input beside a sub-layer's output), so that a kernel can draw the mask
    while the sub-layer still runs. With `noise_shape` the Keras implementation runs.
    """

    def call(self, inputs, training=False, shape=None):
        if not training or self.rate == 0 or self.noise_shape is not None:
            return super().call(inputs, training=training)
        return kernels.dropout(inputs, self.rate, self.seed_generator,
                               shape=tf.shape(inputs) if shape is None else shape)
