"""The HookDropout layer (with either implementation): Keras's contract, the configured rate,
independent masks."""
import keras
import numpy as np
import pytest
import tensorflow as tf

import keras_transformer  # noqa: F401  (selects the TensorFlow backend)
from keras_transformer import fast
from keras_transformer.layers import HookDropout

SHAPE = (300, 501)  # odd size: the last 32-bit random word gives one mask only


def effective_rate(rate: float) -> float:
    """The drop probability applied: fast kernels round the rate to a multiple of 2^-16."""
    return round(rate * 65536) / 65536 if fast.active() == "fast" else rate


def test_inference_and_zero_rate_are_the_identity(rng):
    x = tf.constant(rng.normal(size=SHAPE), tf.float32)
    np.testing.assert_array_equal(HookDropout(0.3)(x, training=False), x)
    np.testing.assert_array_equal(HookDropout(0.0)(x, training=True), x)


@pytest.mark.parametrize("rate", [0.1, 0.3, 0.5])
def test_drops_the_rate_and_keeps_the_expectation(rate):
    out = HookDropout(rate, seed=1)(tf.ones(SHAPE), training=True).numpy()
    dropped = out == 0
    effective = effective_rate(rate)
    sigma = (effective * (1 - effective) / out.size) ** 0.5
    assert abs(dropped.mean() - rate) < 4 * sigma
    np.testing.assert_allclose(out[~dropped], 1 / (1 - effective), rtol=1e-6)
    assert abs(out.mean() - 1.0) < 4 * sigma / (1 - effective)


def test_masks_are_independent_across_elements_and_calls():
    """The two masks of one 32-bit word, neighbours in a row, and successive calls are
    uncorrelated: both dropped about rate^2 of the time."""
    layer, rate = HookDropout(0.5, seed=2), 0.5
    first = layer(tf.ones(SHAPE), training=True).numpy() == 0
    second = layer(tf.ones(SHAPE), training=True).numpy() == 0
    flat = first.reshape(-1)
    pairs = {"same word": (flat[0:-1:2], flat[1::2]), "next word": (flat[1:-1:2], flat[2::2]),
             "next call": (first, second)}
    for name, (a, b) in pairs.items():
        sigma = (rate ** 2 * (1 - rate ** 2) / a.size) ** 0.5
        assert abs((a & b).mean() - rate ** 2) < 4 * sigma, name


def test_seeded_layers_repeat_and_the_gradient_follows_the_mask(rng):
    x = tf.constant(rng.normal(size=SHAPE), tf.float32)
    a, b = HookDropout(0.2, seed=7), HookDropout(0.2, seed=7)
    np.testing.assert_array_equal(a(x, training=True).numpy(), b(x, training=True).numpy())
    with tf.GradientTape() as tape:
        tape.watch(x)
        out = a(x, training=True)
        total = tf.reduce_sum(out)
    gradient = tape.gradient(total, x).numpy()
    kept = out.numpy() != 0
    np.testing.assert_allclose(gradient[kept], 1 / (1 - effective_rate(0.2)), rtol=1e-6)
    assert (gradient[~kept] == 0).all()


def test_bfloat16_xla_and_serialization():
    layer = HookDropout(0.1, seed=3, dtype="mixed_bfloat16")
    out = tf.function(lambda x: layer(x, training=True), jit_compile=True)(
        tf.ones(SHAPE, tf.bfloat16))
    assert out.dtype == tf.bfloat16
    assert 0.08 < float(tf.reduce_mean(tf.cast(out == 0, tf.float32))) < 0.12
    restored = keras.saving.deserialize_keras_object(keras.saving.serialize_keras_object(layer))
    assert type(restored) is HookDropout and restored.rate == 0.1
