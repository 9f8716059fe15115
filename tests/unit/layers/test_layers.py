"""Each layer: the paper's formulas, masks, and get_config round trips."""
import math

import keras
import numpy as np
import pytest
import tensorflow as tf

import keras_transformer as kt
from keras_transformer.fast import IMPLEMENTATIONS, implementation_scope
from keras_transformer.layers import (DecoderLayer, EncoderLayer, LearnedPositionalEmbedding,
                                      MultiHeadAttention, PositionwiseFeedForward, ResidualNorm,
                                      ScaledEmbedding, SinusoidalPositionalEncoding,
                                      scaled_dot_product_attention)
from keras_transformer.layers.attention import (cache_index, history_slots, read_history,
                                                write_position)



# int8 quantization follows Keras's QuantizationConfig API, which older Keras releases lack.
QUANTIZATION_API = pytest.mark.skipif(
    not hasattr(keras.quantizers, "QuantizationConfig"),
    reason="this Keras has no keras.quantizers.QuantizationConfig")


def test_attention_probabilities_sum_to_one_and_ignore_padded_keys(rng):
    attention = MultiHeadAttention(num_heads=4, key_dim=8, value_dim=6)
    x = rng.normal(size=(2, 5, 16)).astype("float32")
    key_is_real = np.array([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]], dtype=bool)
    out, weights = attention(x, attention_mask=key_is_real[:, None, :],
                             return_attention=True)
    weights = np.asarray(weights)
    assert out.shape == (2, 5, 16) and weights.shape == (2, 4, 5, 5)
    np.testing.assert_allclose(weights.sum(-1), 1.0, rtol=1e-6)
    assert np.all(weights[0, :, :, 3:] == 0.0)


def test_attention_equals_scaled_dot_product_formula(rng):
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


