"""`kt.load_run`: a run directory's model (the weights the run chose), tokenizer and recipe."""
from pathlib import Path

import numpy as np
import pytest

import keras_transformer as kt
from helpers import random_run
from keras_transformer.data.tokenizer import SubwordTokenizer
from keras_transformer.training.checkpoints import load_weights_file, save_checkpoint
from keras_transformer.training.run_dir import RESULT_FILE, keep_better_of_average_and_final
from trainers.common import load_run_model


def weights_of(model: kt.Transformer) -> list[np.ndarray]:
    return [weight.numpy() for weight in model.weights]


@pytest.mark.parametrize("better", ["averaged", "final"])
def test_a_run_loads_with_the_weights_it_chose_its_tokenizer_and_recipe(demo_vocab, tmp_path,
                                                                       better):
    run = random_run(demo_vocab, tmp_path / "run")
    model = kt.Transformer(run.load_recipe().architecture)
    rng = np.random.default_rng(1)
    for step in (1, 2):  # two checkpoints, neither the final weights nor their average
        model.set_weights([rng.normal(size=weight.shape).astype("float32")
                           for weight in model.get_weights()])
        save_checkpoint(model, run.checkpoints, step, keep=5)
    load_weights_file(model, run.final_weights)
    # kt-train's choice: the average is kept only if it scores higher on dev than the final.
    dev_scores = iter([1.0, 2.0] if better == "averaged" else [2.0, 1.0])
    result = keep_better_of_average_and_final(model, run, 2, lambda: next(dev_scores))
    chosen = weights_of(model)

    loaded = kt.load_run(run.root)
    assert loaded.weights == Path(result["weights"]) == getattr(run, f"{better}_weights")
    assert RESULT_FILE in loaded.weights_reason and loaded.results["weights"] == \
        loaded.weights.name
    for got, want in zip(weights_of(loaded.model), chosen, strict=True):
        np.testing.assert_array_equal(got, want)
    assert loaded.recipe == run.load_recipe()
    vocabulary = SubwordTokenizer.load(demo_vocab)
    assert loaded.tokenizer.id_to_piece(range(vocabulary.vocab_size)) == \
        vocabulary.id_to_piece(range(vocabulary.vocab_size))
    # The command lines load the same model.
    for got, want in zip(weights_of(load_run_model(str(run.root))[0]), chosen, strict=True):
        np.testing.assert_array_equal(got, want)


def test_given_weights_load_and_the_translator_searches_with_the_recipes_settings(demo_vocab,
                                                                                 tmp_path):
    run = random_run(demo_vocab, tmp_path / "run", beam_size=2, max_decode_extra=4)
    model = kt.Transformer(run.load_recipe().architecture)
    model.set_weights([weight * 0.5 for weight in model.get_weights()])
    other = tmp_path / "other.weights.h5"
    model.save_weights(other)
    loaded = kt.load_run(run.root, weights=other)
    assert loaded.weights == other and loaded.weights_reason == "given"
    for got, want in zip(weights_of(loaded.model), weights_of(model), strict=True):
        np.testing.assert_array_equal(got, want)
    translator = loaded.translator()
    assert (translator.model, translator.tokenizer) == (loaded.model, loaded.tokenizer)
    assert translator.settings == loaded.recipe.search == kt.SearchSettings.of(
        kt.SearchSettings(), beam_size=2, max_decode_extra=4)
    assert loaded.translator(kt.SearchSettings(beam_size=1)).settings.beam_size == 1


def test_what_is_not_a_run_is_named(demo_vocab, tmp_path):
    with pytest.raises(FileNotFoundError, match="no such directory .*nowhere"):
        kt.load_run(tmp_path / "nowhere")
    with pytest.raises(FileNotFoundError, match="no config.json"):
        kt.load_run(tmp_path)
    run = random_run(demo_vocab, tmp_path / "run")
    with pytest.raises(FileNotFoundError, match="no such file .*missing.weights.h5"):
        kt.load_run(run.root, weights=tmp_path / "missing.weights.h5")
    run.write_json("config.json", kt.Recipe.preset("tiny", vocab_size=400).to_dict())
    with pytest.raises(ValueError, match="vocabulary has 500 ids, its config.json vocab_size=400"):
        kt.load_run(run.root)
