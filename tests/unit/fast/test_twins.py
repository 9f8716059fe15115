"""The hooks: each fast twin (`keras_transformer.fast`) against the core's reference
(value and gradient), the references against plain formulas, the selection switch, and the
boundary between the core and the fast subpackage."""
import keras
import numpy as np
import pytest
import tensorflow as tf

from keras_transformer import fast, hooks
from keras_transformer.fast import loss, twins
from keras_transformer.fast.loss import factor_logits
from keras_transformer.fast.packed import TokenLayout
from keras_transformer.layers.layout import PADDED
from keras_transformer.layers.dense import linear
from keras_transformer.layers.residual import dropout, layer_norm
from keras_transformer.losses import smoothed_cross_entropy
from keras_transformer.metrics import log_normalizer, predicted_ids
from keras_transformer.optimization import adam

IMPLEMENTATIONS = ["fast", "reference"]


@pytest.mark.parametrize("in_size, out_size", [(6, 6), (4, 10), (10, 4)])
@pytest.mark.parametrize("with_bias, relu", [(True, True), (True, False), (False, False)])
@pytest.mark.parametrize("graph", [False, True])
@pytest.mark.parametrize("dtype, tolerance", [("float32", 1e-5), ("bfloat16", 2e-2)])
def test_fast_linear_values_and_gradients_equal_autodiff(in_size, out_size, with_bias, relu,
                                                         graph, dtype, tolerance):
    """Both kernels against `rows @ kernel + bias`: every layout branch of the fast kernel's
    written-out gradient (square, wide, tall kernels; float32's
    layouts and bfloat16's), eager and in a tf.function (where the graph optimizer rewrites
    transposes)."""
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

    expected = values_and_gradients(reference)
    for implementation in (twins.linear, linear.reference):
        ours = values_and_gradients(lambda r, k, b: implementation(r, k, b, relu=relu))
        assert len(ours) == len(expected) == 3 + with_bias
        for got, want in zip(ours, expected):
            assert got.dtype == want.dtype == dtype
            np.testing.assert_allclose(tf.cast(got, "float32"), tf.cast(want, "float32"),
                                       rtol=tolerance, atol=tolerance)



def test_token_layout_packs_real_tokens_in_row_major_order_and_unpacks_with_zeros(rng):
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


def test_token_layout_moves_have_exact_gradients(rng):
    """Pack's and unpack's gradients are those of autodiff (a scatter / gather); expand_heads's
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


@pytest.mark.parametrize("implementation", IMPLEMENTATIONS)
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_layer_norm_matches_keras_layer_normalization_in_value_and_gradient(rng, implementation,
                                                                            dtype):
    """Both kernels, as functions and through the package's layer."""
    from keras_transformer.layers import LayerNorm

    function = twins.layer_norm if implementation == "fast" else layer_norm.reference
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

    ours = value_and_gradients(lambda v: function(v, reference.gamma, reference.beta, 1e-6))
    theirs = value_and_gradients(reference)
    layer = LayerNorm(epsilon=1e-6, dtype=dtype)  # the layer form, same weights
    layer.build(x.shape)
    layer.set_weights(reference.get_weights())
    with fast.implementation_scope(implementation):
        ours_as_layer = value_and_gradients(layer, layer)
    tolerance = 1e-5 if dtype == "float32" else 2e-2
    for a, b, c in zip(ours, theirs, ours_as_layer):
        np.testing.assert_allclose(a, b, rtol=tolerance, atol=tolerance * np.abs(b).max())
        np.testing.assert_array_equal(c, a)


def test_padded_layout_is_the_token_layout_with_padding_kept(rng):
    ids = np.array([[5, 6, 0], [7, 8, 9]], "int32")
    values = tf.constant(rng.normal(size=(2, 3, 2, 4)), "float32")  # [batch, len, heads, dim]
    packed = TokenLayout(ids)
    real = ids != 0
    heads_first = PADDED.expand_heads(values)
    np.testing.assert_array_equal(heads_first, np.transpose(values, (0, 2, 1, 3)))
    np.testing.assert_array_equal(PADDED.pack_heads(heads_first), values)
    np.testing.assert_array_equal(
        np.transpose(heads_first, (0, 2, 1, 3))[real],
        np.transpose(packed.expand_heads(packed.pack(values)), (0, 2, 1, 3))[real])
    positions = np.argwhere(real)
    np.testing.assert_array_equal(packed.select(packed.pack(values), positions),
                                  np.asarray(values)[real])
    assert PADDED.pack(values) is values and PADDED.token_positions is None


@pytest.mark.parametrize("implementation", IMPLEMENTATIONS)
def test_dropout_drops_the_rate_keeps_the_expectation_and_routes_the_gradient(implementation):
    function = twins.dropout if implementation == "fast" else dropout.reference
    x = tf.ones((400, 250))
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = function(x, 0.3, tf.constant([1, 0], tf.int32))
    gradient = tape.gradient(y, x, output_gradients=tf.fill(x.shape, 2.0)).numpy()
    kept = y.numpy() != 0
    assert abs(1 - kept.mean() - 0.3) < 0.01
    np.testing.assert_allclose(y.numpy()[kept], 1 / 0.7, rtol=1e-3)
    np.testing.assert_allclose(gradient, 2 * y.numpy())


