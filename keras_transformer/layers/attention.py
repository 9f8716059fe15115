"""Multi-head scaled dot-product attention (section 3.2, eq. (1)) with a key/value cache for
incremental decoding.

The cache of a decoding step is position-major, `[cache_length, rows, heads, dim]`: a step writes
the keys and values of its position for every row in place, as one block, and no search ever
reorders it. A row reads its history through its `ancestors` (`history_slots`): the cache row
that holds each of its positions, shared with the hypotheses it extends.
"""
from __future__ import annotations

from typing import Callable, NamedTuple, Optional

import keras
import tensorflow as tf
from keras import ops

from keras_transformer import compat
from keras_transformer.config import renamed
from keras_transformer.layers.dense import HeadsDense, lora_arguments
from keras_transformer.layers.layout import PADDED, Layout
from keras_transformer.layers.residual import HookDropout

# Added to the scores of masked keys. Finite (not -inf) so that a fully masked row yields finite
# probabilities instead of NaN; the masked ones underflow to exactly 0 in float32 and bfloat16.
MASK_PENALTY = -1e9


def attention_penalty(attention_mask, dtype) -> tf.Tensor:
    """The scores' additive mask: 0 where boolean `attention_mask` `[batch, query_len, key_len]`
    is True, `MASK_PENALTY` elsewhere, `[batch, 1, query_len, key_len]` (one for all heads) in
    `dtype`."""
    penalty = ops.where(ops.cast(attention_mask, "bool"), 0.0, MASK_PENALTY)
    return ops.expand_dims(ops.cast(penalty, dtype), axis=1)


def scaled_dot_product_attention(query, keys, values, attention_mask=None,
                                 dropout: Optional[Callable] = None):
    """Eq. (1), for all heads at once: `Attention(Q, K, V) = softmax(Q K^T / sqrt(d_k)) V` of
    `query` `[batch, heads, query_len, d_k]`, `keys` `[batch, heads, key_len, d_k]` and `values`
    `[batch, heads, key_len, d_v]`: the context `[batch, heads, query_len, d_v]` and the
    probabilities `[batch, heads, query_len, key_len]` (the softmax runs in float32).

    `attention_mask`, boolean, broadcastable to `[batch, query_len, key_len]`, is True where a query
    may attend; the others get `MASK_PENALTY` added to their scores. `dropout` is applied to the
    attention probabilities (training).

    The queries are scaled rather than the scores (the same products, on fewer numbers). Heads
    first, the products are plain batched matmuls, faster on CPU than
    `keras.ops.dot_product_attention`'s einsums over `[batch, len, heads, dim]`
    (`benchmarks/attention_speed.py`; figures in benchmarks/RESULTS.md).
    """
    scale = ops.cast(query.shape[-1] ** -0.5, query.dtype)
    scores = tf.linalg.matmul(query * scale, keys, transpose_b=True)
    if attention_mask is not None:
        scores = scores + attention_penalty(attention_mask, scores.dtype)
    # tf.nn.softmax: Keras' warns at every call over one key (the first decoding position).
    probabilities = tf.nn.softmax(ops.cast(scores, "float32"), axis=-1)
    dropped = probabilities if dropout is None else dropout(probabilities)
    return tf.linalg.matmul(ops.cast(dropped, values.dtype), values), probabilities


def history_slots(ancestors: tf.Tensor, length, heads: int) -> tf.Tensor:
    """Where each row's keys (or values) lie in a position-major cache (`init_cache`) viewed as
    `[cache_length * rows * heads, dim]`: `[rows, heads, length]` indices of positions
    `0 .. length - 1` (`length` a scalar, `heads` the attention heads), position `j` of row `r`
    in cache row `ancestors[r, j]` (`ancestors`: `[rows, cache_length]` int32, the cache row
    holding each position of a row). The indices are the same for every layer's keys and values."""
    rows = tf.shape(ancestors)[0]
    positions = tf.range(length)
    # (expand_dims, not a new axis in the slice: LiteRT's strided slice has none, and a
    # batch of any size leaves the slice to run there)
    return ((positions[None, None, :] * rows + tf.expand_dims(ancestors[:, :length], 1)) * heads
            + tf.range(heads)[None, :, None])


def write_position(buffer: tf.Tensor, update: tf.Tensor, position, in_place: bool
                   ) -> tf.Tensor:
    """The position-major `buffer` `[cache_length, rows, heads, dim]` with `update`
    `[rows, heads * dim]` written at `position` of every row: `in_place` with `InplaceUpdate`
    (graphs; the search holds the buffer alone), else as a dynamic update slice
    (`compat.write_first_axis_block`: what XLA compiles and runs in place, and the LiteRT
    converter's builtin)."""
    block = tf.reshape(tf.cast(update, buffer.dtype), tf.concat([[1], tf.shape(buffer)[1:]], 0))
    position = tf.cast(position, tf.int32)
    if in_place:
        return tf.raw_ops.InplaceUpdate(x=buffer, i=tf.reshape(position, [1]), v=block)
    return compat.write_first_axis_block(buffer, block, position)


