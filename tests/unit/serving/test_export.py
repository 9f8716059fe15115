"""SavedModel export: layout, signatures, op set, fresh-process loading, bad serving input."""
from __future__ import annotations

import contextlib
import gc
import glob
import io
import json
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import tensorflow as tf
from tensorflow.core.protobuf import saved_model_pb2
from tensorflow.python.eager import context
from tensorflow.python.framework import op_def_registry

import keras_transformer as kt
from keras_transformer.data import SubwordTokenizer
from keras_transformer.decoding.translator import TranslationModule
from keras_transformer.serving.export import export_translator, next_version
from keras_transformer.config import SearchSettings
from trainers import export as export_cli

SETTINGS = SearchSettings(beam_size=3, length_penalty=0.6, max_decode_extra=5)
GOOD = ["The cat sits on the mat.", "A small dog runs."]
LONG = " ".join(["The cat sits on the mat."] * 40)
BAD_UTF8 = b"\xff\xfe caf\xc3"
TEXTS = GOOD + ["", LONG]  # what the exports of `uneven` translate


@pytest.fixture(scope="module")
def tokenizer(demo_train, tmp_path_factory) -> SubwordTokenizer:
    # Built here rather than shared: tf.random.set_seed elsewhere (e.g. in another module)
    # clears TF's kernel cache, which frees tensorflow_text's kernel-owned SentencePiece
    # resource of any tokenizer built before it.
    sources, targets = demo_train
    return SubwordTokenizer.train(sources + targets, 500, tmp_path_factory.mktemp("vocab"))


@pytest.fixture(scope="module")
def model(tokenizer):
    """A one-layer `tiny` model (each export traces every layer: the exports of a model of
    several layers, and of unequal depths, are `uneven`'s)."""
    return kt.Transformer(kt.TransformerConfig.preset(
        "tiny", vocab_size=tokenizer.vocab_size, max_length=24, num_layers=1))


@pytest.fixture(scope="module")
def exported(model, tokenizer, tmp_path_factory) -> str:
    """The module's export (each export traces the search: seconds), into a model directory
    that already holds a directory "7" (`test_layout_uses_the_next_free_integer_version`)."""
    base = tmp_path_factory.mktemp("saved_models")
    (base / "demo" / "7").mkdir(parents=True)
    return export_translator(model, tokenizer, "demo", base, SETTINGS)


@pytest.fixture(scope="module")
def loaded(exported):
    return tf.saved_model.load(exported)


@pytest.fixture(scope="module")
def serving(loaded):
    return loaded.signatures["serving_default"]


@pytest.fixture(scope="module")
def translate_ids(loaded):
    return loaded.signatures["translate_ids"]


@pytest.fixture(scope="module")
def translator(model, tokenizer) -> TranslationModule:
    return TranslationModule(model, tokenizer, SETTINGS)


def _translate(serving, texts) -> tuple[list[bytes], np.ndarray]:
    out = serving(text=tf.constant(texts, tf.string))
    return out["translation"].numpy().tolist(), out["score"].numpy()


@pytest.mark.slow
def test_layout_uses_the_next_free_integer_version(exported, tmp_path):
    """The module's export, into a model directory holding "7"."""
    model_dir = Path(exported).parent
    assert os.path.basename(exported) == "8" and next_version(model_dir) == 9
    assert sorted(os.listdir(model_dir)) == ["7", "8"]
    assert os.path.isfile(os.path.join(exported, "saved_model.pb"))
    assert os.path.isfile(os.path.join(exported, "assets", "spm.model"))
    assert next_version(tmp_path / "missing") == 1


def test_bad_name_is_rejected(model, tokenizer, tmp_path):
    with pytest.raises(ValueError, match="name"):
        export_translator(model, tokenizer, "../escape", tmp_path)


