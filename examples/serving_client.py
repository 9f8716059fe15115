r"""Requests for a keras-transformer export served by TF Serving, built from the export's own
signature definitions, and a client that sends them and reports latency percentiles.

    python examples/serving_client.py saved_models/demo/1 "I have forty-two apples"
    python examples/serving_client.py saved_models/demo/1 "I have forty-two apples" \
        --send rest --server localhost:8501 --requests 200 --concurrency 4
    python examples/serving_client.py saved_models/demo/1 "I have forty-two apples" \
        --send grpc --server localhost:8500 --label canary --signature translate_nbest

Without `--send`, prints the REST request body (`POST http://HOST:8501/v1/models/NAME:predict`)
of each signature: the texts for those taking `text`, `--prefix` (default "") for
`translate_with_prefix`, `--terms` (target phrases separated by tabs, default "") for
`translate_with_terms`, example ids for `translate_ids`. With `--send rest` or `--send grpc`,
sends `--signature`'s request (default `serving_default`) to `--server` over REST (JSON to
`/v1/models/NAME[/labels/LABEL]:predict`, after reading the model's status from
`/v1/models/NAME`) or gRPC (`PredictionService/Predict`): `--requests` of them at most, for
`--max-seconds` at most, from `--concurrency` threads; checks that every answer holds the
signature's outputs and prints one JSON line with the count, the rate and the latency p50, p95
and p99 in milliseconds. NAME is `--model`, by default the export's directory name. The
signatures are read from the export's `saved_model.pb` (as TF Serving reads them), not loaded.
Runs where keras-transformer is installed (tensorflow and tensorflow-serving-api are its
dependencies), with TensorFlow's C++ start-up lines hidden as in its commands (set
`TF_CPP_MIN_LOG_LEVEL` to keep them).
"""
from __future__ import annotations

import argparse
import concurrent.futures
import json
import os
import sys
import threading
import time
import urllib.request
from typing import Any, Callable, Optional

import grpc
import numpy as np

from trainers.launch import import_tensorflow_quietly

import_tensorflow_quietly()  # before tensorflow's first import: its start-up lines hidden
import tensorflow as tf  # noqa: E402
from tensorflow.core.protobuf import saved_model_pb2  # noqa: E402
from tensorflow_serving.apis import predict_pb2, prediction_service_pb2_grpc  # noqa: E402

MAX_REQUESTS = 100_000
MAX_CONCURRENCY = 64


def read_signatures(saved_model_dir: str) -> dict[str, tuple[dict[str, tf.TensorSpec],
                                                            list[str]]]:
    """Signature name -> (its input name -> `TensorSpec`, its output names), as saved: the
    `serve` graph's signature definitions in `saved_model.pb`, read without loading the model
    (TF Serving's own view of it; internal ones, named `__...`, left out)."""
    saved_model = saved_model_pb2.SavedModel()
    with open(os.path.join(saved_model_dir, "saved_model.pb"), "rb") as handle:
        saved_model.ParseFromString(handle.read())
    graph = next(graph for graph in saved_model.meta_graphs
                 if "serve" in graph.meta_info_def.tags)
    return {name: ({key: tf.TensorSpec(tf.TensorShape(info.tensor_shape), info.dtype, key)
                    for key, info in signature.inputs.items()}, sorted(signature.outputs))
            for name, signature in graph.signature_def.items() if not name.startswith("__")}


def signature_inputs(saved_model_dir: str) -> dict[str, dict[str, tf.TensorSpec]]:
    """Signature name -> its input name -> `TensorSpec` (dtype and shape), as saved."""
    return {name: inputs for name, (inputs, _) in read_signatures(saved_model_dir).items()}


def rest_request(signature: str, specs: dict[str, tf.TensorSpec],
                 values: dict[str, Any]) -> dict:
    """The JSON body of a REST predict call in TF Serving's columnar ("inputs") format, each
    value converted to its input's dtype (strings as UTF-8 text)."""
    inputs = {}
    for name, spec in specs.items():
        tensor = tf.constant(values[name], dtype=spec.dtype)
        inputs[name] = ([item.decode("utf-8") for item in tensor.numpy().tolist()]
                        if spec.dtype == tf.string else tensor.numpy().tolist())
    return {"signature_name": signature, "inputs": inputs}


