"""Each layer: the paper's formulas, masks, and get_config round trips."""
import math

import keras
import numpy as np
import pytest
import tensorflow as tf

import keras_transformer  # noqa: F401  (selects the TensorFlow backend)
from keras_transformer.layers import (DecoderLayer, EncoderLayer, LearnedPositionalEmbedding,
                                      MultiHeadAttention, PositionwiseFeedForward, ResidualNorm,
                                      ScaledEmbedding, SinusoidalPositionalEncoding, TokenLayout)

rng = np.random.default_rng(0)


def test_attention_weights_sum_to_one_and_ignore_padded_keys():
    attention = MultiHeadAttention(num_heads=4, key_dim=8, value_dim=6)
    x = rng.normal(size=(2, 5, 16)).astype("float32")
    key_is_real = np.array([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]], dtype=bool)
    out, weights = attention(x, attention_mask=key_is_real[:, None, :],
                             return_attention_scores=True)
    weights = np.asarray(weights)
    assert out.shape == (2, 5, 16) and weights.shape == (2, 4, 5, 5)
    np.testing.assert_allclose(weights.sum(-1), 1.0, rtol=1e-6)
    assert np.all(weights[0, :, :, 3:] == 0.0)


def test_attention_equals_scaled_dot_product_formula():
    attention = MultiHeadAttention(num_heads=2, key_dim=3, value_dim=5)
    q_in = rng.normal(size=(1, 4, 6)).astype("float32")
    kv_in = rng.normal(size=(1, 7, 6)).astype("float32")
    out = np.asarray(attention(q_in, kv_in))
    (wq, bq), (wk, bk), (wv, bv), (wo, bo) = [
        (np.asarray(layer.kernel), np.asarray(layer.bias)) for layer in
        (attention.query_dense, attention.key_dense, attention.value_dense, attention.output_dense)]
    heads = []
    for h in range(2):
        q = q_in[0] @ wq[:, h] + bq[h]
        k = kv_in[0] @ wk[:, h] + bk[h]
        v = kv_in[0] @ wv[:, h] + bv[h]
        scores = q @ k.T / math.sqrt(3)
        p = np.exp(scores - scores.max(-1, keepdims=True))
        heads.append((p / p.sum(-1, keepdims=True)) @ v)
    expected = np.einsum("hqv,hvd->qd", np.stack(heads), wo) + bo
    np.testing.assert_allclose(out[0], expected, rtol=1e-4, atol=1e-5)


def test_cache_step_takes_rows_and_writes_one_position_without_leaking_between_runs():
    attention = MultiHeadAttention(num_heads=2, key_dim=3)
    attention(np.zeros((1, 1, 4), "float32"))

    @tf.function  # Static shapes: the zeroed buffers must not become a constant written into.
    def write(query, step):
        cache = attention.init_cache(3, 5, "float32")
        cache = {name: buffer + tf.reshape(tf.range(3, dtype=tf.float32), [3, 1, 1, 1])
                 for name, buffer in cache.items()}  # Row r holds r everywhere.
        return attention(query, cache=cache, cache_step=step,
                         cache_rows=tf.constant([2, 0, 0]))[1]["key"]

    query = rng.normal(size=(3, 1, 4)).astype("float32")
    keys = np.asarray(attention.key_dense(query)).transpose(0, 2, 1, 3)[:, :, 0]  # [3, heads, 3]
    for step in (1, 3):
        written = np.asarray(write(query, tf.constant(step)))
        np.testing.assert_allclose(written[:, :, step], keys, rtol=1e-6)
        others = np.delete(written, step, axis=2)
        np.testing.assert_array_equal(others, np.broadcast_to([[[[2.0]]], [[[0.0]]], [[[0.0]]]],
                                                              others.shape))


def test_key_and_value_sizes_are_independent():
    attention = MultiHeadAttention(num_heads=3, key_dim=4, value_dim=10)
    attention(np.zeros((1, 2, 12), "float32"))
    assert attention.query_dense.kernel.shape == (12, 3, 4)
    assert attention.value_dense.kernel.shape == (12, 3, 10)
    assert attention.output_dense.kernel.shape == (3, 10, 12)