@pytest.mark.slow
def test_exported_equals_in_process(serving, translate_ids, translator):
    texts = GOOD + ["", LONG]
    exported_text, exported_scores = _translate(serving, texts)
    local = translator.translate(tf.constant(texts))
    assert exported_text == local["translation"].numpy().tolist()
    np.testing.assert_allclose(exported_scores, local["score"].numpy(), atol=1e-6)
    ids = tf.constant([[20, 21, 22, 0], [30, 0, 0, 0]], tf.int32)
    exported_ids = translate_ids(source_ids=ids)
    local_ids = translator.translate_ids(ids)
    for key in ("ids", "score", "nbest_ids", "nbest_scores"):
        np.testing.assert_allclose(exported_ids[key].numpy(), local_ids[key].numpy(), atol=1e-6)


FRESH_PROCESS = """
import json, sys
import tensorflow as tf
import tensorflow_text  # noqa: F401  (registers the SentencePiece ops)
serving = tf.saved_model.load(sys.argv[1]).signatures["serving_default"]
out = serving(text=tf.constant(json.loads(sys.argv[2])))
assert not [name for name in sys.modules if name.startswith("keras_transformer")]
print(json.dumps({"translation": [t.hex() for t in out["translation"].numpy().tolist()],
                  "score": out["score"].numpy().tolist()}))
"""


