"""Multi-head scaled dot-product attention (section 3.2, eq. (1)) with a key/value cache for
incremental decoding.

The cache of a decoding step is position-major, `[max_length, rows, heads, dim]`: a step writes
the keys and values of its position for every row in place, as one block, and no search ever
reorders it. A row reads its history through its `ancestors` (`history_slots`): the cache row
that holds each of its positions, shared with the hypotheses it extends.
"""
from __future__ import annotations

from typing import Callable, Optional

import keras
import tensorflow as tf
from keras import ops

from keras_transformer.layers.dense import HeadsDense, linear, lora_settings
from keras_transformer.layers.residual import HookDropout

Matrix = tuple[tf.Tensor, Optional[tf.Tensor]]  # a kernel `[in, out]` and its bias (or None)

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
    Heads first, the products are plain batched matmuls, faster on CPU than
    `keras.ops.dot_product_attention`'s einsums over `[batch, len, heads, dim]`
    (`benchmarks/attention_speed.py`; figures in benchmarks/RESULTS.md).
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


def project(rows: tf.Tensor, matrix: Matrix, relu: bool = False) -> tf.Tensor:
    """`rows @ kernel + bias` (then ReLU) of `[rows, in]` with a matrix read once per search:
    the plain product (`linear`'s reference), as a search is never differentiated, so that a
    decoding step runs the same ops whichever kernel set is in force."""
    return linear.reference(rows, *matrix, relu=relu)


def history_slots(ancestors: tf.Tensor, length, heads: int) -> tf.Tensor:
    """Where each row's keys (or values) lie in a position-major cache (`init_cache`) viewed as
    `[max_length * rows * heads, dim]`: `[rows, heads, length]` indices of positions
    `0 .. length - 1`, position `j` of row `r` in cache row `ancestors[r, j]`.

    Args:
        ancestors: `[rows, max_length]` int32, the cache row holding each position of a row.
        length: how many positions to read (a scalar).
        heads: attention heads.

    Returns:
        The indices, the same for every layer's keys and values.
    """
    rows = tf.shape(ancestors)[0]
    positions = tf.range(length)
    return ((positions[None, None, :] * rows + ancestors[:, None, :length]) * heads
            + tf.range(heads)[None, :, None])


def write_position(buffer: tf.Tensor, update: tf.Tensor, position, in_place: bool
                   ) -> tf.Tensor:
    """The position-major `buffer` `[max_length, rows, heads, dim]` with `update`
    `[rows, heads * dim]` written at `position` of every row: `in_place` with `InplaceUpdate`
    (graphs; the search holds the buffer alone), else as a scatter (what XLA compiles, and
    runs in place; in a graph a scatter copies the whole buffer)."""
    block = tf.reshape(tf.cast(update, buffer.dtype), tf.concat([[1], tf.shape(buffer)[1:]], 0))
    position = tf.reshape(tf.cast(position, tf.int32), [1])
    if in_place:
        return tf.raw_ops.InplaceUpdate(x=buffer, i=position, v=block)
    return tf.tensor_scatter_nd_update(buffer, position[:, None], block)


def read_history(buffer: tf.Tensor, slots: tf.Tensor) -> tf.Tensor:
    """`[rows, heads, length, dim]`: the keys (or values) of `buffer` at `slots`
    (`history_slots`), heads first as `scaled_dot_product_attention` takes them."""
    return tf.gather(tf.reshape(buffer, [-1, tf.shape(buffer)[3]]), slots)


