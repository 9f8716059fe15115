"""The residual wrapper around every sub-layer: post-norm (the paper) or pre-norm."""
import keras
import tensorflow as tf

from keras_transformer.layers.dropout import Dropout
from keras_transformer.layers.layer_norm import LayerNormalization


@keras.saving.register_keras_serializable(package="keras_transformer")
class ResidualNorm(keras.layers.Layer):
    """Post-norm: `LayerNorm(x + Dropout(f(x)))` (section 5.4). Pre-norm: `x + Dropout(f(LayerNorm(x)))`.

    Use `normalize_input(x)` to get the sub-layer's input and `add(x, f_output)` for the output.
    """

    def __init__(self, norm: str = "post", dropout: float = 0.0, epsilon: float = 1e-6,
                 **kwargs):
        super().__init__(**kwargs)
        self.norm = norm
        self.dropout = dropout
        self.epsilon = epsilon
        self.layer_norm = LayerNormalization(epsilon=epsilon, name="layer_norm")
        self.dropout_layer = Dropout(dropout)

    def build(self, input_shape) -> None:
        self.layer_norm.build(input_shape)

    def normalize_input(self, x):
        return self.layer_norm(x) if self.norm == "pre" else x

    def call(self, x, sublayer_output, training=None):
        # x's shape is known before the sub-layer's output: its mask is drawn meanwhile.
        summed = x + self.dropout_layer(sublayer_output, training=training, shape=tf.shape(x))
        return self.layer_norm(summed) if self.norm == "post" else summed

    def get_config(self) -> dict:
        return {**super().get_config(), "norm": self.norm, "dropout": self.dropout,
                "epsilon": self.epsilon}
