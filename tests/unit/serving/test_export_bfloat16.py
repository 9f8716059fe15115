"""bfloat16 exports: stored and computed in bfloat16, the same outputs as in process, chosen by
measurement with `--precision auto`."""
import os

import numpy as np
import pytest
import tensorflow as tf

import keras_transformer as kt
from keras_transformer.data.tokenizer import SubwordTokenizer
from keras_transformer.decoding.translator import TranslationModule
from keras_transformer.serving.export import export_translator
from keras_transformer.training.probes import ProbeResult
from keras_transformer.precision import serving_copy
from trainers import export as export_cli

SETTINGS = kt.SearchSettings(beam_size=2, max_decode_extra=4)
TEXTS = ["I have forty-two apples", "She sees three dogs", ""]


@pytest.fixture(scope="module")
def model_and_tokenizer(demo_vocab):
    tokenizer = SubwordTokenizer.load(demo_vocab)
    return kt.Transformer(kt.TransformerConfig.preset(
        "tiny", vocab_size=tokenizer.vocab_size, max_length=24)), tokenizer


def stored_dtypes(export: str) -> set:
    """The dtypes of the tensors an export's checkpoint holds (its graph's bookkeeping aside)."""
    reader = tf.train.load_checkpoint(os.path.join(export, "variables", "variables"))
    return {dtype for name, dtype in reader.get_variable_to_dtype_map().items()
            if name != "_CHECKPOINTABLE_OBJECT_GRAPH"}


def variables_size(export: str) -> int:
    folder = os.path.join(export, "variables")
    return sum(os.path.getsize(os.path.join(folder, name)) for name in os.listdir(folder))


@pytest.mark.slow
def test_bfloat16_export_holds_bfloat16_weights_and_serves_the_in_process_outputs(
        model_and_tokenizer, tmp_path):
    """The export's weights are bfloat16 only (float32 exports: `test_train_runs`), in less than
    0.6 of the model's float32 bytes, and it serves what the bfloat16 copy translates in
    process."""
    model, tokenizer = model_and_tokenizer
    export = export_translator(model, tokenizer, "bfloat16", tmp_path, SETTINGS, "bfloat16")
    loaded = tf.saved_model.load(export)
    assert stored_dtypes(export) == {tf.bfloat16}
    assert variables_size(export) < 0.6 * 4 * model.count_params()
    served = loaded.signatures["serving_default"](text=tf.constant(TEXTS))
    translator = TranslationModule(serving_copy(model, "bfloat16"), tokenizer, SETTINGS)
    local = translator.translate(tf.constant(TEXTS))
    assert served["translation"].numpy().tolist() == local["translation"].numpy().tolist()
    np.testing.assert_allclose(served["score"].numpy(), local["score"].numpy(), atol=1e-6)
    assert served["score"].dtype == tf.float32


def test_serving_copy_rejects_other_dtypes(model_and_tokenizer):
    with pytest.raises(ValueError, match="float16"):
        serving_copy(model_and_tokenizer[0], "float16")


@pytest.mark.slow
def test_cli_auto_precision_exports_what_the_probe_measured(model_and_tokenizer, tmp_path,
                                                            monkeypatch, capsys):
    model, tokenizer = model_and_tokenizer
    model.save(tmp_path / "model.keras")
    tokenizer.save(tmp_path / "vocabulary")
    monkeypatch.setattr(export_cli, "choose_serving_dtype", lambda *sizes: ProbeResult(
        "bfloat16", {"float32": 150.0, "bfloat16": 390.0}, "GFLOP/s"))
    assert export_cli.main([str(tmp_path / "model.keras"), str(tmp_path / "vocabulary"),
                            "--name", "auto", "--base-dir", str(tmp_path / "out"),
                            "--precision", "auto", "--beam-size", "1"]) == 0
    captured = capsys.readouterr()
    assert "precision bfloat16 (measured GFLOP/s: float32 150.0, bfloat16 390.0)" in captured.err
    assert stored_dtypes(captured.out.strip()) == {tf.bfloat16}