@keras.saving.register_keras_serializable(package="keras_transformer")
class MultiHeadAttention(keras.layers.Layer):
    """MultiHead(Q, K, V) = Concat(head_1, ..., head_h) W^O with head_i = Attention(Q W_i^Q,
    K W_i^K, V W_i^V) (section 3.2.2; `Attention` is `scaled_dot_product_attention`).

    `key_dim` (d_k) and `value_dim` (d_v) are independent of the model width (Table 3 rows A,
    B). Inputs are `[batch, length, d_model]`. `call(query, key_value, attention_mask)` attends
    as in training; `attend` attends to keys and values projected before
    (`project_key_value`). A decoding step runs on rows `[rows, d_model]`, one per hypothesis,
    with the matrices `step_weights` reads once per search: `step` is one position of
    incremental self-attention with a key/value cache (`init_cache`), `attend_step` attends
    to the keys and values of a sentence (e.g. of the encoder output, projected once).
    """

    def __init__(self, num_heads: int, key_dim: int, value_dim: Optional[int] = None,
                 dropout: float = 0.0, use_bias: bool = True, lora_rank: Optional[int] = None,
                 lora_alpha: Optional[float] = None, **kwargs):
        super().__init__(**kwargs)
        self.num_heads = num_heads
        self.key_dim = key_dim
        self.value_dim = value_dim or key_dim
        self.dropout = dropout
        self.use_bias = use_bias
        self.lora = lora_settings(lora_rank, lora_alpha)  # the projections' LoRA adapters
        self.dropout_layer = HookDropout(dropout)

    def build(self, query_shape, key_value_shape=None) -> None:
        d_model = query_shape[-1]
        source_dim = (key_value_shape or query_shape)[-1]
        heads = self.num_heads
        self.query_dense = HeadsDense((heads, self.key_dim), use_bias=self.use_bias, **self.lora,
                                      name="query")
        self.key_dense = HeadsDense((heads, self.key_dim), use_bias=self.use_bias, **self.lora,
                                    name="key")
        self.value_dense = HeadsDense((heads, self.value_dim), use_bias=self.use_bias,
                                      **self.lora, name="value")
        self.output_dense = HeadsDense((d_model,), input_rank=2, use_bias=self.use_bias,
                                       **self.lora, name="output")
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

    def project_key_value(self, key_value) -> tuple[tf.Tensor, tf.Tensor]:
        """Keys and values `[batch, heads, len, dim]` of `key_value` `[batch, len, d_model]`
        (e.g. the encoder output, projected once per sentence for decoding)."""
        return heads_first(self.key_dense(key_value)), heads_first(self.value_dense(key_value))

    def step_weights(self, dtype, key_value=None) -> dict[str, tf.Tensor | Matrix]:
        """What a decoding step multiplies by, in `dtype`, read once per search (a step at one
        sentence is small enough that reading, reshaping and casting the weights each time is
        much of its time): for `step`, W^Q, W^K and W^V side by side as `query_key_value` (one
        product for the three); for `attend_step`, W^Q as `query` and the keys and values of
        `key_value` `[batch, len, d_model]` (`project_key_value`); W^O as `output`."""
        if key_value is None:
            kernels, biases = zip(*(dense.matrix(dtype) for dense in (
                self.query_dense, self.key_dense, self.value_dense)))
            weights = {"query_key_value": (tf.concat(kernels, axis=1), None if biases[0] is None
                                           else tf.concat(biases, axis=0))}
        else:
            keys, values = self.project_key_value(key_value)
            weights = {"query": self.query_dense.matrix(dtype), "key": keys, "value": values}
        return {**weights, "output": self.output_dense.matrix(dtype)}

    def init_cache(self, rows, max_length, dtype, static_shapes: bool = False
                   ) -> dict[str, tf.Tensor]:
        """An empty self-attention cache for `step`: keys and values `[max_length, rows, heads,
        dim]`, position-major. Zeros from `Empty` (stateful: never folded into a graph constant
        that in-place writes would then change across runs), or, with `static_shapes` (what XLA
        compiles, where `Empty` does not exist), `zeros`."""
        def buffer(dim):
            shape = tf.stack([max_length, rows, self.num_heads, dim])
            if static_shapes:
                return tf.zeros(shape, dtype)
            return tf.raw_ops.Empty(shape=shape, dtype=dtype, init=True)

        return {"key": buffer(self.key_dim), "value": buffer(self.value_dim)}

    def step(self, x, weights: dict[str, Matrix], cache: dict[str, tf.Tensor], position,
             slots, written=None) -> tuple[tf.Tensor, dict[str, tf.Tensor]]:
        """One position of incremental self-attention: each row's projections at `position`
        are written into `cache`, and its query attends to the history `slots` point to.

        Args:
            x: `[rows, d_model]`, each row's input at `position`.
            weights: `step_weights(dtype)`.
            cache: `init_cache`'s keys and values, the positions before `position` written.
            position: scalar int32.
            slots: `[rows, heads, length]` (`history_slots`): where each row's positions
                `0 .. length - 1` lie in the cache.
            written: None when `length` is `position + 1`; with static shapes (`slots` over
                every position) `[1, 1, max_length]`, True up to `position`: the positions
                after it are masked.

        Returns:
            The output `[rows, d_model]` and the cache with `position` written.
        """
        with tf.name_scope(self.name):  # as a call's: profiles attribute the ops by it
            width = self.num_heads * self.key_dim
            query, key, value = tf.split(project(x, weights["query_key_value"]),
                                         [width, width, self.num_heads * self.value_dim], axis=1)
            in_place = written is None  # a graph's dynamic history: in-place writes exist
            cache = {"key": write_position(cache["key"], key, position, in_place),
                     "value": write_position(cache["value"], value, position, in_place)}
            attended, _ = scaled_dot_product_attention(
                tf.reshape(query, [-1, self.num_heads, 1, self.key_dim]),
                read_history(cache["key"], slots), read_history(cache["value"], slots), written)
            return self._output_step(attended, weights), cache

    def attend_step(self, x, weights: dict[str, tf.Tensor | Matrix], attention_mask
                    ) -> tf.Tensor:
        """`attend` in a decoding step: the rows `x` `[rows, d_model]` (each sentence's in
        turn, `rows = batch * per sentence`) attend to their sentence's keys and values of
        `weights` (`step_weights(dtype, key_value)`, `[batch, heads, len, dim]`) where
        `attention_mask` `[batch, 1, len]` is True. A sentence's rows are the queries of its
        attention, so its keys and values serve them all without being tiled. Returns
        `[rows, d_model]`."""
        with tf.name_scope(self.name):
            queries = tf.stack([tf.shape(weights["key"])[0], -1, self.num_heads, self.key_dim])
            query = heads_first(tf.reshape(project(x, weights["query"]), queries))
            attended, _ = scaled_dot_product_attention(query, weights["key"], weights["value"],
                                                       attention_mask)
            return self._output_step(tokens_first(attended), weights)

    def _output_step(self, attended: tf.Tensor, weights: dict[str, Matrix]) -> tf.Tensor:
        """W^O of a step's heads `[rows, heads, 1, d_v]` (or `[batch, per sentence, heads,
        d_v]`), concatenated per row: `[rows, d_model]`."""
        return project(tf.reshape(attended, [-1, self.num_heads * self.value_dim]),
                       weights["output"])

    def get_config(self) -> dict:
        return {**super().get_config(), "num_heads": self.num_heads, "key_dim": self.key_dim,
                "value_dim": self.value_dim, "dropout": self.dropout, "use_bias": self.use_bias,
                **self.lora}