def test_sinusoidal_encoding_matches_section_3_5():
    encoding = np.asarray(SinusoidalPositionalEncoding()(np.zeros((1, 50, 16), "float32")))
    pos, i = np.arange(50)[:, None], np.arange(8)[None, :]
    angle = pos / 10000 ** (2 * i / 16)
    np.testing.assert_allclose(encoding[:, 0::2], np.sin(angle), atol=1e-5)
    np.testing.assert_allclose(encoding[:, 1::2], np.cos(angle), atol=1e-5)
    shifted = SinusoidalPositionalEncoding()(np.zeros((1, 3, 16), "float32"), start_index=7)
    np.testing.assert_allclose(shifted, encoding[7:10], atol=1e-5)
    positions = np.array([3, 0, 49, 3, 12])  # Of packed tokens [5, 16].
    at_positions = SinusoidalPositionalEncoding()(np.zeros((5, 16), "float32"),
                                                  positions=positions)
    np.testing.assert_allclose(at_positions, encoding[positions], atol=1e-5)


def test_learned_positions_index_their_table():
    layer = LearnedPositionalEmbedding(max_length=10)
    out = layer(np.zeros((2, 4, 8), "float32"), start_index=3)
    np.testing.assert_allclose(out, np.asarray(layer.table)[3:7])
    positions = np.array([9, 0, 0, 4])
    np.testing.assert_allclose(layer(np.zeros((4, 8), "float32"), positions=positions),
                               np.asarray(layer.table)[positions])


def test_embedding_is_scaled_tied_and_masks_padding():
    layer = ScaledEmbedding(vocab_size=11, d_model=16)
    ids = np.array([[4, 5, 0]], "int32")
    vectors = np.asarray(layer(ids))
    table = np.asarray(layer.embeddings)
    np.testing.assert_allclose(vectors[0, 0], table[4] * 4.0, rtol=1e-6)
    np.testing.assert_array_equal(np.asarray(layer.compute_mask(ids)), [[True, True, False]])
    hidden = rng.normal(size=(1, 2, 16)).astype("float32")
    np.testing.assert_allclose(layer.logits(hidden), hidden @ table.T, rtol=1e-5, atol=1e-6)


def test_feed_forward_is_relu_between_two_linear_maps():
    ffn = PositionwiseFeedForward(d_ff=32)
    x = rng.normal(size=(2, 3, 8)).astype("float32")
    out = np.asarray(ffn(x))
    inner = np.maximum(0, x @ np.asarray(ffn.inner.kernel) + np.asarray(ffn.inner.bias))
    np.testing.assert_allclose(out, inner @ np.asarray(ffn.outer.kernel)
                               + np.asarray(ffn.outer.bias), rtol=1e-5, atol=1e-5)


def test_post_norm_and_pre_norm_residuals():
    x = rng.normal(size=(1, 3, 8)).astype("float32")
    f = rng.normal(size=(1, 3, 8)).astype("float32")
    post = ResidualNorm("post")
    summed = x + f
    expected = (summed - summed.mean(-1, keepdims=True)) / np.sqrt(
        summed.var(-1, keepdims=True) + 1e-6)
    np.testing.assert_allclose(post(x, f), expected, rtol=1e-4, atol=1e-4)
    pre = ResidualNorm("pre")
    np.testing.assert_allclose(pre(x, f), summed, rtol=1e-6)
    np.testing.assert_allclose(pre.normalize_input(x), post.layer_norm(x), rtol=1e-5)


LAYERS = [
    (lambda: MultiHeadAttention(num_heads=2, key_dim=4, value_dim=3, dropout=0.1), (2, 5, 8)),
    (lambda: PositionwiseFeedForward(d_ff=16), (2, 5, 8)),
    (lambda: ResidualNorm("pre", 0.1), None),
    (lambda: EncoderLayer(2, 4, 4, 16, dropout=0.1, norm="pre"), (2, 5, 8)),
    (lambda: DecoderLayer(2, 4, 4, 16, dropout=0.1), None),
    (lambda: ScaledEmbedding(11, 8), None),
    (lambda: SinusoidalPositionalEncoding(), (2, 5, 8)),
    (lambda: LearnedPositionalEmbedding(12), (2, 5, 8)),
]


@pytest.mark.parametrize("make, shape", LAYERS)
def test_get_config_round_trip(make, shape):
    layer = make()
    clone = layer.__class__.from_config(layer.get_config())
    assert clone.get_config() == layer.get_config()
    if shape is not None:
        x = rng.normal(size=shape).astype("float32")
        layer(x), clone(x)
        clone.set_weights(layer.get_weights())
        np.testing.assert_allclose(clone(x), layer(x), rtol=1e-6)
    restored = keras.saving.deserialize_keras_object(keras.saving.serialize_keras_object(layer))
    assert type(restored) is type(layer)


