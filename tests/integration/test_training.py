"""A tiny model learns a handful of sentence pairs through Keras compile/fit/evaluate."""
import numpy as np
import pytest
import keras

import keras_transformer as kt
from keras_transformer.model import source_padding_mask
from helpers import PAIRS, fit_one_batch, pairs_batch

def greedy_by_full_recompute(model, source, max_len):
    """Reference greedy decoding: re-run the whole decoder for every new token."""
    encoder_output = model.encode(source)
    mask = source_padding_mask(source)
    output = np.full((source.shape[0], 1), kt.BOS_ID, "int32")
    for _ in range(max_len):
        logits = model.decode(output, encoder_output, mask)
        output = np.concatenate([output, np.argmax(logits[:, -1], -1)[:, None]], 1).astype("int32")
    return output[:, 1:]


def strip_eos(ids):
    ids = list(ids)
    return ids[:ids.index(kt.EOS_ID)] if kt.EOS_ID in ids else ids


@pytest.mark.slow
@pytest.mark.parametrize("precision", ["float32", "mixed_bfloat16"], indirect=True)
def test_tiny_model_overfits_through_fit(precision):
    keras.utils.set_random_seed(1)
    recipe = kt.Recipe.preset("tiny", vocab_size=20, dropout=0.0, label_smoothing=0.0,
                              warmup_steps=50, learning_rate_scale=0.5)
    (source, target_in), target_out = batch = pairs_batch()
    model = kt.Transformer(recipe.architecture)
    model.compile(optimizer=kt.make_optimizer(recipe.architecture.d_model, recipe.training),
                  loss=kt.LabelSmoothedCrossEntropy(recipe.training.label_smoothing),
                  metrics=[kt.MaskedTokenAccuracy(), kt.Perplexity()])
    history = fit_one_batch(model, batch, epochs=150)
    assert history["loss"][-1] < 0.05 < history["loss"][0]
    results = model.evaluate((source, target_in), target_out, verbose=0, return_dict=True)
    assert results["token_accuracy"] == 1.0 and results["perplexity"] < 1.1
    decoded = greedy_by_full_recompute(model, source, max_len=6)
    assert [strip_eos(row) for row in decoded] == [t for _, t in PAIRS]