def test_shared_logit_statistics_agree_with_the_metrics_kernels(rng):
    logits = tf.constant(rng.normal(size=(4, 3, 50)) * 20, "float32")
    statistics = tf.function(loss.logit_statistics)(logits)
    np.testing.assert_allclose(statistics.log_normalizer, log_normalizer.reference(logits),
                               rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(statistics.predictions, predicted_ids.reference(logits))
    np.testing.assert_allclose(statistics.probabilities, tf.nn.softmax(logits), atol=1e-6)


@pytest.mark.parametrize("eps", [0.0, 0.1])
def test_smoothed_cross_entropy_kernels_agree_in_value_and_gradient(rng, eps):
    logits = tf.constant(rng.normal(size=(5, 3, 40)) * 3, "float32")
    labels = tf.constant(rng.integers(0, 40, size=(5, 3)), "int32")
    upstream = tf.constant(rng.random(size=(5, 3)), "float32")

    def value_and_gradient(implementation):
        with tf.GradientTape() as tape:
            tape.watch(logits)
            value = implementation(labels, logits, eps)
        return value, tape.gradient(value, logits, output_gradients=upstream)

    ours, reference = (value_and_gradient(loss.smoothed_cross_entropy),
                       value_and_gradient(smoothed_cross_entropy.reference))
    for got, want in zip(ours, reference):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    probabilities = tf.nn.softmax(logits)  # the gradient's closed form, softmax - q
    targets = (1 - eps) * tf.one_hot(labels, 40) + eps / 40
    np.testing.assert_allclose(reference[1], (probabilities - targets) * upstream[..., None],
                               rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("transposed", [True, False])
@pytest.mark.parametrize("dtype, tolerance", [("float32", 1e-5), ("bfloat16", 3e-2)])
def test_cross_entropy_through_factors_agrees_with_the_reference(rng, transposed, dtype, tolerance):
    hidden = tf.constant(rng.normal(size=(12, 8)), dtype)
    kernel = tf.constant(rng.normal(size=(30, 8) if transposed else (8, 30)), dtype)
    labels = tf.constant(rng.integers(0, 30, size=12), "int32")
    upstream = tf.constant(rng.random(size=12), "float32")

    @tf.function
    def value_and_gradients(implementation):
        with tf.GradientTape() as tape:
            tape.watch([hidden, kernel])
            value = implementation(labels, factor_logits(hidden, kernel, transposed), 0.1)
        return [value, *tape.gradient(value, [hidden, kernel], output_gradients=upstream)]

    ours = value_and_gradients(loss.smoothed_cross_entropy_through_factors)
    reference = value_and_gradients(
        lambda labels, factors, eps: smoothed_cross_entropy.reference(labels, factors.logits, eps))
    for got, want in zip(ours, reference):
        want = np.asarray(tf.cast(want, "float32"))
        np.testing.assert_allclose(tf.cast(got, "float32"), want, rtol=tolerance,
                                   atol=tolerance * np.abs(want).max())


def test_selection_switches_validates_and_restores(monkeypatch):
    before = fast.active()
    for name in IMPLEMENTATIONS:
        with fast.implementation_scope(name):
            assert fast.active() == name
            assert set(hooks.installed()) == (set(hooks.REFERENCES) if name == "fast" else set())
            assert type(adam(learning_rate=1e-3)).__name__ == (
                "FusedAdam" if name == "fast" else "Adam")
        assert fast.active() == before
    with pytest.raises(ValueError, match="kernels: 'quick' is not one of auto, fast, reference"):
        fast.set_implementation("quick")
    with pytest.raises(ValueError, match="no hook named quick"):
        hooks.install({"quick": len})
    monkeypatch.setenv("KT_KERNELS", "quick")
    monkeypatch.setattr(fast.selection, "_active", None)
    with pytest.raises(ValueError, match="KT_KERNELS: 'quick'"):
        fast.active()
    monkeypatch.setenv("KT_KERNELS", "reference")
    assert fast.active() == "reference" and hooks.installed() == {}
    fast.set_implementation(before)


def test_the_speed_tricks_live_in_the_fast_subpackage_only():
    """Custom gradients, raw ops and private Keras/TensorFlow APIs appear in
    `keras_transformer/fast/` only, and the private APIs in `keras_transformer/compat.py`, which
    the fast subpackage imports (private imports and attributes are checked in
    tests/project/test_architecture.py); the export may leave gradients out
    (`SaveOptions.experimental_custom_gradients`). The core's decoding cache uses the two raw ops
    public TensorFlow has for writing a buffer in place, `tf.raw_ops.Empty` and
    `tf.raw_ops.InplaceUpdate`, and no other."""
    import re
    from pathlib import Path

    package = Path(hooks.__file__).parent
    pattern = re.compile(r"(?<!experimental_)custom_gradient|raw_ops(?!\.(Empty|InplaceUpdate)\()|"
                         r"tensorflow\.python|keras\.src|_backend_update_step|_symbolic_build|"
                         r"_loss_tracker")
    outside = [path for path in package.rglob("*.py")
               if "fast" not in path.relative_to(package).parts and path.name != "compat.py"]
    offenders = [str(path.relative_to(package)) for path in outside
                 if pattern.search(path.read_text(encoding="utf-8"))]
    assert len(outside) > 40 and offenders == []