def grpc_request(model_name: str, signature: str, specs: dict[str, tf.TensorSpec],
                 values: dict[str, Any], label: Optional[str] = None
                 ) -> predict_pb2.PredictRequest:
    """A `PredictRequest` for `PredictionService/Predict`: `signature` of the model
    `model_name` (its version labelled `label`; None: the newest), with `values` as the
    tensors `specs` describe."""
    request = predict_pb2.PredictRequest()
    request.model_spec.name = model_name
    request.model_spec.signature_name = signature
    if label:
        request.model_spec.version_label = label
    for name, spec in specs.items():
        request.inputs[name].CopyFrom(tf.make_tensor_proto(values[name], dtype=spec.dtype))
    return request


def model_url(server: str, model_name: str, label: Optional[str] = None) -> str:
    """The REST address of `model_name` on `server` (HOST:PORT), of its version labelled
    `label` if given; ":predict" appended, it is the predict call's."""
    return (f"http://{server}/v1/models/{model_name}"
            + (f"/labels/{label}" if label else ""))


def rest_get(url: str, timeout: float) -> dict:
    """The JSON answer of a GET of `url` (e.g. a model's status), within `timeout` seconds."""
    with urllib.request.urlopen(url, timeout=timeout) as response:
        return json.load(response)


def rest_sender(url: str, body: dict, timeout: float) -> Callable[[], dict]:
    """A function that POSTs `body` as JSON to `url` and returns the JSON answer (an HTTP
    error raises `urllib.error.HTTPError`, whose body holds TF Serving's message)."""
    data = json.dumps(body).encode("utf-8")

    def send() -> dict:
        request = urllib.request.Request(url, data=data,
                                         headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return json.load(response)

    return send


def grpc_sender(channel: grpc.Channel, request: predict_pb2.PredictRequest,
                timeout: float) -> Callable[[], predict_pb2.PredictResponse]:
    """A function that sends `request` through `channel` to `PredictionService/Predict` and
    returns the `PredictResponse` (a failed call raises `grpc.RpcError`)."""
    stub = prediction_service_pb2_grpc.PredictionServiceStub(channel)
    return lambda: stub.Predict(request, timeout=timeout)


def output_names(answer: dict | predict_pb2.PredictResponse) -> list[str]:
    """The outputs a REST answer (columnar "outputs" or row "predictions") or a gRPC answer
    holds."""
    if isinstance(answer, predict_pb2.PredictResponse):
        return sorted(answer.outputs)
    outputs = answer.get("outputs", answer.get("predictions"))
    if isinstance(outputs, list):
        outputs = outputs[0] if outputs else {}
    return sorted(outputs) if isinstance(outputs, dict) else []


def measure(send: Callable[[], Any], expected_outputs: list[str], requests: int,
            max_seconds: float, concurrency: int = 1) -> tuple[list[float], float]:
    """Calls `send` from `concurrency` threads until `requests` calls were started or
    `max_seconds` have passed; returns each call's latency (seconds) and the elapsed time.
    Raises ValueError when an answer lacks the outputs `expected_outputs` names, or the
    first error a call raised."""
    if not 1 <= requests <= MAX_REQUESTS or not 1 <= concurrency <= MAX_CONCURRENCY:
        raise ValueError(f"requests: 1 to {MAX_REQUESTS:,} and concurrency: 1 to "
                         f"{MAX_CONCURRENCY}, got {requests} and {concurrency}")
    lock, latencies, active = threading.Lock(), [], [0]  # active: calls under way
    start = time.monotonic()
    deadline = start + max_seconds

    def worker() -> None:
        while True:
            with lock:
                if len(latencies) + active[0] >= requests or time.monotonic() >= deadline:
                    return
                active[0] += 1
            began = time.monotonic()
            answer = send()
            latency = time.monotonic() - began
            names = output_names(answer)
            with lock:
                active[0] -= 1
                latencies.append(latency)
            if names != expected_outputs:
                raise ValueError(f"the server answered outputs {names}, the export's "
                                 f"signature has {expected_outputs}")

    with concurrent.futures.ThreadPoolExecutor(concurrency) as pool:
        for future in [pool.submit(worker) for _ in range(concurrency)]:
            future.result()
    return latencies, time.monotonic() - start


def latency_report(latencies: list[float], seconds: float) -> dict[str, float]:
    """The count, the rate (per second over `seconds`) and the p50, p95 and p99 of
    `latencies` (seconds) in milliseconds."""
    p50, p95, p99 = np.percentile(np.asarray(latencies) * 1000.0, [50, 95, 99])
    return {"requests": len(latencies), "seconds": round(seconds, 3),
            "requests_per_second": round(len(latencies) / seconds, 2),
            "p50_ms": round(float(p50), 2), "p95_ms": round(float(p95), 2),
            "p99_ms": round(float(p99), 2)}


def parse_args(argv: list[str]) -> argparse.Namespace:
    """The command line's options (see the module docstring), checked."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("saved_model_dir", help="the export (a version directory NAME/N)")
    parser.add_argument("texts", nargs="+")
    parser.add_argument("--prefix", default="")
    parser.add_argument("--terms", default="")
    parser.add_argument("--send", choices=("rest", "grpc"),
                        help="send requests instead of printing the REST bodies")
    parser.add_argument("--server", help="--send: HOST:PORT (REST 8501, gRPC 8500 by default "
                                         "in TF Serving)")
    parser.add_argument("--model", help="--send: the served model's name (default: the "
                                        "export's directory name)")
    parser.add_argument("--label", help="--send: the version label to ask for (e.g. canary)")
    parser.add_argument("--signature", default="serving_default")
    parser.add_argument("--requests", type=int, default=100,
                        help=f"--send: at most this many requests (1 to {MAX_REQUESTS:,})")
    parser.add_argument("--max-seconds", type=float, default=60.0,
                        help="--send: stop starting requests after this many seconds")
    parser.add_argument("--concurrency", type=int, default=1,
                        help=f"--send: threads sending at once (1 to {MAX_CONCURRENCY})")
    parser.add_argument("--timeout", type=float, default=30.0,
                        help="--send: seconds one request may take")
    args = parser.parse_args(argv)
    if args.send and not args.server:
        parser.error("--server: needed with --send")
    if not 1 <= args.requests <= MAX_REQUESTS:
        parser.error(f"--requests: must be 1 to {MAX_REQUESTS:,}, got {args.requests}")
    if not 1 <= args.concurrency <= MAX_CONCURRENCY:
        parser.error(f"--concurrency: must be 1 to {MAX_CONCURRENCY}, got {args.concurrency}")
    if args.max_seconds <= 0 or args.timeout <= 0:
        parser.error("--max-seconds and --timeout: must be positive")
    return args


def send_requests(args: argparse.Namespace,
                  signatures: dict[str, tuple[dict[str, tf.TensorSpec], list[str]]],
                  values: dict[str, Any]) -> dict[str, Any]:
    """Sends `args.signature`'s request with the `values` of its inputs as the options `args`
    say (`signatures`: `read_signatures` of the export); returns the report `main` prints."""
    if args.signature not in signatures:
        raise ValueError(f"--signature: the export has no {args.signature!r} (it has "
                         f"{sorted(signatures)})")
    specs, outputs = signatures[args.signature]
    values = {key: values[key] for key in specs}
    model = args.model or os.path.basename(os.path.dirname(os.path.abspath(args.saved_model_dir)))
    report: dict[str, Any] = {"protocol": args.send, "server": args.server, "model": model,
                              "label": args.label, "signature": args.signature}
    if args.send == "rest":
        report["status"] = rest_get(model_url(args.server, model), args.timeout)
        send = rest_sender(model_url(args.server, model, args.label) + ":predict",
                           rest_request(args.signature, specs, values), args.timeout)
        latencies, seconds = measure(send, outputs, args.requests, args.max_seconds,
                                     args.concurrency)
    else:
        with grpc.insecure_channel(args.server) as channel:
            send = grpc_sender(channel, grpc_request(model, args.signature, specs, values,
                                                     args.label), args.timeout)
            latencies, seconds = measure(send, outputs, args.requests, args.max_seconds,
                                         args.concurrency)
    return {**report, **latency_report(latencies, seconds)}


def main(argv: list[str]) -> None:
    """Prints the REST body of each signature for the texts given, or with `--send` the
    latency report of the requests sent (`--prefix P`: the start that
    `translate_with_prefix` forces on each translation, default none; `--terms T`: the target
    phrases `translate_with_terms` places in each, default none)."""
    args = parse_args(argv)
    examples = {"text": args.texts, "prefix": [args.prefix] * len(args.texts),
                "terms": [args.terms] * len(args.texts),
                "source_ids": [[20, 21, 22, 0], [30, 0, 0, 0]]}
    signatures = read_signatures(args.saved_model_dir)
    if args.send:
        print(json.dumps(send_requests(args, signatures, examples)))
        return
    for name, (specs, _) in signatures.items():
        values = {key: examples[key] for key in specs}
        print(json.dumps(rest_request(name, specs, values), ensure_ascii=False))


if __name__ == "__main__":
    main(sys.argv[1:])
