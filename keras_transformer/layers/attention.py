"""Multi-head scaled dot-product attention (section 3.2) with an incremental key/value cache."""
from __future__ import annotations

from typing import Callable, Optional

import keras
import tensorflow as tf
from keras import ops
from tensorflow.python.framework import ops as tf_ops
from tensorflow.python.ops import control_flow_util

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
        """Zeroed self-attention buffers `[rows, heads, max_length, dim]` for `cache_step`.

        Built with `Empty` (stateful, so never folded into a graph constant that the in-place
        writes of `call` would then modify across runs).
        """
        def buffer(dim):
            return tf.raw_ops.Empty(shape=tf.stack([rows, self.num_heads, max_length, dim]),
                                    dtype=dtype, init=True)

        return {"key": buffer(self.key_dim), "value": buffer(self.value_dim)}

    def project_key_value(self, key_value) -> dict[str, tf.Tensor]:
        """Keys and values `[batch, heads, len, dim]` of `key_value`, e.g. the encoder output,
        computed once per sentence."""
        return {"key": _heads_first(self.key_dense(key_value)),
                "value": _heads_first(self.value_dense(key_value))}

    def call(self, query, key_value=None, attention_mask=None, cache=None, cache_step=None,
             cache_rows=None, query_layout=None, key_layout=None, training=None,
             return_attention_scores: bool = False):
        """Attends `query` to `key_value` (self-attention when None).

        With `query_layout` (a `TokenLayout`), `query` holds only its real tokens, packed
        `[N, d_model]` (as does `key_value` when None), and so does the output; with
        `key_layout`, so does `key_value`. The projections skip padding; only the attention
        products see the padded layout.

        `cache` without `cache_step` holds precomputed keys/values (`project_key_value`) used
        as they are; with `cache_step` it is a fixed-size self-attention buffer
        `[rows, heads, max_len, dim]` from `init_cache`: the rows `cache_rows` (`[batch]`,
        default all in order; a beam search passes the rows its hypotheses extend) are taken,
        and this call's single position is written into them at `cache_step`.
        Keys and values are laid out heads first (cached ones are stored so, with no per-step
        transpose), so that the score and context products are plain batched matmuls.
        Returns the output, plus the updated cache when `cache_step` is given, plus the
        attention weights `[batch, heads, query_len, key_len]` when asked for.
        """
        query_heads = self.query_dense(query) * ops.cast(self.key_dim ** -0.5, query.dtype)
        if cache is None:
            source = query if key_value is None else key_value
            keys, values = self.key_dense(source), self.value_dense(source)
            if key_value is None:
                key_layout = query_layout
            keys, values = _heads_first(keys, key_layout), _heads_first(values, key_layout)
        else:
            keys, values = cache["key"], cache["value"]
            if cache_step is not None:
                if cache_rows is None:
                    cache_rows = tf.range(tf.shape(query)[0])
                keys = _extend_rows(keys, cache_rows, self.key_dense(query), cache_step)
                values = _extend_rows(values, cache_rows, self.value_dense(query), cache_step)
                cache = {"key": keys, "value": values}
        attended, weights = scaled_dot_product(
            _heads_first(query_heads, query_layout), keys, values, attention_mask,
            dropout=lambda weights: self.dropout_layer(weights, training=training))
        attended = (_transpose_heads(attended) if query_layout is None
                    else query_layout.pack_heads(attended))
        outputs = (self.output_dense(attended),)
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


def _transpose_heads(tensor):
    """`[batch, len, heads, dim]` <-> `[batch, heads, len, dim]`."""
    return tf.transpose(tensor, [0, 2, 1, 3])


def _heads_first(tensor, layout=None):
    """`[batch, len, heads, dim]`, or packed `[N, heads, dim]` with its `layout` (a
    `TokenLayout`), -> `[batch, heads, len, dim]`."""
    return _transpose_heads(tensor) if layout is None else layout.expand_heads(tensor)


def _extend_rows(buffer, rows, update, step):
    """`buffer[rows]` (`buffer`: `[rows, heads, T, dim]`) with `update` `[batch, 1, heads, dim]`
    written at position `step`.

    The write goes in place into the gathered copy, which nothing else holds, so a step copies
    each buffer once (`tensor_scatter_nd_update` would copy it a second time). The gather must
    not be foldable into a constant: `buffer` comes from `init_cache` or an earlier step.
    """
    taken = tf.gather(buffer, rows)
    shape = tf.shape(taken)
    flat = tf.reshape(taken, [-1, shape[3]])  # One row per (row, head, position).
    indices = tf.range(shape[0] * shape[1]) * shape[2] + tf.cast(step, tf.int32)
    values = tf.reshape(tf.cast(_transpose_heads(update), buffer.dtype), [-1, shape[3]])
    if control_flow_util.GraphOrParentsInXlaContext(tf_ops.get_default_graph()):
        # XLA has no InplaceUpdate kernel; it updates the scatter's operand in place itself.
        return tf.reshape(tf.tensor_scatter_nd_update(flat, indices[:, None], values), shape)
    return tf.reshape(tf.raw_ops.InplaceUpdate(x=flat, i=indices, v=values), shape)