def read_history(buffer: tf.Tensor, slots: tf.Tensor) -> tf.Tensor:
    """`[rows, heads, length, dim]`: the keys (or values) of `buffer` at `slots`
    (`history_slots`), heads first as `scaled_dot_product_attention` takes them."""
    return tf.gather(tf.reshape(buffer, [-1, tf.shape(buffer)[3]]), slots)


class KeyValues(NamedTuple):
    """An attention's keys and values, in one of two layouts: heads first, `[batch, heads,
    len, dim]`, as `MultiHeadAttention.project_key_value` projects a sentence once (the encoder
    output, for every decoding step); or position-major, `[cache_length, rows, heads, dim]`, as
    a self-attention cache (`MultiHeadAttention.init_cache`) written one position a step."""

    key: tf.Tensor
    value: tf.Tensor


class CacheIndex(NamedTuple):
    """Where a decoding step writes every layer's self-attention cache and what each row reads
    of it (`cache_index`).

    position: scalar int32, the position the step writes.
    slots: `[rows, heads, length]` (`history_slots`), where each row's positions
        `0 .. length - 1` lie in the cache.
    written: None when `length` is `position + 1` (the cache then written in place); with
        static shapes (what XLA compiles: every position read) `[1, 1, cache_length]`, True up
        to `position`, the later positions masked.
    """

    position: tf.Tensor
    slots: tf.Tensor
    written: Optional[tf.Tensor]


def cache_index(ancestors: tf.Tensor, position, heads: int, static_shapes: bool) -> CacheIndex:
    """The `CacheIndex` of a step at `position`, each row's history in `ancestors` `[rows,
    cache_length]` (the cache row holding each of its positions, `position` included);
    `static_shapes`: every position read and the unwritten ones masked (XLA's fixed sizes)."""
    position = tf.convert_to_tensor(position, tf.int32)
    if not static_shapes:
        return CacheIndex(position, history_slots(ancestors, position + 1, heads), None)
    cache_length = tf.shape(ancestors)[1]
    return CacheIndex(position, history_slots(ancestors, cache_length, heads),
                      (tf.range(cache_length) <= position)[None, None])