@pytest.mark.parametrize("input_shape, output_dims, input_rank, equation", [
    ((2, 5, 12), (3, 4), 1, "btd,dhk->bthk"),
    ((2, 5, 3, 4), (12,), 2, "bthk,hkd->btd"),
])
def test_heads_dense_is_the_einsum_it_replaces(input_shape, output_dims, input_rank, equation):
    from keras_transformer.layers import HeadsDense

    layer = HeadsDense(output_dims, input_rank=input_rank)
    inputs = np.random.default_rng(0).normal(size=input_shape).astype("float32")
    layer.build(input_shape)
    layer.bias.assign(np.random.default_rng(1).normal(size=output_dims).astype("float32"))
    expected = np.einsum(equation, inputs, layer.kernel.numpy()) + layer.bias.numpy()
    np.testing.assert_allclose(layer(inputs), expected, rtol=1e-5, atol=1e-5)
    clone = HeadsDense.from_config(layer.get_config())
    assert (clone.output_dims, clone.input_rank) == (output_dims, input_rank)


@pytest.mark.parametrize("in_size, out_size", [(6, 6), (4, 10), (10, 4)])
@pytest.mark.parametrize("with_bias, relu", [(True, True), (True, False), (False, False)])
@pytest.mark.parametrize("graph", [False, True])
@pytest.mark.parametrize("dtype, tolerance", [("float32", 1e-5), ("bfloat16", 2e-2)])
def test_linear_values_and_gradients_equal_autodiff(in_size, out_size, with_bias, relu, graph,
                                                    dtype, tolerance):
    """Every layout branch of the written-out gradient (square, wide, tall kernels; float32's
    layouts and bfloat16's), eager and in a tf.function (where the graph optimizer rewrites
    transposes)."""
    from keras_transformer.layers.heads_dense import linear

    draws = np.random.default_rng(in_size * out_size)
    constant = lambda *shape: tf.constant(draws.normal(size=shape), dtype)  # noqa: E731
    rows, kernel = constant(7, in_size), constant(in_size, out_size)
    upstream = constant(7, out_size)
    bias = constant(out_size) if with_bias else None

    def reference(rows, kernel, bias):
        outputs = rows @ kernel + (0.0 if bias is None else bias)
        return tf.nn.relu(outputs) if relu else outputs

    def values_and_gradients(function):
        def run():
            operands = [rows, kernel] + ([bias] if with_bias else [])
            with tf.GradientTape() as tape:
                tape.watch(operands)
                outputs = function(rows, kernel, bias)
            return [outputs] + tape.gradient(outputs, operands, output_gradients=upstream)
        return tf.function(run)() if graph else run()

    ours = values_and_gradients(lambda r, k, b: linear(r, k, b, relu=relu))
    expected = values_and_gradients(reference)
    assert len(ours) == len(expected) == 3 + with_bias
    for got, want in zip(ours, expected):
        assert got.dtype == want.dtype == dtype
        np.testing.assert_allclose(tf.cast(got, "float32"), tf.cast(want, "float32"),
                                   rtol=tolerance, atol=tolerance)


def test_heads_dense_rejects_unknown_activation():
    from keras_transformer.layers import HeadsDense

    with pytest.raises(ValueError, match="activation"):
        HeadsDense((4,), activation="gelu")


def test_token_layout_packs_real_tokens_in_row_major_order_and_unpacks_with_zeros():
    ids = np.array([[5, 6, 0, 0], [7, 0, 0, 0], [8, 9, 4, 0]], "int32")
    values = rng.normal(size=(3, 4, 2, 5)).astype("float32")
    layout = TokenLayout(ids)
    packed = np.asarray(layout.pack(values))
    np.testing.assert_array_equal(packed, values[ids != 0])
    np.testing.assert_array_equal(layout.unpack(packed), values * (ids != 0)[:, :, None, None])
    expanded = np.asarray(layout.expand_heads(packed)).transpose(0, 2, 1, 3)  # Heads first.
    np.testing.assert_array_equal(expanded[ids != 0], packed)
    for row in expanded[ids == 0]:  # Copies of real rows.
        assert (row == packed).all(axis=(1, 2)).any()
    heads_first = values.transpose(0, 2, 1, 3)
    np.testing.assert_array_equal(layout.pack_heads(heads_first), packed)
    select = np.array([[2, 1], [0, 0], [2, 2]])
    np.testing.assert_array_equal(layout.select(packed, select), values[select[:, 0], select[:, 1]])
    with pytest.raises(tf.errors.InvalidArgumentError):
        layout.select(packed, np.array([[1, 1]]))  # Padding.