def test_scaled_dot_product_attention_is_equation_one(rng):
    """softmax(Q K^T / sqrt(d_k)) V per head, masked keys out of the softmax, the scale applied
    inside (the caller passes the projections as they are)."""
    query, keys = rng.normal(size=(2, 3, 4, 8)), rng.normal(size=(2, 3, 5, 8))
    values = rng.normal(size=(2, 3, 5, 6))
    mask = rng.random(size=(2, 4, 5)) < 0.7
    mask[..., 0] = True  # every query sees a key
    context, weights = scaled_dot_product_attention(
        *(tf.constant(x, "float32") for x in (query, keys, values)), mask)
    scores = np.where(mask[:, None], query @ keys.swapaxes(-1, -2) / math.sqrt(8), -np.inf)
    expected = np.exp(scores - scores.max(-1, keepdims=True))
    expected /= expected.sum(-1, keepdims=True)
    np.testing.assert_allclose(weights, expected, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(context, expected @ values, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("static_shapes", [False, True])
def test_cached_steps_equal_causal_self_attention_and_do_not_leak_between_runs(rng, static_shapes):
    """One position a step through the layer's one `call`, the cache written in place (a
    graph) or by a scatter and read whole with the unwritten positions masked (static shapes,
    what XLA compiles)."""
    attention = MultiHeadAttention(num_heads=2, key_dim=3)
    attention(np.zeros((1, 1, 4), "float32"))
    rows, length = 3, 4
    ancestors = tf.tile(tf.range(rows)[:, None], [1, length])  # no hypothesis moves

    @tf.function  # In a graph: each run starts afresh.
    def one_position_a_step(queries):
        cache = attention.init_cache(rows, length, "float32", static_shapes)
        outputs = []
        for position in range(length):
            output, cache = attention(
                queries[:, position:position + 1], cache=cache,
                cache_index=cache_index(ancestors, position, 2, static_shapes))
            outputs.append(output)
        return tf.concat(outputs, axis=1)

    for _ in range(2):
        queries = rng.normal(size=(rows, length, 4)).astype("float32")
        causal = attention(queries, attention_mask=np.tril(np.ones((1, length, length), bool)))
        np.testing.assert_allclose(one_position_a_step(queries), causal, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("static_shapes", [False, True])
def test_caches_never_reordered_give_each_hypothesis_its_history(rng, static_shapes):
    """Five steps of a beam search over 4 rows, each step's hypotheses extending random
    parents, the caches written at each position and only the ancestors reordered: each row
    reads, at positions 0 .. step, what its line of ancestors wrote."""
    rows, heads, cache_length, dim = 4, 2, 5, 3
    updates = rng.normal(size=(cache_length, rows, heads * dim)).astype("float32")
    parents = rng.integers(0, rows, size=(cache_length, rows)).astype("int32")
    attention = MultiHeadAttention(num_heads=heads, key_dim=dim)

    @tf.function
    def search():
        buffer = attention.init_cache(rows, cache_length, "float32", static_shapes).key
        ancestors = tf.tile(tf.range(rows)[:, None], [1, cache_length])
        seen = []
        for step in range(cache_length):
            if step:
                ancestors = tf.gather(ancestors, parents[step])
            ancestors = tf.where(tf.range(cache_length) == step, tf.range(rows)[:, None], ancestors)
            buffer = write_position(buffer, updates[step], tf.constant(step),
                                    in_place=not static_shapes)
            seen.append(read_history(buffer, history_slots(ancestors, step + 1, heads)))
        return seen

    histories = [[] for _ in range(rows)]
    for step, visible in enumerate(search()):
        if step:
            histories = [histories[parent] for parent in parents[step]]
        histories = [history + [updates[step, row].reshape(heads, dim)]
                     for row, history in enumerate(histories)]
        np.testing.assert_array_equal(visible, np.stack(histories).transpose(0, 2, 1, 3))


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
    layer = SinusoidalPositionalEncoding()
    layer.build((None, None, 16))
    at_positions = layer.at(positions)
    np.testing.assert_allclose(at_positions, encoding[positions], atol=1e-5)


def test_learned_positions_index_their_table():
    layer = LearnedPositionalEmbedding(max_length=10)
    out = layer(np.zeros((2, 4, 8), "float32"), start_index=3)
    np.testing.assert_allclose(out, np.asarray(layer.table)[3:7])
    positions = np.array([9, 0, 0, 4])
    np.testing.assert_allclose(layer.at(positions), np.asarray(layer.table)[positions])


def test_fairseq_sinusoids_follow_their_formula_from_the_offset():
    """The sinusoids of fairseq's `SinusoidalPositionalEmbedding` (M2M-100, NLLB): row r holds
    sin(r w_j) in its first d/2 dimensions and cos(r w_j) in the rest, w_j =
    10000^(-j/(d/2 - 1)); a sequence's first token is row padding_idx + 1 = 2."""
    d, half = 16, 8
    rows = np.arange(2, 2 + 30)[:, None] * np.exp(-np.arange(half) * math.log(10000) /
                                                 (half - 1))[None, :]
    expected = np.concatenate([np.sin(rows), np.cos(rows)], axis=-1)
    layer = SinusoidalPositionalEncoding("fairseq", offset=2)
    np.testing.assert_allclose(layer(np.zeros((1, 30, d), "float32")), expected, atol=1e-5)
    np.testing.assert_allclose(layer(np.zeros((1, 3, d), "float32"), start_index=7),
                               expected[7:10], atol=1e-5)
    positions = np.array([3, 0, 29, 3])
    np.testing.assert_allclose(layer.at(positions), expected[positions], atol=1e-5)
    paper = SinusoidalPositionalEncoding("halves")(np.zeros((1, 30, d), "float32"))
    assert np.abs(np.asarray(paper)[2:] - expected[:-2]).max() > 0.1  # another frequency


def test_learned_positions_start_at_the_offset():
    layer = LearnedPositionalEmbedding(max_length=10, offset=2)
    out = layer(np.zeros((2, 4, 8), "float32"), start_index=3)
    assert layer.table.shape == (12, 8)
    np.testing.assert_allclose(out, np.asarray(layer.table)[5:9])
    np.testing.assert_allclose(layer.at(np.array([9, 0])), np.asarray(layer.table)[[11, 2]])


def test_embedding_is_scaled_and_tied():
    layer = ScaledEmbedding(vocab_size=11, d_model=16)
    ids = np.array([[4, 5, 0]], "int32")
    vectors = np.asarray(layer(ids))
    table = np.asarray(layer.embeddings)
    np.testing.assert_allclose(vectors[0, 0], table[4] * 4.0, rtol=1e-6)


def test_feed_forward_is_relu_between_two_linear_maps(rng):
    ffn = PositionwiseFeedForward(d_ff=32)
    x = rng.normal(size=(2, 3, 8)).astype("float32")
    out = np.asarray(ffn(x))
    inner = np.maximum(0, x @ np.asarray(ffn.inner.kernel) + np.asarray(ffn.inner.bias))
    np.testing.assert_allclose(out, inner @ np.asarray(ffn.outer.kernel)
                               + np.asarray(ffn.outer.bias), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("activation, formula", [
    ("swish", lambda x: x / (1 + np.exp(-x))),
    ("gelu", lambda x: x * 0.5 * (1 + np.vectorize(math.erf)(x / math.sqrt(2)))),
    ("gelu_sigmoid", lambda x: x / (1 + np.exp(-1.702 * x)))])
def test_feed_forward_activations_follow_their_formulas(rng, activation, formula):
    ffn = PositionwiseFeedForward(d_ff=32, activation=activation)
    x = rng.normal(size=(2, 3, 8)).astype("float32")
    output = np.asarray(ffn(x))
    inner = formula(x @ np.asarray(ffn.inner.kernel) + np.asarray(ffn.inner.bias))
    np.testing.assert_allclose(output, inner @ np.asarray(ffn.outer.kernel)
                               + np.asarray(ffn.outer.bias), rtol=1e-5, atol=1e-5)


def test_sinusoid_halves_hold_the_interleaved_sines_then_cosines():
    x = np.zeros((1, 7, 16), "float32")
    interleaved = np.asarray(SinusoidalPositionalEncoding()(x))
    halves = np.asarray(SinusoidalPositionalEncoding("halves")(x))
    np.testing.assert_array_equal(halves, np.concatenate(
        [interleaved[:, 0::2], interleaved[:, 1::2]], axis=-1))
    assert not np.array_equal(halves, interleaved)


def test_post_norm_and_pre_norm_residuals(rng):
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


X = np.random.default_rng(0).normal(size=(2, 5, 8)).astype("float32")


def built(layer, *shapes):
    """`layer`, built for inputs of `shapes` first if it is not (a call on a method other
    than `call` does not build it)."""
    if not layer.built:
        layer.build(*shapes)
    return layer


IDS = np.array([[4, 5, 0], [7, 2, 9]], "int32")
# Each layer with settings other than its defaults, and a call on inputs.
LAYERS = [
    (lambda: MultiHeadAttention(num_heads=2, key_dim=4, value_dim=3, dropout=0.1,
                                attention_bias=False),
     {"num_heads": 2, "key_dim": 4, "value_dim": 3, "dropout": 0.1, "attention_bias": False},
     lambda layer: layer(X)),
    (lambda: PositionwiseFeedForward(d_ff=16, activation="swish"),
     {"d_ff": 16, "activation": "swish"}, lambda layer: layer(X)),
    (lambda: ResidualNorm("pre", 0.1, layer_norm_epsilon=1e-5),
     {"norm": "pre", "dropout": 0.1, "layer_norm_epsilon": 1e-5},
     lambda layer: built(layer, X.shape)(X, layer.normalize_input(X))),
    (lambda: EncoderLayer(2, 4, 4, 16, dropout=0.1, norm="pre", layer_norm_epsilon=1e-5,
                          activation="gelu"),
     {"d_ff": 16, "dropout": 0.1, "norm": "pre", "layer_norm_epsilon": 1e-5,
      "activation": "gelu"}, lambda layer: layer(X)),
    (lambda: DecoderLayer(2, 4, 4, 16, dropout=0.2, attention_bias=False),
     {"dropout": 0.2, "attention_bias": False},
     lambda layer: built(layer, X.shape, X.shape)(X, X)),
    (lambda: ScaledEmbedding(11, 8), {"vocab_size": 11, "d_model": 8}, lambda layer: layer(IDS)),
    (lambda: SinusoidalPositionalEncoding("fairseq", offset=2),
     {"layout": "fairseq", "offset": 2}, lambda layer: layer(X)),
    (lambda: LearnedPositionalEmbedding(12, offset=2), {"max_length": 12, "offset": 2},
     lambda layer: layer(X)),
]


@pytest.mark.parametrize("make, settings, run", LAYERS)
def test_get_config_round_trip(make, settings, run):
    """The clone keeps every setting given (none falls back to its default) and, with the
    same weights, computes the same outputs; Keras's serialization restores the class."""
    layer = make()
    clone = layer.__class__.from_config(layer.get_config())
    assert {key: clone.get_config()[key] for key in settings} == settings
    run(layer), run(clone)
    clone.set_weights(layer.get_weights())
    np.testing.assert_allclose(run(clone), run(layer), rtol=1e-6)
    restored = keras.saving.deserialize_keras_object(keras.saving.serialize_keras_object(layer))
    assert type(restored) is type(layer)


def test_blocks_take_the_configs_names_and_load_their_older_name():
    """The model passes its config's fields to the blocks by name, as they are; a block saved
    when its norm's epsilon was `epsilon` loads with that epsilon."""
    config = kt.TransformerConfig(vocab_size=20, d_model=8, d_ff=16, num_layers=1, num_heads=2,
                                  layer_norm_epsilon=1e-5, attention_bias=True)
    model = kt.Transformer(config)
    layer_config = model.encoder_layers[0].get_config()
    assert {field: layer_config[field] for field in EncoderLayer.FIELDS} == {
        field: getattr(config, field) for field in EncoderLayer.FIELDS}
    older = {key: value for key, value in layer_config.items() if key != "layer_norm_epsilon"}
    restored = EncoderLayer.from_config({**older, "epsilon": 1e-5})
    assert restored.self_residual.layer_norm.epsilon == 1e-5


def test_sub_layers_saved_under_keras_names_load_with_the_same_outputs():
    """`MultiHeadAttention`'s `attention_bias` and `ResidualNorm`'s `layer_norm_epsilon` were
    saved as Keras's `use_bias` and `epsilon`: such configs load the same layers."""
    for layer, renamed, run in (
            (MultiHeadAttention(2, 4, attention_bias=False), ("attention_bias", "use_bias"),
             lambda layer: layer(X)),
            (ResidualNorm("pre", 0.0, layer_norm_epsilon=1e-3),
             ("layer_norm_epsilon", "epsilon"),
             lambda layer: built(layer, X.shape)(X, layer.normalize_input(X)))):
        config = layer.get_config()
        new, old = renamed
        config[old] = config.pop(new)
        restored = layer.__class__.from_config(config)
        assert restored.get_config() == layer.get_config()
        run(layer), run(restored)
        restored.set_weights(layer.get_weights())
        np.testing.assert_array_equal(run(restored), run(layer))


def test_a_large_embedding_is_saved_a_block_of_rows_at_a_time(tmp_path, monkeypatch):
    """A table larger than `ROW_BLOCK_BYTES` reaches the weights file in row blocks (each a
    gather, none a copy of the whole table), also after a partial assignment (TensorFlow's
    copy-on-read mode); the file and a `.keras` file read back every weight exactly."""
    from keras_transformer.layers import embedding

    model = kt.Transformer(kt.TransformerConfig.preset("tiny", vocab_size=60))
    table = model.source_embedding.embeddings
    table.value[10:12].assign(np.ones([2, table.shape[1]], "float32"))
    monkeypatch.setattr(embedding, "ROW_BLOCK_BYTES", 7 * 4 * table.shape[1])
    gathers = []
    real_gather = tf.gather
    monkeypatch.setattr(tf, "gather", lambda *args, **kwargs: gathers.append(
        args[1]) or real_gather(*args, **kwargs))
    model.save_weights(tmp_path / "model.weights.h5")
    monkeypatch.setattr(tf, "gather", real_gather)
    assert [len(rows) for rows in gathers] == [7] * 8 + [4]  # 60 rows, 7 at a time
    for path, load in ((tmp_path / "model.weights.h5", None),
                       (tmp_path / "model.keras", keras.saving.load_model)):
        if load is None:
            restored = kt.Transformer(model.config)
            restored.load_weights(path)
        else:
            model.save(path)
            restored = load(path)
        for ours, theirs in zip(restored.weights, model.weights):
            np.testing.assert_array_equal(ours.numpy(), theirs.numpy(), err_msg=ours.path)


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


def test_heads_dense_rejects_unknown_activation():
    from keras_transformer.layers import HeadsDense

    with pytest.raises(ValueError, match="activation"):
        HeadsDense((4,), activation="tanh")


HEADS_DENSE_SHAPES = [((2, 5, 12), (3, 4), 1), ((2, 5, 3, 4), (12,), 2)]


def lora_heads_dense(input_shape, output_dims, input_rank, activation=None):
    """A built `HeadsDense` with LoRA adapters (rank 2, alpha 6: scale 3), every weight drawn
    from a seeded generator, and its inputs."""
    from keras_transformer.layers import HeadsDense

    draws = np.random.default_rng(input_rank)
    layer = HeadsDense(output_dims, input_rank=input_rank, activation=activation)
    layer.build(input_shape)
    layer.enable_lora(2, lora_alpha=6)
    for weight in layer.weights:
        weight.assign(draws.normal(scale=0.3 if weight.name == "kernel" else 1.0,
                                   size=weight.shape))
    return layer, draws.normal(size=input_shape).astype("float32")


@pytest.mark.parametrize("input_shape, output_dims, input_rank", HEADS_DENSE_SHAPES)
def test_heads_dense_lora_adds_the_adapters_product_to_the_flat_kernel(input_shape, output_dims,
                                                                       input_rank):
    layer, inputs = lora_heads_dense(input_shape, output_dims, input_rank)
    in_size, out_size = math.prod(input_shape[-input_rank:]), math.prod(output_dims)
    assert layer.lora_kernel_a.shape == (in_size, 2) and layer.lora_kernel_b.shape == (2, out_size)
    base = next(weight for weight in layer.weights if weight.name == "kernel").numpy()
    expected_kernel = base.reshape(in_size, out_size) + 3 * (
        layer.lora_kernel_a.numpy() @ layer.lora_kernel_b.numpy())
    np.testing.assert_allclose(layer.matrix("float32")[0], expected_kernel, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(layer.kernel, expected_kernel.reshape(base.shape), rtol=1e-6,
                               atol=1e-6)
    rows = inputs.reshape(-1, in_size)
    expected = (rows @ expected_kernel).reshape(*input_shape[:-input_rank], *output_dims)
    np.testing.assert_allclose(layer(inputs), expected + layer.bias.numpy(), rtol=1e-5, atol=1e-5)
    # The kernel is frozen; the bias stays trainable, as in Keras's Dense.
    assert [weight.name for weight in layer.trainable_weights] == [
        "bias", "lora_kernel_a", "lora_kernel_b"]


@pytest.mark.parametrize("implementation", IMPLEMENTATIONS)
@pytest.mark.parametrize("activation", [None, "relu"])
def test_heads_dense_lora_gradients_are_the_formula_s(implementation, activation):
    """Through either implementation's `linear` (ReLU fused or not), the adapters' gradients are
    those of `f(x (K + s A B) + b)` written out."""
    layer, inputs = lora_heads_dense((2, 5, 3, 4), (6,), 2, activation)
    base = tf.reshape(next(weight for weight in layer.weights if weight.name == "kernel"),
                      (12, 6))
    upstream = tf.constant(np.random.default_rng(5).normal(size=(2, 5, 6)), tf.float32)

    def formula(a, b):
        outputs = tf.reshape(inputs, (10, 12)) @ (base + 3.0 * a @ b) + layer.bias
        return tf.reshape(tf.nn.relu(outputs) if activation else outputs, (2, 5, 6))

    adapters = [layer.lora_kernel_a, layer.lora_kernel_b]
    with implementation_scope(implementation), tf.GradientTape(persistent=True) as tape:
        ours, expected = layer(inputs), formula(*adapters)
    np.testing.assert_allclose(ours, expected, rtol=1e-5, atol=1e-5)
    for got, want in zip(tape.gradient(ours, adapters, output_gradients=upstream),
                         tape.gradient(expected, adapters, output_gradients=upstream)):
        assert np.abs(np.asarray(want)).max() > 0
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def test_heads_dense_get_config_round_trip_with_lora_rank():
    """`lora_rank`/`lora_alpha` in the config rebuild the adapters; the weights a layer saves
    (`save_own_variables`) are kernel, bias, then the adapters, and load back."""
    from keras_transformer.layers import HeadsDense

    layer, inputs = lora_heads_dense((2, 5, 12), (3, 4), 1)
    config = layer.get_config()
    assert (config["lora_rank"], config["lora_alpha"]) == (2, 6)
    clone = HeadsDense.from_config(config)
    clone.build(inputs.shape)
    assert clone.get_config() == config and clone.lora_enabled
    store = {}
    layer.save_own_variables(store)
    assert [store[key].shape for key in sorted(store)] == [(12, 3, 4), (3, 4), (12, 2), (2, 12)]
    clone.load_own_variables(store)
    np.testing.assert_array_equal(clone(inputs), layer(inputs))
    assert "lora_rank" not in HeadsDense((4,)).get_config()


def test_heads_dense_lora_refusals():
    from keras_transformer.layers import HeadsDense

    layer = HeadsDense((4,))
    with pytest.raises(ValueError, match="not built"):
        layer.enable_lora(2)
    layer.build((None, 8))
    with pytest.raises(ValueError, match="rank: must be a positive integer, got 0"):
        layer.enable_lora(0)
    layer.enable_lora(2)
    with pytest.raises(ValueError, match="already enabled"):
        layer.enable_lora(2)
    plain = HeadsDense((4,))
    plain.build((None, 8))
    store = {}
    layer.save_own_variables(store)
    with pytest.raises(ValueError, match="holds 4 variables, this layer has 2 .kernel, bias."):
        plain.load_own_variables(store)


@QUANTIZATION_API
@pytest.mark.parametrize("input_shape, output_dims, input_rank", HEADS_DENSE_SHAPES)
def test_heads_dense_int8_is_the_float_layer_to_rounding_and_reloads(input_shape, output_dims,
                                                                      input_rank):
    """`quantize("int8")`: int8 kernel, a scale per output, outputs within int8 rounding; the
    config (dtype policy `int8_from_float32`) rebuilds an int8 layer that loads the saved
    state; weight-only quantization (no activation quantizer) multiplies the float rows by
    the dequantized kernel."""
    from keras_transformer.layers import HeadsDense

    layer, inputs = lora_heads_dense(input_shape, output_dims, input_rank)
    float_weights = [np.asarray(layer.kernel), layer.bias.numpy()]  # random, as trained
    plain = HeadsDense(output_dims, input_rank=input_rank)
    plain.build(input_shape)
    plain.set_weights(float_weights)
    float_outputs = np.asarray(plain(inputs))
    plain.quantize("int8")
    assert plain.dtype_policy.name == "int8_from_float32"
    assert {weight.name: weight.dtype for weight in plain.weights} == {
        "kernel": "int8", "bias": "float32", "kernel_scale": "float32"}
    assert plain.kernel_scale.shape == output_dims
    outputs = np.asarray(plain(inputs))
    error = np.abs(outputs - float_outputs).max()
    assert 0 < error < 0.02 * np.abs(float_outputs).max()
    clone = HeadsDense.from_config(plain.get_config())
    clone.build(input_shape)
    store = {}
    plain.save_own_variables(store)
    clone.load_own_variables(store)
    np.testing.assert_array_equal(clone(inputs), outputs)

    weights_only = HeadsDense(output_dims, input_rank=input_rank)
    weights_only.build(input_shape)
    weights_only.set_weights(float_weights)
    weights_only.quantize("int8", config=keras.quantizers.Int8QuantizationConfig(
        activation_quantizer=None))
    rows = inputs.reshape(-1, math.prod(input_shape[-input_rank:]))
    expected = rows @ np.asarray(weights_only.matrix("float32")[0]) + float_weights[1].reshape(-1)
    # float32 products summed in another order (oneDNN's blocking): rounding only.
    np.testing.assert_allclose(np.asarray(weights_only(inputs)).reshape(expected.shape),
                               expected, rtol=1e-4, atol=1e-4)
    assert HeadsDense.from_config(weights_only.get_config()).quantization_config.get_config() == (
        weights_only.quantization_config.get_config())


@QUANTIZATION_API
def test_heads_dense_quantizes_to_int8_only():
    from keras_transformer.layers import HeadsDense

    layer = HeadsDense((4,))
    layer.build((None, 8))
    for mode in ("int4", "float8"):
        with pytest.raises(NotImplementedError, match="supports the modes .'int8',."):
            layer.quantize(mode)
    layer.enable_lora(2)
    with pytest.raises(ValueError, match="LoRA is enabled"):
        layer.quantize("int8")
