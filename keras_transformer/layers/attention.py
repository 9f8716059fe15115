"""Multi-head scaled dot-product attention (section 3.2, eq. (1)) with a key/value cache for
incremental decoding."""
from __future__ import annotations

from typing import Callable, Optional

import keras
import tensorflow as tf
from keras import ops

from keras_transformer.layers.dense import HeadsDense
from keras_transformer.layers.residual import HookDropout

# Added to the scores of masked keys. Finite (not -inf) so that a fully masked row yields finite
# weights instead of NaN; the masked weights underflow to exactly 0 in float32 and bfloat16.
MASK_PENALTY = -1e9


def attention_penalty(attention_mask, dtype) -> tf.Tensor:
    """The scores' additive mask: 0 where boolean `attention_mask` `[batch, query_len, key_len]`
    is True, `MASK_PENALTY` elsewhere, `[batch, 1, query_len, key_len]` (one for all heads) in
    `dtype`."""
    penalty = ops.where(ops.cast(attention_mask, "bool"), 0.0, MASK_PENALTY)
    return ops.expand_dims(ops.cast(penalty, dtype), axis=1)


def scaled_dot_product_attention(query, keys, values, attention_mask=None,
                                 dropout: Optional[Callable] = None):
    """Eq. (1), for all heads at once: `Attention(Q, K, V) = softmax(Q K^T / sqrt(d_k)) V`.

    Args:
        query: `[batch, heads, query_len, d_k]`.
        keys: `[batch, heads, key_len, d_k]`.
        values: `[batch, heads, key_len, d_v]`.
        attention_mask: boolean, broadcastable to `[batch, query_len, key_len]`, True where a
            query may attend; the others get `MASK_PENALTY` added to their scores.
        dropout: applied to the attention weights (training).

    Returns:
        The context `[batch, heads, query_len, d_v]` and the weights
        `[batch, heads, query_len, key_len]` (the softmax runs in float32).

    The queries are scaled rather than the scores (the same products, on fewer numbers).
    Heads first, the products are plain batched matmuls: forward and backward run 1.3-1.4x
    faster on CPU than `keras.ops.dot_product_attention`'s einsums over
    `[batch, len, heads, dim]` (`benchmarks/attention_speed.py`).
    """
    scale = ops.cast(query.shape[-1] ** -0.5, query.dtype)
    scores = tf.linalg.matmul(query * scale, keys, transpose_b=True)
    if attention_mask is not None:
        scores = scores + attention_penalty(attention_mask, scores.dtype)
    # tf.nn.softmax: Keras' warns at every call over one key (the first decoding position).
    weights = tf.nn.softmax(ops.cast(scores, "float32"), axis=-1)
    dropped = weights if dropout is None else dropout(weights)
    return tf.linalg.matmul(ops.cast(dropped, values.dtype), values), weights


def heads_first(tokens):
    """`[batch, len, heads, dim]` -> `[batch, heads, len, dim]`."""
    return tf.transpose(tokens, [0, 2, 1, 3])


def tokens_first(heads):
    """`[batch, heads, len, dim]` -> `[batch, len, heads, dim]`."""
    return tf.transpose(heads, [0, 2, 1, 3])


