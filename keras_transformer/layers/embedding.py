"""Token embeddings scaled by sqrt(d_model), whose transpose is the pre-softmax projection
(section 3.4), and the positional encodings added to them: the sinusoids of section 3.5 and
learned embeddings (Table 3, row E)."""
import math

import keras
from keras import ops

from keras_transformer.compat import save_in_row_blocks
from keras_transformer.config import ROW_BLOCK_BYTES


@keras.saving.register_keras_serializable(package="keras_transformer")
class ScaledEmbedding(keras.layers.Layer):
    """`ids -> E[ids] * sqrt(d_model)` (section 3.4; `E[ids]` alone when not `scaled`); tied,
    `E^T` is also the pre-softmax projection (`Transformer.pre_softmax_projection`)."""

    def __init__(self, vocab_size: int, d_model: int, scaled: bool = True, **kwargs):
        super().__init__(**kwargs)
        self.vocab_size = vocab_size
        self.d_model = d_model
        self.scaled = scaled

    def build(self, input_shape=None) -> None:
        self.embeddings = self.add_weight(
            name="embeddings", shape=(self.vocab_size, self.d_model),
            initializer=keras.initializers.RandomNormal(stddev=self.d_model ** -0.5))

    def call(self, ids):
        vectors = ops.cast(ops.take(self.embeddings, ops.cast(ids, "int32"), axis=0),
                           self.compute_dtype)
        if not self.scaled:
            return vectors
        return vectors * ops.cast(self.d_model ** 0.5, self.compute_dtype)

    def save_own_variables(self, store) -> None:
        """As Keras's, the table written a block of rows at a time (`ROW_BLOCK_BYTES`) to a
        weights file: saving a 256k-piece table costs a block, not a copy of it."""
        save_in_row_blocks(store, self.trainable_variables + self.non_trainable_variables,
                           ROW_BLOCK_BYTES)

    def get_config(self) -> dict:
        return {**super().get_config(), "vocab_size": self.vocab_size, "d_model": self.d_model,
                "scaled": self.scaled}


class _PositionalEncoding(keras.layers.Layer):
    """`call(x, start_index)`: the encoding `[length, d_model]` of positions `start_index ...
    start_index + length - 1` of `x` `[batch, length, d_model]`, for the caller to add to the
    scaled token embeddings; `at(positions)`: the encoding of any int positions, `[..., d_model]`.
    Position p is encoded as the `offset + p`-th (fairseq's models count a sequence's first
    token as position 2, `padding_idx + 1`; the paper's as 0).
    """

    def __init__(self, offset: int = 0, **kwargs):
        super().__init__(**kwargs)
        self.offset = offset

    def call(self, inputs, start_index=0):
        return self.at(ops.arange(ops.shape(inputs)[1]) + start_index)

    def get_config(self) -> dict:
        return {**super().get_config(), "offset": self.offset}


@keras.saving.register_keras_serializable(package="keras_transformer")
class SinusoidalPositionalEncoding(_PositionalEncoding):
    """PE(pos, 2i) = sin(pos / 10000^(2i/d)), PE(pos, 2i+1) = cos(pos / 10000^(2i/d)).

    `layout="halves"` puts the same sines in the first d/2 dimensions and the cosines in the
    last d/2 (as tensor2tensor and Marian write them) instead of interleaving them;
    `layout="fairseq"` puts them so too, at the frequencies 10000^(-i/(d/2 - 1)), i < d/2
    (fairseq's `SinusoidalPositionalEmbedding`, which M2M-100 and NLLB use).
    """

    def __init__(self, layout: str = "interleaved", **kwargs):
        super().__init__(**kwargs)
        self.layout = layout

    def build(self, input_shape) -> None:
        self.d_model = input_shape[-1]

    def at(self, positions):
        """Each distinct position is encoded once (packed tokens repeat few), then looked up."""
        table = self._encoding(ops.arange(ops.max(positions) + 1))
        return ops.take(table, positions, axis=0)

    def call(self, inputs, start_index=0):
        return self._encoding(ops.arange(ops.shape(inputs)[1]) + start_index)

    def _encoding(self, positions):
        """`[len(positions), d_model]`."""
        d_model = self.d_model
        # log 10000 / (d/2 - 1) per dimension pair in fairseq's layout, 2 log 10000 / d in the
        # paper's
        step = (math.log(10000.0) / (d_model // 2 - 1) if self.layout == "fairseq"
                else 2 * math.log(10000.0) / d_model)
        angles = ops.cast(positions + self.offset, "float32")[:, None] * ops.exp(
            ops.arange(0, (d_model + 1) // 2, dtype="float32") * -step)[None, :]
        if self.layout in ("halves", "fairseq"):
            encoding = ops.concatenate([ops.sin(angles), ops.cos(angles)], axis=-1)
        else:  # even dimensions hold sines and odd ones cosines, as in section 3.5
            encoding = ops.reshape(ops.stack([ops.sin(angles), ops.cos(angles)], axis=-1),
                                   (ops.shape(positions)[0], -1))
        return ops.cast(encoding[:, :d_model], self.compute_dtype)

    def get_config(self) -> dict:
        return {**super().get_config(), "layout": self.layout}


@keras.saving.register_keras_serializable(package="keras_transformer")
class LearnedPositionalEmbedding(_PositionalEncoding):
    """A trained `[offset + max_length, d_model]` table of position vectors."""

    def __init__(self, max_length: int, **kwargs):
        super().__init__(**kwargs)
        self.max_length = max_length

    def build(self, input_shape) -> None:
        self.table = self.add_weight(name="table",
                                     shape=(self.offset + self.max_length, input_shape[-1]),
                                     initializer=keras.initializers.RandomNormal(stddev=0.02))

    def at(self, positions):
        return ops.cast(ops.take(self.table, positions + self.offset, axis=0),
                        self.compute_dtype)

    def get_config(self) -> dict:
        return {**super().get_config(), "max_length": self.max_length}
