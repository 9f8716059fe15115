"""examples/serving_client.py: the REST and gRPC requests it builds carry tensors that the export
answers as a direct call does, once mapped the way TF Serving maps them; and it sends them to a
server and reports latency percentiles. No model server runs here: the servers are local
stand-ins (127.0.0.1) answering as TF Serving's REST API and PredictionService do, by running the
export in this process."""
import concurrent.futures
import http.server
import importlib.util
import json
import os
import re
import subprocess
import sys
import threading

import grpc
import numpy as np
import pytest
import tensorflow as tf
from tensorflow_serving.apis import predict_pb2, prediction_service_pb2_grpc

import keras_transformer as kt
from keras_transformer.data.tokenizer import SubwordTokenizer
from keras_transformer.serving.export import export_translator
from keras_transformer.serving.loading import load_export
from helpers import ROOT

TEXTS = ["I have forty-two apples", "", "caf\u00e9 \u00fcber alles"]
IDS = [[20, 21, 22, 0], [30, 0, 0, 0]]
EXAMPLES = {"text": TEXTS, "prefix": ["ich habe", "", "zwei"], "source_ids": IDS,
            "terms": ["Äpfel", "", "zwei\tHunde"]}


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


@pytest.mark.slow
def test_rest_requests_get_the_direct_answers(export):
    client = load_client()
    specs = client.signature_inputs(export)
    assert set(specs) == {"serving_default", "translate_ids", "translate_nbest",
                          "translate_with_prefix", "translate_with_terms", "translate_with_scores",
                          "translate_with_alignment"}
    signatures = tf.saved_model.load(export).signatures
    for name in specs:
        values = {key: EXAMPLES[key] for key in specs[name]}
        body = client.rest_request(name, specs[name], values)
        assert body["signature_name"] == name and set(body["inputs"]) == set(values)
        answer = served(signatures[name], specs[name], body["inputs"])
        direct = signatures[name](**{key: tf.constant(value) for key, value in values.items()})
        for key in direct:
            np.testing.assert_array_equal(answer[key].numpy(), direct[key].numpy())


@pytest.mark.slow
def test_grpc_requests_get_the_direct_answers(export):
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


def plain(value: np.ndarray):
    """A tensor's value in TF Serving's JSON: strings as text, numbers as lists."""
    if value.dtype == object:
        return np.vectorize(lambda item: item.decode("utf-8"), otypes=[object])(value).tolist()
    return value.tolist()


class RestHandler(http.server.BaseHTTPRequestHandler):
    """TF Serving's REST API for one model ("demo", any version label): GET /v1/models/demo
    gives its status, POST ...:predict runs a signature on columnar "inputs"."""

    signatures: dict = {}
    bodies: list = []
    PREDICT = re.compile(r"^/v1/models/demo(/labels/[A-Za-z0-9_-]+)?:predict$")

    def answer(self, status: int, body: dict) -> None:
        data = json.dumps(body).encode("utf-8")
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        if self.path != "/v1/models/demo":
            return self.answer(404, {"error": f"Servable not found for request: {self.path}"})
        self.answer(200, {"model_version_status": [
            {"version": "1", "state": "AVAILABLE", "status": {"error_code": "OK"}}]})

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        if not self.PREDICT.match(self.path):
            return self.answer(404, {"error": f"Servable not found for request: {self.path}"})
        self.bodies.append((self.path, body))
        function = self.signatures[body.get("signature_name", "serving_default")]
        specs = function.structured_input_signature[1]
        outputs = function(**{name: tf.constant(value, dtype=specs[name].dtype)
                              for name, value in body["inputs"].items()})
        self.answer(200, {"outputs": {name: plain(value.numpy())
                                      for name, value in outputs.items()}})

    def log_message(self, *args):  # no line per request on stderr
        pass


class PredictionService(prediction_service_pb2_grpc.PredictionServiceServicer):
    """PredictionService/Predict for any model name: the request's signature on its tensors."""

    def __init__(self, signatures):
        self.signatures = signatures
        self.requests = []

    def Predict(self, request, context):
        self.requests.append(request)
        outputs = self.signatures[request.model_spec.signature_name or "serving_default"](
            **{name: tf.constant(tf.make_ndarray(proto))
               for name, proto in request.inputs.items()})
        response = predict_pb2.PredictResponse()
        response.model_spec.CopyFrom(request.model_spec)
        for name, value in outputs.items():
            response.outputs[name].CopyFrom(tf.make_tensor_proto(value.numpy()))
        return response


