"""Requests for a keras-transformer export served by TF Serving, built from the export's own
signature definitions: REST JSON bodies and gRPC `PredictRequest`s for each signature.

    python examples/serving_client.py saved_models/demo/1 "I have forty-two apples"

prints the REST request body (`POST http://HOST:8501/v1/models/NAME:predict`) of each
signature: the texts for those taking `text`, `--prefix` (default "") for
`translate_with_prefix`, example ids for `translate_ids`. With `tensorflow-serving-api` installed,
`grpc_request` builds the gRPC request for `PredictionService/Predict` (port 8500).
Needs only tensorflow and tensorflow_text.
"""
from __future__ import annotations

import argparse
import json
import sys
from typing import Any

import tensorflow as tf
import tensorflow_text  # noqa: F401  (registers the SentencePiece ops the export uses)


def signature_inputs(saved_model_dir: str) -> dict[str, dict[str, tf.TensorSpec]]:
    """Signature name -> its input name -> `TensorSpec` (dtype and shape), as saved."""
    loaded = tf.saved_model.load(saved_model_dir)
    return {name: dict(function.structured_input_signature[1])
            for name, function in loaded.signatures.items()}


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
                 values: dict[str, Any]):
    """A `PredictRequest` for `PredictionService/Predict` (needs tensorflow-serving-api)."""
    from tensorflow_serving.apis import predict_pb2

    request = predict_pb2.PredictRequest()
    request.model_spec.name = model_name
    request.model_spec.signature_name = signature
    for name, spec in specs.items():
        request.inputs[name].CopyFrom(tf.make_tensor_proto(values[name], dtype=spec.dtype))
    return request


def main(argv: list[str]) -> None:
    """Prints the REST body of each signature for the texts given (`--prefix P`: the start
    that `translate_with_prefix` forces on each translation, default none)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("saved_model_dir")
    parser.add_argument("texts", nargs="+")
    parser.add_argument("--prefix", default="")
    args = parser.parse_args(argv)
    examples = {"text": args.texts, "prefix": [args.prefix] * len(args.texts),
                "source_ids": [[20, 21, 22, 0], [30, 0, 0, 0]]}
    saved_model_dir = args.saved_model_dir
    for name, specs in signature_inputs(saved_model_dir).items():
        values = {key: examples[key] for key in specs}
        print(json.dumps(rest_request(name, specs, values), ensure_ascii=False))


if __name__ == "__main__":
    main(sys.argv[1:])
