"""Position-wise feed-forward network, eq. (2): FFN(x) = max(0, x W1 + b1) W2 + b2 (or another
activation than ReLU's max(0, .), for models trained elsewhere)."""
from typing import Optional

import keras

from keras_transformer.layers.dense import HeadsDense, lora_arguments


@keras.saving.register_keras_serializable(package="keras_transformer")
class PositionwiseFeedForward(keras.layers.Layer):
    """Two linear maps with a ReLU (or `activation`) between them, applied to each position
    alike."""

    def __init__(self, d_ff: int, activation: str = "relu", lora_rank: Optional[int] = None,
                 lora_alpha: Optional[float] = None, **kwargs):
        super().__init__(**kwargs)
        self.d_ff = d_ff
        self.activation = activation
        self.lora = lora_arguments(lora_rank, lora_alpha)  # the two maps' LoRA adapters

    def build(self, input_shape) -> None:
        self.inner = HeadsDense((self.d_ff,), activation=self.activation, **self.lora,
                                name="inner")
        self.outer = HeadsDense((input_shape[-1],), **self.lora, name="outer")
        self.inner.build(input_shape)
        self.outer.build(tuple(input_shape[:-1]) + (self.d_ff,))

    def call(self, inputs):
        return self.outer(self.inner(inputs))

    def get_config(self) -> dict:
        return {**super().get_config(), "d_ff": self.d_ff, "activation": self.activation,
                **self.lora}
