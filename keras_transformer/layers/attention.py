"""Multi-head scaled dot-product attention (section 3.2) with an incremental key/value cache."""
from __future__ import annotations

from typing import Callable, Optional

import keras
import tensorflow as tf
from keras import ops

from keras_transformer import kernels
from keras_transformer.kernels import PADDED
from keras_transformer.layers.dropout import Dropout
from keras_transformer.layers.heads_dense import HeadsDense

# Added to the scores of masked keys (an addition, unlike a select, has nothing to do in the
# backward pass). Finite (not -inf) so a fully masked row yields finite weights instead of NaN;
# the masked weights underflow to exactly 0 in float32 and bfloat16.
MASK_PENALTY = -1e9


@keras.saving.register_keras_serializable(package="keras_transformer")
class MultiHeadAttention(keras.layers.Layer):
    """softmax(Q K^T / sqrt(d_k)) V over `num_heads` heads, then the output projection W^O.

    `key_dim` (d_k) and `value_dim` (d_v) are independent of the model width (Table 3 rows A, B).
    `attention_mask` is boolean, broadcastable to `[batch, query_len, key_len]`, True where a
    query may attend. Tensors are laid out `[batch, length, heads, dim]`.
    """

    def __init__(self, num_heads: int, key_dim: int, value_dim: Optional[int] = None,
                 dropout: float = 0.0, use_bias: bool = True, **kwargs):
        super().__init__(**kwargs)
        self.num_heads = num_heads
        self.key_dim = key_dim
        self.value_dim = value_dim or key_dim
        self.dropout = dropout
        self.use_bias = use_bias
        self.dropout_layer = Dropout(dropout)

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

    def init_cache(self, rows, max_length, dtype) -> dict[str, tf.Tensor]:
        """Empty self-attention caches for `cache_step`, of at most `max_length` positions
        (`kernels.decode_buffer`)."""
        def buffer(dim):
            return kernels.decode_buffer(tf.stack([rows, self.num_heads, max_length, dim]),
                                         dtype)

        return {"key": buffer(self.key_dim), "value": buffer(self.value_dim)}

    def project_key_value(self, key_value) -> dict[str, tf.Tensor]:
        """Keys and values `[batch, heads, len, dim]` of `key_value`, e.g. the encoder output,
        computed once per sentence."""
        return {"key": PADDED.expand_heads(self.key_dense(key_value)),
                "value": PADDED.expand_heads(self.value_dense(key_value))}

    def call(self, query, key_value=None, attention_mask=None, cache=None, cache_step=None,
             cache_ancestors=None, query_layout=PADDED, key_layout=PADDED, training=None,
             return_attention_scores: bool = False):
        """Attends `query` to `key_value` (self-attention when None).

        `query` (and the output) are in `query_layout`, `key_value` in `key_layout` (for
        self-attention, `query_layout`): `kernels.PADDED` (`[batch, len, d_model]`) or a
        `kernels.TokenLayout` (the real tokens only, packed `[N, d_model]`, so that the
        projections skip padding; only the attention products see the padded layout).

        `cache` without `cache_step` holds precomputed keys/values (`project_key_value`) used
        as they are; with `cache_step` it is a self-attention cache from `init_cache`:
        this call's single position is written into it as position `cache_step` of each
        query row, which then attends to its positions `0 .. cache_step`, position `j` from
        the row `cache_ancestors[row, j]` (`[rows, max_len]`; a beam search follows there the
        parents its hypotheses extend) (`kernels.extend_cache`).
        Keys and values are laid out heads first (cached ones are stored so, with no per-step
        transpose), so that the score and context products are plain batched matmuls.
        Returns the output, plus the updated cache when `cache_step` is given, plus the
        attention weights `[batch, heads, query_len, key_len]` when asked for.
        """
        query_heads = self.query_dense(query) * ops.cast(self.key_dim ** -0.5, query.dtype)
        if cache is None:
            source = query if key_value is None else key_value
            if key_value is None:
                key_layout = query_layout
            keys = key_layout.expand_heads(self.key_dense(source))
            values = key_layout.expand_heads(self.value_dense(source))
        else:
            keys, values = cache["key"], cache["value"]
            if cache_step is not None:
                if cache_ancestors is None:
                    raise ValueError("cache_ancestors: needed with cache_step")
                key_buffer, keys = kernels.extend_cache(keys, cache_ancestors,
                                                        self.key_dense(query), cache_step)
                value_buffer, values = kernels.extend_cache(values, cache_ancestors,
                                                            self.value_dense(query), cache_step)
                cache = {"key": key_buffer, "value": value_buffer}
                if attention_mask is None:  # The positions written so far, not those after.
                    length = tf.shape(keys)[2]
                    attention_mask = tf.reshape(tf.range(length) <= cache_step, [1, 1, length])
        attended, weights = scaled_dot_product(
            query_layout.expand_heads(query_heads), keys, values, attention_mask,
            dropout=lambda weights: self.dropout_layer(weights, training=training))
        outputs = (self.output_dense(query_layout.pack_heads(attended)),)
        if cache_step is not None:
            outputs += (cache,)
        if return_attention_scores:
            outputs += (weights,)
        return outputs[0] if len(outputs) == 1 else outputs

    def get_config(self) -> dict:
        return {**super().get_config(), "num_heads": self.num_heads, "key_dim": self.key_dim,
                "value_dim": self.value_dim, "dropout": self.dropout, "use_bias": self.use_bias}


def scaled_dot_product(query, keys, values, attention_mask=None,
                       dropout: Optional[Callable] = None):
    """softmax(Q K^T + mask penalty) V for all heads, heads first: `[batch, heads, len, dim]`.

    `query` is already scaled by d_k^-0.5; `attention_mask` as in `MultiHeadAttention`;
    `dropout` is applied to the weights. The softmax is in float32. Returns the context
    `[batch, heads, query_len, d_v]` and the weights `[batch, heads, query_len, key_len]`.

    Heads first, the products are plain batched matmuls: forward and backward run 1.3-1.4x
    faster on CPU than `keras.ops.dot_product_attention`'s einsums over
    `[batch, len, heads, dim]` (`benchmarks/attention_speed.py`).
    """
    scores = tf.linalg.matmul(query, keys, transpose_b=True)
    if attention_mask is not None:
        penalty = ops.where(ops.cast(attention_mask, "bool"), 0.0, MASK_PENALTY)
        scores = scores + ops.expand_dims(ops.cast(penalty, scores.dtype), axis=1)
    weights = ops.softmax(ops.cast(scores, "float32"), axis=-1)
    dropped = weights if dropout is None else dropout(weights)
    return tf.linalg.matmul(ops.cast(dropped, values.dtype), values), weights

