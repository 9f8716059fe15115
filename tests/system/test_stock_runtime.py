"""Exports load and translate on stock TF Serving 2.20's runtime: a Python with exactly
tensorflow 2.20 and tensorflow-text 2.20 (`KT_STOCK_RUNTIME_PYTHON`; .ci/run points it at its
oldest-versions venv), importing nothing of this package, gives the in-process outputs for an
export of each option (precision, greedy or beam search, shortlist, XLA), and for the export of
a model imported from a Marian folder (kt-import: a SentencePiece pair in the graph) the text
kt-translate gives; and it answers every warm-up request each carries with well-formed outputs
(without that Python, the warm-up replay runs in this one's)."""
import io
import json
import sys
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf

import keras_transformer as kt
from keras_transformer.data.tokenizer import SubwordTokenizer
from keras_transformer.decoding.shortlist import build_shortlist
from keras_transformer.serving.export import export_translator
from helpers import STOCK_PYTHON, run_stock
from marian_models import MarianVariant, write_marian_model
from trainers import export, import_model, translate

pytestmark = pytest.mark.system  # another Python and TensorFlow, in processes of their own

TEXTS = ["I have forty-two apples", "", "She sees three dogs today"]
IDS = [[20, 21, 22, 0], [30, 0, 0, 0]]
# Each option of an export once (its ops on the stock runtime), beside the plain float32 beam:
# the greedy search in bfloat16, the shortlist, XLA over the shortlist (whose static shapes are
# those of XLA without one, plus the shortlist's gathers).
KINDS = {"float32-beam3": ("float32", 3, False, False),
         "bfloat16-greedy": ("bfloat16", 1, False, False),
         "shortlist-beam3": ("float32", 3, True, False),
         "xla-shortlist-beam3": ("float32", 3, True, True)}
# The imported model's inputs: language tokens, separate source and target vocabularies.
IMPORTED_TEXTS = [">>fra<< I see one dog.", "", "we like the red car!"]
IMPORTED_SEARCH = ["--beam-size", "3", "--max-decode-extra", "5"]

# Run once in the stock Python: each export loaded once, every warm-up request it carries
# replayed first (as TF Serving does on a fresh load) and checked for well-formed outputs, then
# (if the third argument is "translate") every signature called on the texts given for it
# (their reverse as prefixes and terms; IDS).
LOAD_REPLAY_AND_TRANSLATE = """
import json, os, sys
import numpy as np
import tensorflow as tf
import tensorflow_text  # noqa: F401  (registers the SentencePiece ops)
from tensorflow_serving.apis import prediction_log_pb2
ids = tf.constant(json.loads(sys.argv[2]), tf.int32)
def plain(array):
    return ([item.hex() for item in array.ravel().tolist()] if array.dtype == object
            else array.tolist())
def check(value, batch):
    array = value.numpy()
    assert array.shape[:1] == (batch,), array.shape
    if array.dtype == object:
        [item.decode("utf-8") for item in array.ravel().tolist()]
    elif array.dtype.kind == "f":
        assert np.isfinite(array).all(), array
outputs = {"tf": tf.__version__, "text": tensorflow_text.__version__}
for name, export in json.loads(sys.argv[1]).items():
    path, texts = export["path"], export["texts"]
    inputs = {"text": tf.constant(texts), "prefix": tf.constant(texts[::-1]),
              "terms": tf.constant(texts[::-1]), "source_ids": ids}
    signatures = tf.saved_model.load(path).signatures
    counts = {}
    extra = os.path.join(path, "assets.extra")
    for record in tf.data.TFRecordDataset(os.path.join(extra, "tf_serving_warmup_requests")):
        request = prediction_log_pb2.PredictionLog.FromString(record.numpy()).predict_log.request
        signature = request.model_spec.signature_name or "serving_default"
        arguments = {key: tf.constant(tf.make_ndarray(proto))
                     for key, proto in request.inputs.items()}
        replies = signatures[signature](**arguments)
        assert set(replies) == set(signatures[signature].structured_outputs), signature
        for value in replies.values():
            check(value, len(next(iter(arguments.values()))))
        counts[signature] = counts.get(signature, 0) + 1
    with open(os.path.join(extra, "keras_transformer_provenance.json"), encoding="utf-8") as file:
        warmup = json.load(file)["warmup"]
    translated = {}
    for signature, function in signatures.items() if sys.argv[3] == "translate" else ():
        keys = function.structured_input_signature[1]
        arguments = {key: inputs[key] for key in keys if key != "target_language"}
        if "target_language" in keys:  # "": each row as its text says (an imported model)
            rows = tf.shape(next(iter(arguments.values())))[:1]
            arguments["target_language"] = tf.fill(rows, "")
        translated[signature] = {key: plain(value.numpy())
                                 for key, value in function(**arguments).items()}
    outputs[name] = {"translated": translated, "counts": counts, "warmup": warmup}
assert not [name for name in sys.modules if name.startswith("keras_transformer")]
print(json.dumps(outputs))
"""