@keras.saving.register_keras_serializable(package="keras_transformer")
class MultiHeadAttention(keras.layers.Layer):
    """MultiHead(Q, K, V) = Concat(head_1, ..., head_h) W^O with head_i = Attention(Q W_i^Q,
    K W_i^K, V W_i^V) (section 3.2.2; `Attention` is `scaled_dot_product_attention`).

    `key_dim` (d_k) and `value_dim` (d_v) are independent of the model width (Table 3 rows A,
    B). Inputs are `[batch, length, d_model]`. One `call` serves training, attention maps and
    incremental decoding: given a `cache` it attends to keys and values projected before (an
    encoder output's, `project_key_value`) or, with a `cache_index`, writes each query's own
    into a self-attention cache (`init_cache`) and attends to its history there.
    """

    def __init__(self, num_heads: int, key_dim: int, value_dim: Optional[int] = None,
                 dropout: float = 0.0, attention_bias: bool = True, lora_rank: Optional[int] = None,
                 lora_alpha: Optional[float] = None, **kwargs):
        super().__init__(**kwargs)
        self.num_heads = num_heads
        self.key_dim = key_dim
        self.value_dim = value_dim or key_dim
        self.dropout = dropout
        self.attention_bias = attention_bias
        self.lora = lora_arguments(lora_rank, lora_alpha)  # the projections' LoRA adapters
        self.dropout_layer = HookDropout(dropout)

    def build(self, query_shape, key_value_shape=None) -> None:
        d_model = query_shape[-1]
        source_dim = (key_value_shape or query_shape)[-1]
        heads = self.num_heads
        self.query_dense = HeadsDense((heads, self.key_dim), use_bias=self.attention_bias,
                                      **self.lora, name="query")
        self.key_dense = HeadsDense((heads, self.key_dim), use_bias=self.attention_bias,
                                    **self.lora, name="key")
        self.value_dense = HeadsDense((heads, self.value_dim), use_bias=self.attention_bias,
                                      **self.lora, name="value")
        self.output_dense = HeadsDense((d_model,), input_rank=2, use_bias=self.attention_bias,
                                       **self.lora, name="output")
        self.query_dense.build(query_shape)
        self.key_dense.build((None, None, source_dim))
        self.value_dense.build((None, None, source_dim))
        self.output_dense.build((None, None, heads, self.value_dim))

    def call(self, query, key_value=None, attention_mask=None, cache: Optional[KeyValues] = None,
             cache_index: Optional[CacheIndex] = None, training=None,
             return_attention: bool = False,
             layouts: tuple[Layout, Layout] = (PADDED, PADDED)):
        """Attends `query` `[batch, query_len, d_model]` to `key_value` `[batch, key_len, d_model]`
        (self-attention when None), or to `cache`: the output `[batch, query_len, d_model]`, then
        the cache with this position written when a `cache_index` is given, or else the attention
        probabilities `[batch, heads, q_len, k_len]` when `return_attention` asks for them.

        `attention_mask` is boolean, broadcastable to `[batch, query_len, key_len]`. `cache` holds
        keys and values projected before: without `cache_index`, a sentence's (heads first,
        `project_key_value`), attended to instead of `key_value`'s; with it, a self-attention cache
        (position-major, `init_cache`). `cache_index` is a decoding step's (`cache_index`): each
        query (`batch * query_len` rows, one per hypothesis, each sentence's in turn) writes its
        keys and values at `cache_index.position` and attends to its history there; `attention_mask`
        is then unused. `training` turns on the probabilities' dropout. `layouts` are the
        token layouts (`layout.py`) of `query` and of `key_value` (`query`'s own too when None).
        """
        query_layout, key_layout = layouts
        query_heads = self.query_dense(query)
        if cache_index is not None:
            cache = self._write(query, cache, cache_index)
            keys, values = (read_history(buffer, cache_index.slots) for buffer in cache)
            query_heads = tf.reshape(query_heads, [-1, self.num_heads, 1, self.key_dim])
            attention_mask = cache_index.written
        else:
            keys, values = cache if cache is not None else self.project_key_value(
                query if key_value is None else key_value,
                query_layout if key_value is None else key_layout)
            query_heads = query_layout.expand_heads(query_heads)
        attended, probabilities = scaled_dot_product_attention(
            query_heads, keys, values, attention_mask,
            dropout=lambda probabilities: self.dropout_layer(probabilities, training=training))
        attended = query_layout.pack_heads(attended)
        if cache_index is not None:  # a row per query -> `[batch, query_len, heads, d_v]`
            attended = tf.reshape(attended, tf.concat([tf.shape(query)[:2], tf.shape(
                attended)[2:]], 0))
        output = self.output_dense(attended)
        if cache_index is not None:
            return output, cache
        return (output, probabilities) if return_attention else output

    def project_key_value(self, key_value, layout: Layout = PADDED) -> KeyValues:
        """Keys and values `[batch, heads, len, dim]` of `key_value` (e.g. the encoder output,
        projected once per sentence for decoding), `[batch, len, d_model]` or as its `layout`
        holds its tokens."""
        return KeyValues(layout.expand_heads(self.key_dense(key_value)),
                         layout.expand_heads(self.value_dense(key_value)))

    def init_cache(self, rows, cache_length, dtype, static_shapes: bool = False) -> KeyValues:
        """An empty self-attention cache: keys and values `[cache_length, rows, heads, dim]`,
        position-major. Zeros from `Empty` (stateful: never folded into a graph constant that
        in-place writes would then change across runs), or, with `static_shapes` (what XLA
        compiles, where `Empty` does not exist), `zeros`."""
        def buffer(dim):
            shape = tf.stack([cache_length, rows, self.num_heads, dim])
            if static_shapes:
                return tf.zeros(shape, dtype)
            return tf.raw_ops.Empty(shape=shape, dtype=dtype, init=True)

        return KeyValues(buffer(self.key_dim), buffer(self.value_dim))

    def _write(self, query, cache: KeyValues, index: CacheIndex) -> KeyValues:
        """`cache` with the keys and values of `query`'s rows written at `index.position`: in
        place in a graph's dynamic history (the search holds the cache alone), else by a
        dynamic update slice (`write_position`)."""
        in_place = index.written is None
        return KeyValues(*(
            write_position(buffer, tf.reshape(dense(query), [tf.shape(buffer)[1], -1]),
                           index.position, in_place)
            for buffer, dense in zip(cache, (self.key_dense, self.value_dense))))

    def get_config(self) -> dict:
        return {**super().get_config(), "num_heads": self.num_heads, "key_dim": self.key_dim,
                "value_dim": self.value_dim, "dropout": self.dropout,
                "attention_bias": self.attention_bias,
                **self.lora}

    @classmethod
    def from_config(cls, config: dict) -> "MultiHeadAttention":
        return cls(**renamed(config, {"use_bias": "attention_bias"}))
