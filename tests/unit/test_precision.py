"""Dtype policies: choosing one, and the model and its training under mixed precision."""
import math

import numpy as np
import pytest

import keras_transformer as kt
import keras
from keras_transformer.precision import (precision_scope, serving_copy,
                                                  resolve_precision)
from keras_transformer.training.run import compiled_model
from helpers import VARIANTS, assert_equal_to_rounding, random_ids, tiny_model
from helpers import fit_one_batch, pairs_batch

BFLOAT16 = pytest.mark.parametrize("precision", ["mixed_bfloat16"], indirect=True)


def assert_close_to_rounding(actual, expected):
    assert_equal_to_rounding(actual, expected, "mixed_bfloat16")


def test_unknown_policy_is_named():
    with pytest.raises(ValueError, match=r"'float64' is not one of auto, float32, "
                                         r"mixed_bfloat16, mixed_float16"):
        resolve_precision("float64")


def test_precision_scope_restores_the_policy():
    with pytest.raises(RuntimeError), precision_scope("mixed_float16") as policy:
        assert policy == keras.config.dtype_policy().name == "mixed_float16"
        raise RuntimeError
    assert keras.config.dtype_policy().name == "float32"


@BFLOAT16
def test_variables_stay_float32_and_logits_are_float32(rng, precision):
    model = tiny_model()
    assert model.compute_dtype == "bfloat16"
    assert {variable.dtype for variable in model.weights} == {"float32"}
    assert model((random_ids(rng, (2, 5)), random_ids(rng, (2, 4)))).dtype == "float32"


@BFLOAT16
@pytest.mark.parametrize("variant", VARIANTS)
def test_float32_serving_copy_has_the_weights_and_close_logits(rng, precision, variant):
    model = tiny_model(**VARIANTS[variant])
    copy = serving_copy(model)
    assert copy.compute_dtype == "float32" and keras.config.dtype_policy().name == precision
    for ours, theirs in zip(model.get_weights(), copy.get_weights(), strict=True):
        np.testing.assert_array_equal(ours, theirs)
    inputs = (random_ids(rng, (2, 7)), random_ids(rng, (2, 5)))
    assert_close_to_rounding(np.asarray(model(inputs)), np.asarray(copy(inputs)))


@pytest.mark.slow
@pytest.mark.parametrize("precision", ["mixed_bfloat16", "mixed_float16"], indirect=True)
def test_compiled_model_trains(precision):
    keras.utils.set_random_seed(1)
    recipe = kt.Recipe.preset("tiny", vocab_size=20, dropout=0.0, label_smoothing=0.0,
                              warmup_steps=50, learning_rate_scale=0.5)
    model, _ = compiled_model(recipe)
    assert isinstance(model.optimizer, keras.optimizers.LossScaleOptimizer) == (
        precision == "mixed_float16")
    losses = fit_one_batch(model, pairs_batch(), epochs=30)["loss"]
    assert all(map(math.isfinite, losses)) and losses[-1] < losses[0] / 2