@pytest.fixture(scope="module")
def exports(demo_vocab, demo_train, tmp_path_factory) -> dict[str, str]:
    """One export of each kind (`KINDS`): name -> its version directory."""
    tokenizer = SubwordTokenizer.load(demo_vocab)
    model = kt.Transformer(kt.TransformerConfig.preset(
        "tiny", vocab_size=tokenizer.vocab_size, max_length=16, num_layers=1))
    sources, targets = (tokenizer.tokenize(tf.constant(side[:200])).to_list()
                        for side in demo_train)
    shortlist = build_shortlist(sources, targets, tokenizer.vocab_size, 20, 5)
    base = tmp_path_factory.mktemp("exports")
    return {name: export_translator(model, tokenizer, name, base,
                                    kt.SearchSettings(beam_size=beam, max_decode_extra=5),
                                    dtype, shortlist if listed else None, jit_compile=xla)
            for name, (dtype, beam, listed, xla) in KINDS.items()}


@pytest.fixture(scope="module")
def imported(tmp_path_factory) -> tuple[Path, str]:
    """A tiny random Marian model (separate vocabularies, pre-norm, embedding layer norms,
    `>>xx<<` tokens) imported by kt-import and exported by kt-export with beam 3: the run
    directory and the export's version directory."""
    root = tmp_path_factory.mktemp("imported")
    folder = write_marian_model(root / "marian", MarianVariant(
        tied_all=False, norm="pre", embedding_norm=True, languages=("fra", "deu")))
    assert import_model.main([str(folder), "--output-dir", str(root / "run")]) == 0
    assert export.main([str(root / "run"), str(root / "run" / "vocab"), "--name", "imported",
                        "--base-dir", str(root / "exports"), *IMPORTED_SEARCH]) == 0
    return root / "run", str(root / "exports" / "imported" / "1")


def run_on_stock(given: dict, cwd: Path) -> dict:
    """`LOAD_REPLAY_AND_TRANSLATE`'s outputs for the exports `given` (name -> its path and
    texts) in the stock Python; without it, the warm-up replays alone, in this one (the tests
    compare translations only with the stock Python)."""
    return run_stock(STOCK_PYTHON or sys.executable, LOAD_REPLAY_AND_TRANSLATE,
                     json.dumps(given), json.dumps(IDS),
                     "translate" if STOCK_PYTHON else "replay", cwd=cwd, timeout=1800)


@pytest.fixture(scope="module")
def stock(exports, tmp_path_factory) -> dict:
    """The stock runtime's outputs (`run_on_stock`) for every export kind, on `TEXTS`."""
    return run_on_stock({name: {"path": path, "texts": TEXTS} for name, path in exports.items()},
                        tmp_path_factory.mktemp("stock"))


@pytest.fixture(scope="module")
def stock_imported(imported, tmp_path_factory) -> dict:
    """The stock runtime's outputs (`run_on_stock`) for the imported model's export, on
    `IMPORTED_TEXTS`."""
    return run_on_stock({"imported": {"path": imported[1], "texts": IMPORTED_TEXTS}},
                        tmp_path_factory.mktemp("stock"))


needs_stock = pytest.mark.skipif(not STOCK_PYTHON, reason="KT_STOCK_RUNTIME_PYTHON (a Python "
                                 "with exactly tensorflow 2.20 + tensorflow-text 2.20) is not set")


