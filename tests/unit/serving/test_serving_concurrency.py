"""One loaded export called from many threads at once (as TF Serving does) gives exactly the
outputs of sequential calls."""
from concurrent.futures import ThreadPoolExecutor

import pytest
import numpy as np
import tensorflow as tf

import keras_transformer as kt
from keras_transformer.data.tokenizer import SubwordTokenizer
from keras_transformer.serving.export import export_translator

TEXTS = ["I have forty-two apples", "", "She sees three dogs today", "one cat",
         "seventeen green pears and a dog", "we have two hundred and eleven chairs"]


@pytest.mark.slow
def test_concurrent_calls_equal_sequential_ones(demo_vocab, tmp_path):
    tokenizer = SubwordTokenizer.load(demo_vocab)
    model = kt.Transformer(kt.TransformerConfig.preset(
        "tiny", vocab_size=tokenizer.vocab_size, max_length=24, num_layers=1))
    path = export_translator(model, tokenizer, "demo", tmp_path,
                             kt.SearchSettings(beam_size=2, max_decode_extra=5))
    serving = tf.saved_model.load(path).signatures["serving_default"]
    # Requests of different sizes and contents, so that interleaved calls would show.
    requests = [TEXTS[i % len(TEXTS):] + TEXTS[:i % 3] for i in range(32)]

    def call(texts):
        out = serving(text=tf.constant(texts))
        return out["translation"].numpy().tolist(), out["score"].numpy()

    sequential = [call(texts) for texts in requests]
    with ThreadPoolExecutor(max_workers=8) as pool:
        concurrent = list(pool.map(call, requests))
    for (texts_a, scores_a), (texts_b, scores_b) in zip(sequential, concurrent):
        assert texts_a == texts_b
        np.testing.assert_array_equal(scores_a, scores_b)