@pytest.fixture
def rest_server(export):
    RestHandler.signatures = tf.saved_model.load(export).signatures
    RestHandler.bodies = []
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), RestHandler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"127.0.0.1:{server.server_address[1]}", RestHandler
    server.shutdown()
    server.server_close()


@pytest.fixture
def grpc_server(export):
    service = PredictionService(tf.saved_model.load(export).signatures)
    server = grpc.server(concurrent.futures.ThreadPoolExecutor(max_workers=2))
    prediction_service_pb2_grpc.add_PredictionServiceServicer_to_server(service, server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    yield f"127.0.0.1:{port}", service
    server.stop(0)


def check_report(report: dict, count: int) -> None:
    assert report["requests"] == count
    assert 0 < report["p50_ms"] <= report["p95_ms"] <= report["p99_ms"]
    assert report["requests_per_second"] == pytest.approx(count / report["seconds"], rel=0.01)


@pytest.mark.slow
def test_sends_rest_requests_and_reports_latency_percentiles(export, rest_server, capsys):
    address, handler = rest_server
    client = load_client()
    client.main([export, "I have forty-two apples", "one cat", "--send", "rest", "--server",
                 address, "--requests", "7", "--concurrency", "2", "--label", "canary",
                 "--signature", "translate_nbest"])
    report = json.loads(capsys.readouterr().out)
    check_report(report, 7)
    assert (report["model"], report["label"], report["protocol"]) == ("demo", "canary", "rest")
    assert report["status"]["model_version_status"][0]["state"] == "AVAILABLE"
    specs = client.signature_inputs(export)["translate_nbest"]
    sent = client.rest_request("translate_nbest", specs,
                               {"text": ["I have forty-two apples", "one cat"]})
    assert handler.bodies == [("/v1/models/demo/labels/canary:predict", sent)] * 7
    # What the sender gets back is the export's answer.
    answer = client.rest_sender(client.model_url(address, "demo") + ":predict", sent, 30)()
    direct = tf.saved_model.load(export).signatures["translate_nbest"](
        text=tf.constant(["I have forty-two apples", "one cat"]))
    assert answer["outputs"]["nbest_translations"] == plain(
        direct["nbest_translations"].numpy())


def test_sends_grpc_requests_and_reports_latency_percentiles(export, grpc_server, capsys):
    address, service = grpc_server
    load_client().main([export, "I have forty-two apples", "--send", "grpc", "--server",
                        address, "--requests", "5", "--model", "prod", "--label", "stable",
                        "--signature", "translate_with_prefix", "--prefix", "ich"])
    check_report(json.loads(capsys.readouterr().out), 5)
    assert len(service.requests) == 5
    request = service.requests[0]
    assert (request.model_spec.name, request.model_spec.version_label,
            request.model_spec.signature_name) == ("prod", "stable", "translate_with_prefix")
    assert tf.make_ndarray(request.inputs["prefix"]).tolist() == [b"ich"]


def test_sending_stops_at_the_time_limit(export, grpc_server):
    address, service = grpc_server
    client = load_client()
    specs, outputs = client.read_signatures(export)["serving_default"]
    with grpc.insecure_channel(address) as channel:
        send = client.grpc_sender(channel, client.grpc_request(
            "demo", "serving_default", specs, {"text": TEXTS}), 30)
        latencies, seconds = client.measure(send, outputs, client.MAX_REQUESTS, 0.5)
    assert 1 <= len(latencies) == len(service.requests) < client.MAX_REQUESTS
    assert seconds < 0.5 + 10 * max(latencies)  # the calls under way at the limit finish


def test_answers_without_the_signatures_outputs_and_server_errors_are_raised(export,
                                                                             rest_server):
    client = load_client()
    with pytest.raises(ValueError, match=r"answered outputs \['score'\]"):
        client.measure(lambda: {"outputs": {"score": [0.0]}}, ["score", "translation"], 3, 5)
    address, _ = rest_server
    with pytest.raises(client.urllib.error.HTTPError, match="404"):
        client.measure(client.rest_sender(client.model_url(address, "other") + ":predict",
                                          {"inputs": {"text": ["x"]}}, 30), ["x"], 3, 5)
    with pytest.raises(SystemExit):
        client.parse_args([export, "x", "--send", "rest"])  # no --server
    with pytest.raises(SystemExit):
        client.parse_args([export, "x", "--send", "rest", "--server", address, "--requests",
                           str(client.MAX_REQUESTS + 1)])


@pytest.mark.slow
def test_the_client_runs_quietly(export):
    """As a process: the REST bodies on stdout and nothing on stderr (no TensorFlow start-up
    lines, CUDA errors or SentencePiece INFO lines: the signatures are read, not loaded)."""
    environment = {key: value for key, value in os.environ.items()
                   if key != "TF_CPP_MIN_LOG_LEVEL"}
    done = subprocess.run([sys.executable, str(ROOT / "examples" / "serving_client.py"), export,
                           "one cat"], capture_output=True, text=True, env=environment,
                          timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""
    assert len(done.stdout.splitlines()) == 7  # one REST body per signature


def test_loading_an_export_prints_nothing(export, capfd, caplog, monkeypatch):
    """Loading an export as kt-translate does (TensorFlow's C++ lines off): no SentencePiece
    INFO line, no warning about custom gradients (exports are saved without them)."""
    monkeypatch.setenv("TF_CPP_MIN_LOG_LEVEL", "3")
    capfd.readouterr()
    translator = load_export(export)
    assert translator.beam_size == 2
    printed = capfd.readouterr().err
    assert "LOG(INFO)" not in printed and "gradient" not in printed
    assert not [record for record in caplog.records if "gradient" in record.getMessage()]


def test_the_documented_rest_answers_hold_the_signatures_outputs(export):
    """docs/decoding-and-serving.md's REST examples: each answer names exactly its signature's
    outputs, and no score or index is written as a number (they depend on the weights)."""
    text = (ROOT / "docs" / "decoding-and-serving.md").read_text(encoding="utf-8")
    paragraph = " ".join(text.split("REST examples, ")[1].split("\n\n")[0].split())
    answers = re.findall(r'`\{"signature_name": "(\w+)".*?` answers `(\{"predictions".*?\})`',
                         paragraph)
    assert [name for name, _ in answers] == ["translate_with_alignment", "translate_nbest",
                                             "translate_with_prefix"]
    outputs = {name: set(function.structured_outputs)
               for name, function in tf.saved_model.load(export).signatures.items()}
    for name, answer in answers:
        keys = set(re.findall(r'"(\w+)":', answer)) - {"predictions"}
        assert keys == outputs[name], name
    assert not re.findall(r"-?\d+\.\d+", paragraph)


def test_the_documented_python_request_runs(export, capsys):
    """docs/decoding-and-serving.md's Python example (a SavedModel loaded and called by its
    signature's input names), run as written on an export at its path."""
    text = (ROOT / "docs" / "decoding-and-serving.md").read_text(encoding="utf-8")
    block, = [block for block in re.findall(r"```python\n(.*?)```", text, re.DOTALL)
              if "tf.saved_model.load" in block]
    exec(compile(block.replace('"saved_models/demo/1"', repr(str(export))),
                 "docs/decoding-and-serving.md", "exec"), {})
    translation, score = capsys.readouterr().out.rstrip("\n").rsplit(" ", 1)
    [best], [best_score] = load_export(export).best([b"I have forty-two apples"])
    assert translation == best.decode() and float(score) == pytest.approx(best_score, abs=1e-5)


def test_a_document_translated_over_rest_is_the_one_translated_in_process(export, rest_server,
                                                                          tmp_path, capsys):
    """examples/translate_document.py against TF Serving's REST API gives an HTML page the
    document layer gives it over the loaded export; its long sentence split and named."""
    from keras_transformer.documents import document_translator
    from keras_transformer.serving.loading import load_export

    spec = importlib.util.spec_from_file_location(
        "translate_document", ROOT / "examples" / "translate_document.py")
    client = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(client)
    page = tmp_path / "page.html"
    page.write_text("<p>I have <b>forty-two</b> apples. She sees <i>three dogs</i>.</p>\n<ul><li>"
                    + "seventeen green pears, " * 12 + "</li></ul>\n", encoding="utf-8")
    server, _ = rest_server
    assert client.main([str(page), "--server", server, "--export", export]) == 0
    out = capsys.readouterr()
    expected = document_translator(load_export(export)).translate(
        page.read_text(encoding="utf-8"), "html")
    assert out.out == expected.text and expected.splits
    assert f"{page}:2: a sentence longer than the model takes" in out.err