def assert_replayed(outputs: dict, name: str, further_languages: int = 0) -> None:
    """The export `name` of `outputs` (`run_on_stock`) carried one warm-up request per
    signature of its one source width (two for `translate_with_prefix`), and one
    `serving_default` request per language after its first, and each replayed."""
    if STOCK_PYTHON:
        assert outputs["tf"].startswith("2.20.")
    counts, warmup = outputs[name]["counts"], outputs[name]["warmup"]
    # A graph export's one width; an XLA export's every multiple of 16 up to the model's
    # max_length, here 16 (the widths an XLA export warms are test_warmup.py's).
    assert warmup["source_widths"] == [16]
    assert counts == {"serving_default": 1 + further_languages, "translate_ids": 1,
                      "translate_nbest": 1, "translate_with_alignment": 1,
                      "translate_with_prefix": 2, "translate_with_terms": 1,
                      "translate_with_scores": 1}
    assert sum(counts.values()) == warmup["records"]


@pytest.mark.slow
def test_every_warmup_request_of_every_export_kind_replays_on_the_stock_runtime(stock):
    for name in KINDS:
        assert_replayed(stock, name)


@pytest.mark.slow
def test_every_warmup_request_of_an_imported_models_export_replays_on_the_stock_runtime(
        stock_imported):
    # The imported model's second language, fra, once more (the first is deu).
    assert_replayed(stock_imported, "imported", further_languages=1)


@pytest.mark.slow
@needs_stock
def test_every_export_kind_translates_identically_on_the_stock_runtime(stock, exports):
    assert stock["tf"].startswith("2.20.") and stock["text"].startswith("2.20.")
    for name, path in exports.items():
        assert_outputs_in_process(stock[name]["translated"], path, TEXTS)


@pytest.mark.slow
@needs_stock
def test_an_imported_models_export_translates_on_the_stock_runtime_as_kt_translate_does(
        stock_imported, imported, tmp_path):
    run_dir, path = imported
    assert stock_imported["tf"].startswith("2.20.") and stock_imported["text"].startswith("2.20.")
    assert_outputs_in_process(stock_imported["imported"]["translated"], path, IMPORTED_TEXTS)
    (tmp_path / "input.en").write_text("".join(text + "\n" for text in IMPORTED_TEXTS),
                                       encoding="utf-8")
    stdout = io.StringIO()
    assert translate.main([str(run_dir), str(tmp_path / "input.en"), *IMPORTED_SEARCH,
                           "--quiet"], stdout=stdout) == 0
    translations = stock_imported["imported"]["translated"]["serving_default"]["translation"]
    assert [bytes.fromhex(text).decode() for text in translations] == (
        stdout.getvalue().split("\n")[:-1])


def assert_outputs_in_process(stock: dict, path: str, texts: list) -> None:
    """`stock` (every signature's outputs of the export at `path` on the stock runtime, given
    `texts`, their reverse as prefixes, and `IDS`) equals what the export computes here."""
    inputs = {"text": tf.constant(texts), "prefix": tf.constant(texts[::-1]),
              "terms": tf.constant(texts[::-1]), "source_ids": tf.constant(IDS, tf.int32)}
    signatures = tf.saved_model.load(path).signatures
    assert set(stock) == set(signatures) == {
        "serving_default", "translate_ids", "translate_nbest", "translate_with_prefix",
        "translate_with_terms", "translate_with_scores", "translate_with_alignment"}
    for signature, function in signatures.items():
        keys = function.structured_input_signature[1]
        arguments = {key: inputs[key] for key in keys if key != "target_language"}
        if "target_language" in keys:  # "": each row as its text says (an imported model)
            arguments["target_language"] = tf.fill(
                tf.shape(next(iter(arguments.values())))[:1], "")
        for key, value in function(**arguments).items():
            ours, theirs = value.numpy(), stock[signature][key]
            if ours.dtype == object:
                assert [bytes.fromhex(t) for t in theirs] == ours.ravel().tolist(), key
            else:
                np.testing.assert_allclose(theirs, ours, atol=1e-4, err_msg=key)