@keras.saving.register_keras_serializable(package="keras_transformer")
class MultiHeadAttention(keras.layers.Layer):
    """MultiHead(Q, K, V) = Concat(head_1, ..., head_h) W^O with head_i = Attention(Q W_i^Q,
    K W_i^K, V W_i^V) (section 3.2.2; `Attention` is `scaled_dot_product_attention`).

    `key_dim` (d_k) and `value_dim` (d_v) are independent of the model width (Table 3 rows A,
    B). Inputs are `[batch, length, d_model]`. Three calls, one meaning each:
    `call(query, key_value, attention_mask)` attends as in training; `attend` attends to keys
    and values projected before (`project_key_value`, e.g. of the encoder output, once per
    sentence when decoding); `step` runs one position of incremental self-attention with a
    key/value cache (`init_cache`).
    """

    def __init__(self, num_heads: int, key_dim: int, value_dim: Optional[int] = None,
                 dropout: float = 0.0, use_bias: bool = True, **kwargs):
        super().__init__(**kwargs)
        self.num_heads = num_heads
        self.key_dim = key_dim
        self.value_dim = value_dim or key_dim
        self.dropout = dropout
        self.use_bias = use_bias
        self.dropout_layer = HookDropout(dropout)

    def build(self, query_shape, key_value_shape=None) -> None:
        d_model = query_shape[-1]
        source_dim = (key_value_shape or query_shape)[-1]
        heads = self.num_heads
        self.query_dense = HeadsDense((heads, self.key_dim), use_bias=self.use_bias, name="query")
        self.key_dense = HeadsDense((heads, self.key_dim), use_bias=self.use_bias, name="key")
        self.value_dense = HeadsDense((heads, self.value_dim), use_bias=self.use_bias,
                                      name="value")
        self.output_dense = HeadsDense((d_model,), input_rank=2, use_bias=self.use_bias,
                                       name="output")
        self.query_dense.build(query_shape)
        self.key_dense.build((None, None, source_dim))
        self.value_dense.build((None, None, source_dim))
        self.output_dense.build((None, None, heads, self.value_dim))

    def call(self, query, key_value=None, attention_mask=None, training=None,
             return_attention_scores: bool = False):
        """Attends `query` to `key_value` (self-attention when None).

        Args:
            query: `[batch, query_len, d_model]`.
            key_value: `[batch, key_len, d_model]`, or None.
            attention_mask: boolean, broadcastable to `[batch, query_len, key_len]`.
            training: dropout on the attention weights.
            return_attention_scores: also return the weights `[batch, heads, q_len, k_len]`.

        Returns:
            The output `[batch, query_len, d_model]` (and the weights when asked for).
        """
        keys, values = self.project_key_value(query if key_value is None else key_value)
        output, weights = self.attend(query, keys, values, attention_mask, training)
        return (output, weights) if return_attention_scores else output

    def attend(self, query, keys, values, attention_mask=None, training=None
               ) -> tuple[tf.Tensor, tf.Tensor]:
        """The output `[batch, query_len, d_model]` and weights of `query` attending to
        projected `keys` and `values` (`project_key_value`, heads first); other arguments as
        `call`'s."""
        attended, weights = scaled_dot_product_attention(
            heads_first(self.query_dense(query)), keys, values, attention_mask,
            dropout=lambda weights: self.dropout_layer(weights, training=training))
        return self.output_dense(tokens_first(attended)), weights

    def step(self, query, cache: dict[str, tf.Tensor], index
             ) -> tuple[tf.Tensor, dict[str, tf.Tensor]]:
        """One position of incremental self-attention: `query` `[rows, 1, d_model]`, position
        `index` (scalar int32) of each row, is written into `cache` (`init_cache`) and attends
        to positions `0 .. index`. Returns the output `[rows, 1, d_model]` and the cache."""
        keys, values = self._write_cache(cache, query, index)
        written = ops.arange(ops.shape(keys)[2]) <= index
        output, _ = self.attend(query, keys, values, written[None, None, :])
        return output, {"key": keys, "value": values}

    def project_key_value(self, key_value) -> tuple[tf.Tensor, tf.Tensor]:
        """Keys and values `[batch, heads, len, dim]` of `key_value` `[batch, len, d_model]`
        (e.g. the encoder output, projected once per sentence for decoding)."""
        return heads_first(self.key_dense(key_value)), heads_first(self.value_dense(key_value))

    def init_cache(self, rows, max_length, dtype) -> dict[str, tf.Tensor]:
        """An empty self-attention cache for `step`: zero keys and values
        `[rows, heads, max_length, dim]`, one row per hypothesis."""
        def buffer(dim):
            return tf.zeros(tf.stack([rows, self.num_heads, max_length, dim]), dtype)

        return {"key": buffer(self.key_dim), "value": buffer(self.value_dim)}

    def _write_cache(self, cache, query, index) -> tuple[tf.Tensor, tf.Tensor]:
        """The cache's keys and values with the projections of `query` `[rows, 1, d_model]`
        written at position `index` of every row."""
        new_keys, new_values = self.project_key_value(query)
        at_index = (ops.arange(ops.shape(cache["key"])[2]) == index)[:, None]
        return (ops.where(at_index, ops.cast(new_keys, cache["key"].dtype), cache["key"]),
                ops.where(at_index, ops.cast(new_values, cache["value"].dtype),
                          cache["value"]))

    def get_config(self) -> dict:
        return {**super().get_config(), "num_heads": self.num_heads, "key_dim": self.key_dim,
                "value_dim": self.value_dim, "dropout": self.dropout, "use_bias": self.use_bias}
