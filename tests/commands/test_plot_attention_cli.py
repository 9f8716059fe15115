"""kt-plot-attention on a run directory: one PNG per attention kind and layer."""
import shutil

import pytest
import keras_transformer as kt
from keras_transformer.data.tokenizer import SubwordTokenizer
from keras_transformer.training.checkpoints import save_weights_atomic
from keras_transformer.training.run_dir import RunDir
from trainers import plot_attention


@pytest.mark.slow
def test_plots_the_models_own_translation_without_a_target(demo_vocab, tmp_path, capsys):
    vocab_size = SubwordTokenizer.load(demo_vocab).vocab_size
    recipe = kt.Recipe.preset("tiny", vocab_size=vocab_size, num_layers=1, max_length=24)
    run = RunDir(tmp_path / "run")
    run.write_json("config.json", recipe.to_dict())
    shutil.copytree(demo_vocab, run.vocab)
    save_weights_atomic(kt.Transformer(recipe.architecture), run.final_weights)
    out = tmp_path / "plots"
    assert plot_attention.main([str(run.root), "I have forty-two apples", "--out", str(out)]) == 0
    assert capsys.readouterr().out.startswith("target: ")
    pngs = sorted(path.name for path in out.glob("*.png"))
    assert len(pngs) == 3 and all(path.read_bytes()[:4] == b"\x89PNG" for path in out.iterdir())