def test_token_layout_moves_have_exact_gradients():
    """pack's and unpack's gradients are those of autodiff (a scatter / gather); expand_heads's
    padding rows are constants, so its gradient is a scatter of the real rows; pack_heads's
    is a scatter too (zeros at padding), not expand_heads."""
    ids = np.array([[5, 6, 0, 0], [7, 0, 0, 0], [8, 9, 4, 0]], "int32")
    layout = TokenLayout(ids)
    padded = tf.constant(rng.normal(size=(3, 4, 5)), "float32")
    packed = tf.constant(rng.normal(size=(6, 5)), "float32")
    upstream_packed = tf.constant(rng.normal(size=(6, 5)), "float32")
    upstream_padded = tf.constant(rng.normal(size=(3, 4, 5)), "float32")
    positions = np.argwhere(ids != 0)

    def gradient(move, x, upstream):
        with tf.GradientTape() as tape:
            tape.watch(x)
            loss = tf.reduce_sum(move(x) * upstream)
        return tape.gradient(loss, x).numpy()

    np.testing.assert_allclose(gradient(layout.pack, padded, upstream_packed),
                               gradient(lambda x: tf.gather_nd(x, positions), padded,
                                        upstream_packed))
    scatter = lambda x: tf.scatter_nd(positions, x, (3, 4, 5))  # noqa: E731
    np.testing.assert_allclose(gradient(layout.unpack, packed, upstream_padded),
                               gradient(scatter, packed, upstream_padded), rtol=1e-6)

    # The heads-first moves, with 2 heads of dim 5: [6, 2, 5] <-> [3, 2, 4, 5].
    def heads_first(x):
        return tf.transpose(x, [0, 2, 1, 3])

    packed_heads = tf.stack([packed, -packed], axis=1)
    padded_heads = heads_first(tf.stack([padded, 2 * padded], axis=2))
    upstream_packed_heads = tf.stack([upstream_packed, -upstream_packed], axis=1)
    upstream_padded_heads = heads_first(tf.stack([upstream_padded, 3 * upstream_padded], axis=2))
    scatter_heads = lambda x: heads_first(tf.scatter_nd(positions, x, (3, 4, 2, 5)))  # noqa: E731
    np.testing.assert_allclose(
        gradient(layout.expand_heads, packed_heads, upstream_padded_heads),
        gradient(scatter_heads, packed_heads, upstream_padded_heads), rtol=1e-6)
    pack_heads = lambda x: tf.gather_nd(heads_first(x), positions)  # noqa: E731
    np.testing.assert_allclose(
        gradient(layout.pack_heads, padded_heads, upstream_packed_heads),
        gradient(pack_heads, padded_heads, upstream_packed_heads), rtol=1e-6)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_layer_norm_matches_keras_layer_normalization_in_value_and_gradient(dtype):
    from keras_transformer.layers.layer_norm import LayerNormalization, layer_norm

    reference = keras.layers.LayerNormalization(epsilon=1e-6, dtype=dtype)
    x = tf.cast(rng.normal(size=(3, 4, 8)) * 3 + 1, dtype)
    reference.build(x.shape)
    reference.gamma.assign(rng.normal(size=8))
    reference.beta.assign(rng.normal(size=8))
    upstream = tf.cast(rng.normal(size=(3, 4, 8)), dtype)

    def value_and_gradients(normalize, layer=reference):
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = normalize(x)
            loss = tf.reduce_sum(tf.cast(y, "float32") * tf.cast(upstream, "float32"))
        return [np.asarray(tf.cast(t, "float32")) for t in
                [y, *tape.gradient(loss, [x, layer.gamma, layer.beta])]]

    ours = value_and_gradients(lambda v: layer_norm(v, reference.gamma, reference.beta, 1e-6))
    theirs = value_and_gradients(reference)
    layer = LayerNormalization(epsilon=1e-6, dtype=dtype)  # the layer form, same weights
    layer.build(x.shape)
    layer.set_weights(reference.get_weights())
    ours_as_layer = value_and_gradients(layer, layer)
    tolerance = 1e-5 if dtype == "float32" else 2e-2
    for a, b, c in zip(ours, theirs, ours_as_layer):
        np.testing.assert_allclose(a, b, rtol=tolerance, atol=tolerance * np.abs(b).max())
        np.testing.assert_array_equal(c, a)
