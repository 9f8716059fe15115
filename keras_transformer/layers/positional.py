"""Positional encodings: the sinusoids of section 3.5 and learned embeddings (Table 3, row E).

Both return the encoding of positions `start_index ... start_index + length - 1` with shape
`[length, d_model]`, for the caller to add to the scaled token embeddings; or, given
`positions` (the position of each row of packed `[N, d_model]` tokens), `[N, d_model]`.
"""
import math

import keras
from keras import ops


@keras.saving.register_keras_serializable(package="keras_transformer")
class SinusoidalPositionalEncoding(keras.layers.Layer):
    """PE(pos, 2i) = sin(pos / 10000^(2i/d)), PE(pos, 2i+1) = cos(pos / 10000^(2i/d))."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.supports_masking = True

    def compute_mask(self, inputs, mask=None):
        return None  # The encoding is per position, not per token: it carries no mask.

    def call(self, inputs, start_index=0, positions=None):
        d_model = inputs.shape[-1]
        if positions is None:
            return self._encoding(ops.arange(ops.shape(inputs)[1]) + start_index, d_model)
        # Packed tokens repeat few positions: encode each once, then look the rows up.
        return ops.take(self._encoding(ops.arange(ops.max(positions) + 1), d_model),
                        positions, axis=0)

    def _encoding(self, positions, d_model: int):
        """`[len(positions), d_model]`."""
        angles = ops.cast(positions, "float32")[:, None] * ops.exp(
            ops.arange(0, d_model, 2, dtype="float32") * (-math.log(10000.0) / d_model))[None, :]
        # Interleave so that even dimensions hold sines and odd ones cosines, as in eq. (3.5).
        encoding = ops.reshape(ops.stack([ops.sin(angles), ops.cos(angles)], axis=-1),
                               (ops.shape(positions)[0], -1))[:, :d_model]
        return ops.cast(encoding, self.compute_dtype)


@keras.saving.register_keras_serializable(package="keras_transformer")
class LearnedPositionalEmbedding(keras.layers.Layer):
    """A trained `[max_length, d_model]` table of position vectors."""

    def __init__(self, max_length: int, **kwargs):
        super().__init__(**kwargs)
        self.max_length = max_length
        self.supports_masking = True

    def compute_mask(self, inputs, mask=None):
        return None  # The encoding is per position, not per token: it carries no mask.

    def build(self, input_shape) -> None:
        self.table = self.add_weight(name="table", shape=(self.max_length, input_shape[-1]),
                                     initializer=keras.initializers.RandomNormal(stddev=0.02))

    def call(self, inputs, start_index=0, positions=None):
        if positions is None:
            positions = ops.arange(ops.shape(inputs)[1]) + start_index
        return ops.cast(ops.take(self.table, positions, axis=0), self.compute_dtype)

    def get_config(self) -> dict:
        return {**super().get_config(), "max_length": self.max_length}
