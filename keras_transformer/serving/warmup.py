"""TF Serving warm-up records for an export: `assets.extra/tf_serving_warmup_requests`.

TF Serving replays this file (a TFRecord file of `PredictionLog`s, each holding one
`PredictRequest`) when it loads a version, before the version takes traffic, so the costs of a
first call (graph optimization, kernel set-up, and for an XLA export a compilation per input
shape) are not paid by a client. Every signature gets a request: one sentence whose subwords
(with EOS) fill a padded width; `translate_with_prefix` once with an empty prefix and once with
a one-word prefix (prefix widths 0 and 16 of an XLA export), `translate_with_terms` with a
one-word term. A graph export runs any shape with
the same graph: one width, 16. An XLA export compiles each padded width (multiples of 16,
`TranslationModule`) at batch 1, the traffic it is made for: every width up to `max_width` source
pieces (`WARMUP_MAX_WIDTH`) and the model's `max_length`; longer inputs, and other batch sizes,
compile at their first request. TF Serving reads at most 1,000 records (5-6 per width here).

An export of a model of several target languages takes `target_language` in every request:
the requests above ask for its first language (in sorted order), and one `serving_default`
request per further language asks for that one (each language's token is looked up and runs
once before traffic; past 1,000 records in all, the further languages are left out).
"""
from __future__ import annotations

import os
from typing import Optional, Sequence

import tensorflow as tf
from tensorflow_serving.apis import predict_pb2, prediction_log_pb2

from keras_transformer.config import WARMUP_MAX_WIDTH
from keras_transformer.data.languages import RunLanguages
from keras_transformer.data.tokenizer import SubwordTokenizer

WARMUP_FILE = os.path.join("assets.extra", "tf_serving_warmup_requests")
WIDTH_STEP = 16  # the XLA search's padded widths are multiples of it (`TranslationModule`)
WORD = "a"  # the warm-up sentences repeat it: one or two pieces in any SentencePiece model
MAX_RECORDS = 1_000  # TF Serving refuses a warm-up file of more


def warmup_widths(max_length: int, jit_compile: bool,
                  max_width: int = WARMUP_MAX_WIDTH) -> list[int]:
    """The padded source widths the warm-up covers: for an XLA export (`jit_compile`) each
    multiple of 16 up to `max_width`, each at most the model's `max_length`; for a graph export
    the first only."""
    multiples = range(WIDTH_STEP, max(max_width, WIDTH_STEP) + 1, WIDTH_STEP)
    widths = sorted({min(width, max_length) for width in multiples})
    return widths if jit_compile else widths[:1]


def warmup_requests(signatures: dict[str, Sequence[tf.TensorSpec]],
                    tokenizer: SubwordTokenizer, widths: Sequence[int],
                    languages: Optional[RunLanguages] = None
                    ) -> list[predict_pb2.PredictRequest]:
    """One `PredictRequest` per signature and width (two for a signature taking `prefix`);
    with `languages` (a model of several target languages) these into the first language, and
    one `serving_default` request into each further one (at most `MAX_RECORDS` in all), from
    the first language where the model reads the source's too.

    `signatures`: signature name -> its input specs (each named as the input); `tokenizer`:
    the export's, which measures the sentences; `widths`: from `warmup_widths`.
    """
    codes = sorted(languages.token_ids) if languages else [""]
    # A language token first in the source takes a piece of the width.
    token_pieces = int(languages is not None and (languages.placement == "source"
                                                  or languages.source_language_token))
    requests = []
    for width in widths:
        text = _sentence(tokenizer, width - 1 - token_pieces)
        ids = tokenizer.tokenize(tf.constant([text])).to_tensor().numpy()
        for prefix in ("", WORD):
            values = {"text": [text], "source_ids": ids, "prefix": [prefix], "terms": [WORD],
                      "target_language": codes[:1], "source_language": codes[:1]}
            for name, specs in signatures.items():
                takes_prefix = any(spec.name == "prefix" for spec in specs)
                if prefix and not takes_prefix:
                    continue
                requests.append(_request(name, specs, values))
    text = _sentence(tokenizer, widths[0] - 1 - token_pieces)
    for code in codes[1:MAX_RECORDS - len(requests) + 1]:
        requests.append(_request("serving_default", signatures["serving_default"],
                                 {"text": [text], "target_language": [code],
                                  "source_language": codes[:1]}))
    return requests


def _request(name: str, specs: Sequence[tf.TensorSpec], values: dict
             ) -> predict_pb2.PredictRequest:
    """The request to the signature `name` of inputs `specs`, each input its entry of
    `values`."""
    request = predict_pb2.PredictRequest()
    request.model_spec.signature_name = name
    for spec in specs:
        request.inputs[spec.name].CopyFrom(tf.make_tensor_proto(values[spec.name],
                                                                dtype=spec.dtype))
    return request


def write_warmup_requests(saved_model_dir: str | os.PathLike,
                          requests: Sequence[predict_pb2.PredictRequest]) -> str:
    """Writes `requests` as the warm-up file of the SavedModel in `saved_model_dir`; returns
    its path."""
    path = os.path.join(os.fspath(saved_model_dir), WARMUP_FILE)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with tf.io.TFRecordWriter(path) as writer:
        for request in requests:
            log = prediction_log_pb2.PredictionLog(
                predict_log=prediction_log_pb2.PredictLog(request=request))
            writer.write(log.SerializeToString())
    return path


def _sentence(tokenizer: SubwordTokenizer, pieces: int) -> str:
    """`WORD` repeated to `pieces` subwords, or fewer by less than one word's pieces (at most
    2, so that the sentence and its EOS stay within the padded width of `pieces + 1`)."""
    per_word = int(tokenizer.tokenize(tf.constant([WORD])).row_lengths()[0])
    return " ".join([WORD] * max(1, pieces // per_word))