@pytest.mark.slow
def test_fresh_process_with_only_tensorflow_and_text_translates_identically(
        exported, translator, tmp_path):
    env = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
    env["TF_CPP_MIN_LOG_LEVEL"] = "3"
    run = subprocess.run([sys.executable, "-c", FRESH_PROCESS, exported, json.dumps(GOOD)],
                         cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    fresh = json.loads(run.stdout.strip().splitlines()[-1])
    local = translator.translate(tf.constant(GOOD))
    assert [bytes.fromhex(t) for t in fresh["translation"]] == \
        local["translation"].numpy().tolist()
    np.testing.assert_allclose(fresh["score"], local["score"].numpy(), atol=1e-6)


@pytest.mark.slow
def test_saved_model_cli_lists_the_signatures(exported):
    """`saved_model_cli show --dir EXPORT --all`, its parser and command run in this process
    (a process of its own would spend seconds importing TensorFlow)."""
    from tensorflow.python.tools import saved_model_cli

    command = saved_model_cli.create_parser().parse_args(["show", "--dir", exported, "--all"])
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        command.func()
    for expected in ("signature_def['serving_default']", "signature_def['translate_ids']",
                     "inputs['text']", "outputs['translation']", "outputs['score']",
                     "inputs['source_ids']", "outputs['ids']"):
        assert expected in printed.getvalue()


def _tf_text_op_names() -> set[str]:
    import tensorflow_text
    libraries = glob.glob(os.path.join(os.path.dirname(tensorflow_text.__file__), "python",
                                       "ops", "_*.so"))
    names = set()
    for library in libraries:
        module = tf.load_op_library(library)
        names |= {name for name in dir(module) if op_def_registry.get(name) is not None}
    return names


def test_graph_uses_only_core_and_tf_text_ops(exported):
    proto = saved_model_pb2.SavedModel()
    with open(os.path.join(exported, "saved_model.pb"), "rb") as handle:
        proto.ParseFromString(handle.read())
    used = set()
    for graph in proto.meta_graphs:
        used |= {node.op for node in graph.graph_def.node}
        for function in graph.graph_def.library.function:
            used |= {node.op for node in function.node_def}
    text_ops = _tf_text_op_names()
    assert {"SentencepieceOp", "SentencepieceTokenizeOp"} <= text_ops
    core_ops = set(dir(tf.raw_ops))
    unknown = sorted(used - core_ops - text_ops)
    print("op types:", sorted(used))
    assert not unknown, f"ops neither core TF nor TF Text: {unknown}"
    assert used & text_ops, "tokenization is not inside the graph"


@pytest.mark.slow
def test_reloads_keep_nothing_of_the_earlier_loads(exported, serving):
    """An export only infers: it holds no gradient functions (the fast kernels' custom
    gradients), which TensorFlow would register for good at each load, so that a process
    reloading an export (a server's new version, a test) would grow by every load. The
    earlier load is the module's (`serving`)."""
    proto = saved_model_pb2.SavedModel()
    with open(os.path.join(exported, "saved_model.pb"), "rb") as handle:
        proto.ParseFromString(handle.read())
    assert not proto.meta_graphs[0].graph_def.library.registered_gradients
    functions = context.context().list_function_names
    serving(text=tf.constant(GOOD))
    gc.collect()
    kept = set(functions())
    tf.saved_model.load(exported).signatures["serving_default"](text=tf.constant(GOOD))
    gc.collect()
    assert set(functions()) == kept


def test_empty_string_gives_empty_translation(serving):
    """...and leaves the other sentences of its batch as they are alone (an untrained model may
    translate anything to the empty string, so that is compared, not assumed)."""
    translations, scores = _translate(serving, ["", GOOD[0]])
    alone, alone_scores = _translate(serving, [GOOD[0]])
    assert translations[0] == b"" and scores[0] == 0.0
    assert translations[1] == alone[0]
    np.testing.assert_allclose(scores[1], alone_scores[0], rtol=1e-5)


def test_empty_batch_gives_empty_outputs(serving):
    translations, scores = _translate(serving, [])
    assert translations == [] and scores.shape == (0,)


def test_long_input_is_truncated_to_max_length(serving, translate_ids, tokenizer, model):
    translations, scores = _translate(serving, [LONG])
    kept = tokenizer.tokenize(tf.constant([LONG]))[:, :model.config.max_length - 1]
    assert tokenizer.tokenize(tf.constant([LONG])).row_lengths()[0] > model.config.max_length
    by_ids = translate_ids(source_ids=kept.to_tensor())
    np.testing.assert_allclose(scores, by_ids["score"].numpy(), atol=1e-6)
    assert translations == tokenizer.detokenize(by_ids["ids"]).numpy().tolist()


def test_invalid_utf8_does_not_crash(serving):
    translations, scores = _translate(serving, [BAD_UTF8])
    translations[0].decode("utf-8")
    assert np.isfinite(scores).all()


def test_mixed_batch_translates_good_sentences_as_alone(serving):
    mixed_text, mixed_scores = _translate(serving, [GOOD[0], "", BAD_UTF8, LONG, GOOD[1]])
    alone = [_translate(serving, [sentence]) for sentence in GOOD]
    assert [mixed_text[0], mixed_text[4]] == [text[0] for text, _ in alone]
    np.testing.assert_allclose([mixed_scores[0], mixed_scores[4]],
                               [scores[0] for _, scores in alone], atol=1e-5)
    assert mixed_text[1] == b""


def test_translate_ids_tolerates_out_of_range_ids(translate_ids):
    out = translate_ids(source_ids=tf.constant([[-5, 10 ** 6, 20, 0]], tf.int32))
    assert np.isfinite(out["score"].numpy()).all()


@pytest.fixture(scope="module")
def uneven(tokenizer, tmp_path_factory) -> SimpleNamespace:
    """A deep-encoder shallow-decoder `model` (3 encoder layers, 1 decoder layer) holding the
    mean of two checkpoints' weights (`first`, and `second`: `first` moved by noise), and its
    two exports, made once for the tests that read them (each export traces the search, and
    an XLA export compiles it at its first call: seconds): `graph` by `export_translator`,
    `xla` by the command line from the model's .keras file (`--xla` and the search settings
    `SETTINGS`: its exit `code` and `printed` output, the export's path). `translated`: each
    export's translations and scores of `TEXTS`."""
    from keras_transformer.training.checkpoints import average_weights, save_weights_atomic

    directory = tmp_path_factory.mktemp("uneven")
    config = kt.TransformerConfig.preset("tiny", vocab_size=tokenizer.vocab_size, max_length=24,
                                         num_encoder_layers=3, num_decoder_layers=1)
    model = kt.Transformer(config)
    first = model.get_weights()
    save_weights_atomic(model, directory / "a.weights.h5")
    rng = np.random.default_rng(0)
    second = [weight + rng.normal(size=weight.shape).astype("float32") * 0.2
              for weight in first]
    model.set_weights(second)
    save_weights_atomic(model, directory / "b.weights.h5")
    average_weights(model, [directory / "a.weights.h5", directory / "b.weights.h5"])
    exports = {"graph": export_translator(model, tokenizer, "uneven", directory / "exports",
                                          SETTINGS)}
    model.save(directory / "model.keras")
    tokenizer.save(directory / "vocabulary")
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        code = export_cli.main([str(directory / "model.keras"), str(directory / "vocabulary"),
                                "--name", "xla", "--base-dir", str(directory / "out"), "--xla",
                                "--beam-size", "3", "--length-penalty", "0.6",
                                "--max-decode-extra", "5"])
    if code == 0:
        exports["xla"] = printed.getvalue().strip()
    translated = {kind: _translate(tf.saved_model.load(path).signatures["serving_default"],
                                   TEXTS) for kind, path in exports.items()}
    return SimpleNamespace(model=model, first=first, second=second, code=code,
                           printed=printed.getvalue(), directory=directory,
                           translated=translated)


@pytest.mark.slow
def test_cli_exports_a_keras_file(uneven):
    """`uneven`'s XLA export, by the command line from a .keras file."""
    assert uneven.code == 0
    assert uneven.printed.strip() == str(uneven.directory / "out" / "xla" / "1")


@pytest.mark.slow
def test_an_xla_export_translates_as_the_graph_export(uneven):
    """`uneven`'s exports: the command line's XLA export and the graph export."""
    ours, scores = uneven.translated["graph"]
    compiled, compiled_scores = uneven.translated["xla"]
    assert compiled == ours and any(ours)
    np.testing.assert_allclose(compiled_scores, scores, atol=1e-4)
    with pytest.raises(SystemExit):
        export_cli.parse_args(["m", "v", "--name", "x", "--xla", "--format", "ctranslate2"])


def test_cli_refuses_to_export_into_a_model_directory_or_an_export(model, tokenizer, exported,
                                                                   tmp_path, capsys):
    """`--base-dir saved_models/demo --name 1` would write saved_models/demo/1/1, an export
    inside version 1: refused, naming the directory, as is a version as the base; nothing
    is written."""
    model.save(tmp_path / "model.keras")
    tokenizer.save(tmp_path / "vocabulary")
    model_dir = os.path.dirname(exported)
    before = sorted(os.walk(model_dir))
    for base, message in ((model_dir, "is the directory of a model, holding its versions 8:"),
                          (exported, "is an export, not the root of a model tree")):
        code = export_cli.main([str(tmp_path / "model.keras"), str(tmp_path / "vocabulary"),
                                "--name", "1", "--base-dir", base])
        assert code == 2 and f"base_dir: {base!r} {message}" in capsys.readouterr().err
    assert sorted(os.walk(model_dir)) == before


def test_cli_names_bad_arguments(tmp_path, capsys):
    from trainers.arguments import given_search_flags
    from trainers.common import search_settings

    def flags(*argv: str) -> dict:
        return given_search_flags(vars(export_cli.parse_args(["m", "v", "--name", "x", *argv])))

    config = SearchSettings()
    with pytest.raises(ValueError, match="--beam-size: must be a positive integer, got 0"):
        search_settings(flags("--beam-size", "0"), config)
    with pytest.raises(ValueError, match="--length-penalty: must be a non-negative number"):
        search_settings(flags("--alpha", "-1", "--extra-length", "7"), config)
    assert search_settings(flags("--extra-length", "7"), config).max_decode_extra == 7
    assert export_cli.main([str(tmp_path / "nothing"), str(tmp_path), "--name", "x"]) == 2
    assert f"model: {str(tmp_path / 'nothing')!r} does not exist" in capsys.readouterr().err
    assert export_cli.main([str(tmp_path), str(tmp_path), "--name", "x"]) == 2
    assert "vocabulary" in capsys.readouterr().err


@pytest.mark.slow
def test_cli_shortlist_export_emits_only_listed_ids(model, tokenizer, demo_train, tmp_path,
                                                    capsys):
    """`--shortlist 0,3`: only EOS and 3 candidates per source piece of the batch (PAD-filled)
    can be emitted."""
    model.save(tmp_path / "model.keras")
    tokenizer.save(tmp_path / "vocabulary")
    for side, lines in zip(("src", "tgt"), demo_train):
        (tmp_path / f"train.{side}").write_text("\n".join(lines[:300]) + "\n", encoding="utf-8")
    arguments = [str(tmp_path / "model.keras"), str(tmp_path / "vocabulary"), "--name",
                 "listed", "--base-dir", str(tmp_path / "out"), "--shortlist", "0,3",
                 "--shortlist-data", str(tmp_path / "train.src"), str(tmp_path / "train.tgt"),
                 "--beam-size", "2"]
    code = export_cli.main(arguments)
    assert code == 0, capsys.readouterr().err
    loaded = tf.saved_model.load(capsys.readouterr().out.strip())
    candidates = loaded.shortlist.candidates.numpy()
    sources = tokenizer.tokenize(tf.constant(GOOD)).to_tensor().numpy()
    out = loaded.signatures["translate_ids"](source_ids=tf.constant(sources, tf.int32))
    allowed = set(candidates[sources].ravel().tolist()) | {0, 3}
    assert len(allowed) < tokenizer.vocab_size / 10
    assert set(out["nbest_ids"].numpy().ravel().tolist()) <= allowed
    # With --xla the shortlist is padded to a static size, for the same translations: kt-export
    # --xla --shortlist in test_imported_runs.py, the search in test_shortlist.py.


def test_cli_names_bad_shortlist_arguments(model, tokenizer, tmp_path, capsys):
    model.save(tmp_path / "model.keras")
    tokenizer.save(tmp_path / "vocabulary")
    common = [str(tmp_path / "model.keras"), str(tmp_path / "vocabulary"), "--name", "x",
              "--base-dir", str(tmp_path / "out")]
    assert export_cli.main(common + ["--shortlist", "1000"]) == 2
    assert "--shortlist: expected FREQUENT,PER_SOURCE" in capsys.readouterr().err
    assert export_cli.main(common + ["--shortlist", "10,0"]) == 2
    assert "PER_SOURCE >= 1" in capsys.readouterr().err
    assert export_cli.main(common + ["--shortlist", "10,2"]) == 2
    assert "--shortlist-data: needed" in capsys.readouterr().err
    (tmp_path / "a.src").write_text("one\ntwo\n", encoding="utf-8")
    (tmp_path / "a.tgt").write_text("eins\n", encoding="utf-8")
    assert export_cli.main(common + ["--shortlist", "10,2", "--shortlist-data",
                                     str(tmp_path / "a.src"), str(tmp_path / "a.tgt")]) == 2
    assert "differ in line count" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        export_cli.parse_args(common + ["--shortlist-data", "a", "b"])
    assert not (tmp_path / "out").exists()


def test_shortlist_data_defaults_to_the_files_a_run_trained_on(tmp_path):
    run = tmp_path / "run"
    (run / "demo_corpus").mkdir(parents=True)
    assert export_cli._training_files(str(run)) is None
    assert export_cli._training_files(str(tmp_path / "model.keras")) is None
    for lang in ("en", "de"):
        (run / "demo_corpus" / f"train.{lang}").write_text("x\n", encoding="utf-8")
    assert export_cli._training_files(str(run)) == [
        str(run / "demo_corpus" / "train.en"), str(run / "demo_corpus" / "train.de")]
    (run / "run.json").write_text(json.dumps({"train_src": "a.en", "train_tgt": "a.de"}))
    assert export_cli._training_files(str(run)) == ["a.en", "a.de"]


@pytest.mark.slow
def test_a_deep_encoder_shallow_decoder_model_averages_and_exports(uneven, tokenizer):
    """Separate depths (3 encoder layers, 1 decoder layer: `uneven`) through checkpoint
    averaging (the mean of two checkpoints' weights) and the graph and XLA exports (each
    translating as the in-process `TranslationModule`)."""
    model = uneven.model
    for averaged, a, b in zip(model.get_weights(), uneven.first, uneven.second):
        np.testing.assert_allclose(averaged, (a + b) / 2, atol=1e-6)
    assert (len(model.encoder_layers), len(model.decoder_layers)) == (3, 1)
    in_process = TranslationModule(model, tokenizer, SETTINGS)
    expected, expected_scores = _translate(in_process.translate, TEXTS)
    assert sorted(uneven.translated) == ["graph", "xla"]
    for translations, scores in uneven.translated.values():
        assert translations == expected and any(expected)
        np.testing.assert_allclose(scores, expected_scores, atol=1e-4)
