"""TF Serving warm-up records: every signature of every export, each padded width of an XLA
export up to the limit, as the exported `TranslationModule` measures widths."""
import os

import pytest
import tensorflow as tf
from tensorflow_serving.apis import prediction_log_pb2

import keras_transformer as kt
from keras_transformer.data.tokenizer import SubwordTokenizer
from keras_transformer.decoding.translator import TranslationModule
from keras_transformer.serving.export import export_translator
from keras_transformer.serving.warmup import WARMUP_FILE, warmup_widths

SIGNATURES = {"serving_default", "translate_ids", "translate_nbest", "translate_with_prefix",
              "translate_with_terms", "translate_with_scores", "translate_with_alignment"}


def read_requests(export: str) -> list:
    """The `PredictRequest`s of an export's warm-up file, as TF Serving reads them."""
    records = tf.data.TFRecordDataset(os.path.join(export, WARMUP_FILE))
    logs = [prediction_log_pb2.PredictionLog.FromString(record.numpy()) for record in records]
    assert all(log.WhichOneof("log_type") == "predict_log" for log in logs)
    return [log.predict_log.request for log in logs]


def source_width(translator: TranslationModule, request) -> int:
    """The padded width the XLA search is given for `request`'s source, as the export pads it."""
    if "source_ids" in request.inputs:
        source = translator._source_ids(tf.RaggedTensor.from_tensor(
            tf.make_ndarray(request.inputs["source_ids"]), padding=0))
    else:
        source = translator._text_source(tf.constant(tf.make_ndarray(request.inputs["text"])),
                                         None, None)
    return int(translator._padded_width(source[0]).shape[1])


@pytest.fixture(scope="module")
def tokenizer(demo_vocab) -> SubwordTokenizer:
    return SubwordTokenizer.load(demo_vocab)


def model_of(tokenizer: SubwordTokenizer, max_length: int) -> kt.Transformer:
    return kt.Transformer(kt.TransformerConfig.preset(
        "tiny", vocab_size=tokenizer.vocab_size, max_length=max_length, num_layers=1))


def test_widths_are_multiples_of_16_capped_by_the_model():
    assert warmup_widths(70, True, 64) == [16, 32, 48, 64]
    assert warmup_widths(40, True, 64) == [16, 32, 40]
    assert warmup_widths(256, True, 20) == [16]
    assert warmup_widths(256, False, 64) == [16]
    assert warmup_widths(10, False) == [10]


@pytest.mark.slow
@pytest.mark.parametrize("max_length,limit", [(70, 64), (24, 64)])
def test_xla_export_warms_every_signature_at_every_padded_width(tokenizer, tmp_path,
                                                                max_length, limit):
    model = model_of(tokenizer, max_length)
    settings = kt.SearchSettings(beam_size=2, max_decode_extra=3)
    export = export_translator(model, tokenizer, "xla", tmp_path, settings, jit_compile=True,
                               warmup_max_width=limit)
    requests = read_requests(export)
    translator = TranslationModule(model, tokenizer, settings, jit_compile=True)
    widths = warmup_widths(max_length, True, limit)
    seen: dict[str, list[int]] = {}
    for request in requests:
        seen.setdefault(request.model_spec.signature_name, []).append(
            source_width(translator, request))
    assert set(seen) == SIGNATURES
    for name, found in seen.items():
        # translate_with_prefix twice per width: prefix widths 0 and 16.
        assert sorted(found) == sorted(widths * (2 if name == "translate_with_prefix" else 1))
    prefixes = [tf.make_ndarray(request.inputs["prefix"]).tolist() for request in requests
                if "prefix" in request.inputs]
    empty = sum(prefix == [b""] for prefix in prefixes)
    assert (empty, len(prefixes)) == (len(widths), 2 * len(widths))


@pytest.mark.slow
def test_graph_export_warms_each_signature_once(tokenizer, tmp_path):
    export = export_translator(model_of(tokenizer, 70), tokenizer, "graph", tmp_path,
                               kt.SearchSettings(beam_size=1))
    names = [request.model_spec.signature_name for request in read_requests(export)]
    assert sorted(names) == sorted([*SIGNATURES, "translate_with_prefix"])
    loaded = tf.saved_model.load(export).signatures
    for request in read_requests(export):
        specs = loaded[request.model_spec.signature_name].structured_input_signature[1]
        assert set(request.inputs) == set(specs)
        for key, proto in request.inputs.items():
            assert tf.dtypes.as_dtype(proto.dtype) == specs[key].dtype
