"""Exports load and translate on stock TF Serving 2.20's runtime: a Python with exactly
tensorflow 2.20 and tensorflow-text 2.20 (`KT_STOCK_RUNTIME_PYTHON`; .ci/run points it at its
oldest-versions venv), importing nothing of this package, gives the in-process outputs for
every kind of export the package writes."""
import json
import os
import subprocess

import numpy as np
import pytest
import tensorflow as tf

import keras_transformer as kt
from keras_transformer.data.tokenizer import SubwordTokenizer
from keras_transformer.decoding.shortlist import build_shortlist
from keras_transformer.export import export_translator

STOCK_PYTHON = os.environ.get("KT_STOCK_RUNTIME_PYTHON")
TEXTS = ["I have forty-two apples", "", "She sees three dogs today"]
IDS = [[20, 21, 22, 0], [30, 0, 0, 0]]
KINDS = {"float32-beam3": ("float32", 3, False, False), "float32-greedy": ("float32", 1, False,
                                                                         False),
         "bfloat16-beam3": ("bfloat16", 3, False, False),
         "shortlist-beam3": ("float32", 3, True, False), "xla-beam3": ("float32", 3, False, True),
         "xla-shortlist-beam3": ("float32", 3, True, True)}

LOAD_AND_TRANSLATE = """
import json, sys
import numpy as np
import tensorflow as tf
import tensorflow_text  # noqa: F401  (registers the SentencePiece ops)
texts = json.loads(sys.argv[2])
inputs = {"text": tf.constant(texts), "prefix": tf.constant(texts[::-1]),
          "source_ids": tf.constant(json.loads(sys.argv[3]), tf.int32)}
def plain(array):
    return ([item.hex() for item in array.ravel().tolist()] if array.dtype == object
            else array.tolist())
outputs = {"tf": tf.__version__, "text": tensorflow_text.__version__}
for name, path in json.loads(sys.argv[1]).items():
    signatures = tf.saved_model.load(path).signatures
    outputs[name] = {}
    for signature, function in signatures.items():
        arguments = {key: inputs[key] for key in function.structured_input_signature[1]}
        outputs[name][signature] = {key: plain(value.numpy())
                                    for key, value in function(**arguments).items()}
assert not [name for name in sys.modules if name.startswith("keras_transformer")]
print(json.dumps(outputs))
"""


@pytest.mark.slow
@pytest.mark.skipif(not STOCK_PYTHON, reason="KT_STOCK_RUNTIME_PYTHON (a Python with exactly "
                    "tensorflow 2.20 + tensorflow-text 2.20) is not set")
def test_every_export_kind_translates_identically_on_the_stock_runtime(demo_vocab, demo_train,
                                                                       tmp_path):
    tokenizer = SubwordTokenizer.load(demo_vocab)
    model = kt.Transformer(kt.TransformerConfig.preset(
        "tiny", vocab_size=tokenizer.vocab_size, max_length=24, num_layers=1))
    sources, targets = (tokenizer.tokenize(tf.constant(side[:200])).to_list()
                        for side in demo_train)
    shortlist = build_shortlist(sources, targets, tokenizer.vocab_size, 20, 5)
    exports = {name: export_translator(model, tokenizer, name, tmp_path,
                                       kt.SearchSettings(beam_size=beam, max_decode_extra=5),
                                       dtype, shortlist if listed else None, jit_compile=xla)
               for name, (dtype, beam, listed, xla) in KINDS.items()}
    env = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
    env["TF_CPP_MIN_LOG_LEVEL"] = "3"
    run = subprocess.run([STOCK_PYTHON, "-c", LOAD_AND_TRANSLATE, json.dumps(exports),
                          json.dumps(TEXTS), json.dumps(IDS)], cwd=tmp_path, env=env,
                         capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    stock = json.loads(run.stdout.strip().splitlines()[-1])
    assert stock["tf"].startswith("2.20.") and stock["text"].startswith("2.20.")
    inputs = {"text": tf.constant(TEXTS), "prefix": tf.constant(TEXTS[::-1]),
              "source_ids": tf.constant(IDS, tf.int32)}
    for name, path in exports.items():
        signatures = tf.saved_model.load(path).signatures
        assert set(stock[name]) == set(signatures) == {
            "serving_default", "translate_ids", "translate_nbest", "translate_with_prefix",
            "translate_with_alignment"}
        for signature, function in signatures.items():
            arguments = {key: inputs[key] for key in function.structured_input_signature[1]}
            for key, value in function(**arguments).items():
                ours, theirs = value.numpy(), stock[name][signature][key]
                if ours.dtype == object:
                    assert [bytes.fromhex(t) for t in theirs] == ours.ravel().tolist(), key
                else:
                    np.testing.assert_allclose(theirs, ours, atol=1e-4, err_msg=key)
