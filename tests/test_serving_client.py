"""examples/serving_client.py: the REST and gRPC requests it builds carry tensors that the export
answers as a direct call does, once mapped the way TF Serving maps them."""
import importlib.util
import json
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf

import keras_transformer as kt
from keras_transformer.data.tokenizer import SubwordTokenizer
from keras_transformer.export import export_translator

ROOT = Path(__file__).resolve().parents[1]
TEXTS = ["I have forty-two apples", "", "caf\u00e9 \u00fcber alles"]
IDS = [[20, 21, 22, 0], [30, 0, 0, 0]]
EXAMPLES = {"text": TEXTS, "prefix": ["ich habe", "", "zwei"], "source_ids": IDS}


def load_client():
    spec = importlib.util.spec_from_file_location("serving_client",
                                                  ROOT / "examples" / "serving_client.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def export(demo_vocab, tmp_path_factory) -> str:
    tokenizer = SubwordTokenizer.load(demo_vocab)
    model = kt.Transformer(kt.TransformerConfig.preset(
        "tiny", vocab_size=tokenizer.vocab_size, max_length=24, num_layers=1))
    return export_translator(model, tokenizer, "demo", tmp_path_factory.mktemp("exports"),
                             kt.SearchSettings(beam_size=2, max_decode_extra=4))


def served(signature, specs, inputs):
    """What TF Serving does with a request's inputs: tensors of the signature's dtypes."""
    return signature(**{name: tf.constant(inputs[name], dtype=specs[name].dtype)
                        for name in specs})


def test_rest_requests_get_the_direct_answers(export):
    client = load_client()
    specs = client.signature_inputs(export)
    assert set(specs) == {"serving_default", "translate_ids", "translate_nbest",
                          "translate_with_prefix", "translate_with_alignment"}
    signatures = tf.saved_model.load(export).signatures
    for name in specs:
        values = {key: EXAMPLES[key] for key in specs[name]}
        body = client.rest_request(name, specs[name], values)
        assert body["signature_name"] == name and set(body["inputs"]) == set(values)
        answer = served(signatures[name], specs[name], body["inputs"])
        direct = signatures[name](**{key: tf.constant(value) for key, value in values.items()})
        for key in direct:
            np.testing.assert_array_equal(answer[key].numpy(), direct[key].numpy())


def test_grpc_requests_get_the_direct_answers(export):
    pytest.importorskip("tensorflow_serving.apis", reason="tensorflow-serving-api not installed")
    client = load_client()
    specs = client.signature_inputs(export)
    signatures = tf.saved_model.load(export).signatures
    for name in specs:
        values = {key: EXAMPLES[key] for key in specs[name]}
        request = client.grpc_request("demo", name, specs[name], values)
        assert request.model_spec.name == "demo" and request.model_spec.signature_name == name
        # The server turns each TensorProto back into a tensor and calls the signature.
        received = {key: tf.make_ndarray(proto) for key, proto in request.inputs.items()}
        answer = served(signatures[name], specs[name], received)
        direct = signatures[name](**{key: tf.constant(value) for key, value in values.items()})
        for key in direct:
            np.testing.assert_array_equal(answer[key].numpy(), direct[key].numpy())


def test_command_line_prints_one_rest_body_per_signature(export, capsys):
    load_client().main([export, "I have forty-two apples", "one cat", "--prefix", "ich"])
    bodies = {body["signature_name"]: body["inputs"]
              for body in map(json.loads, capsys.readouterr().out.splitlines())}
    assert set(bodies) == set(load_client().signature_inputs(export))
    assert bodies["serving_default"] == {"text": ["I have forty-two apples", "one cat"]}
    assert bodies["translate_with_prefix"]["prefix"] == ["ich", "ich"]
