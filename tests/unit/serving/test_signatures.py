"""The export's n-best and alignment signatures: consistent with the best-translation ones, and
(on the trained demo model) meaningful."""
import gc
import weakref

import numpy as np
import pytest
import tensorflow as tf

import keras_transformer as kt
from keras_transformer.data.tokenizer import SubwordTokenizer
from keras_transformer.decoding.alignment import AlignmentHeads
from keras_transformer.decoding.translator import TranslationModule
from keras_transformer.serving.export import export_translator
from helpers import ROOT

TEXTS = ["I have forty-two apples", "", "She sees three dogs today", "one cat"]


@pytest.fixture(scope="module")
def tokenizer(demo_vocab):
    return SubwordTokenizer.load(demo_vocab)


@pytest.fixture(scope="module")
def signatures(tokenizer, tmp_path_factory):
    model = kt.Transformer(kt.TransformerConfig.preset(
        "tiny", vocab_size=tokenizer.vocab_size, max_length=24, num_layers=2))
    path = export_translator(model, tokenizer, "demo", tmp_path_factory.mktemp("exports"),
                             kt.SearchSettings(beam_size=3, max_decode_extra=5))
    return tf.saved_model.load(path).signatures


@pytest.mark.slow
def test_nbest_text_lists_the_beam_best_first(signatures):
    nbest = signatures["translate_nbest"](text=tf.constant(TEXTS))
    best = signatures["serving_default"](text=tf.constant(TEXTS))
    assert nbest["nbest_translations"].shape == (len(TEXTS), 3)
    assert nbest["nbest_translations"][:, 0].numpy().tolist() == \
        best["translation"].numpy().tolist()
    scores = nbest["nbest_scores"].numpy()
    np.testing.assert_allclose(scores[:, 0], best["score"].numpy(), atol=1e-6)
    assert np.all(np.diff(scores, axis=1) <= 1e-6)


@pytest.mark.slow
def test_alignment_covers_each_target_piece_with_a_source_piece(signatures, tokenizer):
    out = signatures["translate_with_alignment"](text=tf.constant(TEXTS))
    best = signatures["serving_default"](text=tf.constant(TEXTS))
    assert out["translation"].numpy().tolist() == best["translation"].numpy().tolist()
    np.testing.assert_allclose(out["score"].numpy(), best["score"].numpy(), atol=1e-6)
    for row, text in enumerate(TEXTS):
        source = [p for p in out["source_pieces"][row].numpy().tolist() if p]
        target = out["target_pieces"][row].numpy().tolist()
        alignment = out["alignment"][row].numpy()
        expected = tokenizer.id_to_piece(tokenizer.tokenize(tf.constant([text]))[0].numpy())
        assert [p.decode() for p in source] == expected + ["</s>"]
        real = np.array([bool(piece) for piece in target])
        assert np.all(alignment[~real] == -1)
        assert np.all((alignment[real] >= 0) & (alignment[real] < len(source)))
        # The pieces are those of the best hypothesis `translate_ids` finds.
        source_ids = tokenizer.tokenize(tf.constant([text])).to_tensor()
        if text:
            ids = signatures["translate_ids"](source_ids=tf.cast(source_ids, tf.int32))["ids"]
            ids = [i for i in ids[0].numpy().tolist() if i != kt.PAD_ID]
            assert [p.decode() for p in np.array(target)[real]] == tokenizer.id_to_piece(ids)


@pytest.mark.slow
def test_prefix_starts_the_translation_verbatim_and_an_empty_one_changes_nothing(signatures):
    prefixes = ["Ein Mann", "", "zwei Hunde und", ""]
    out = signatures["translate_with_prefix"](text=tf.constant(TEXTS),
                                              prefix=tf.constant(prefixes))
    best = signatures["serving_default"](text=tf.constant(TEXTS))
    translations = [t.decode() for t in out["translation"].numpy()]
    free = [t.decode() for t in best["translation"].numpy()]
    for row, (text, prefix) in enumerate(zip(TEXTS, prefixes)):
        if not text:  # an empty source stays empty whatever the prefix
            assert translations[row] == "" and out["score"][row] == 0.0
        elif prefix:
            assert translations[row].startswith(prefix), (prefix, translations[row])
        else:
            assert translations[row] == free[row]
            assert abs(out["score"][row] - best["score"][row]) < 1e-6


def test_alignment_layer_is_checked(tokenizer):
    model = kt.Transformer(kt.TransformerConfig.preset("tiny", vocab_size=tokenizer.vocab_size))
    with pytest.raises(ValueError, match="alignment layer: 2 is not a layer"):
        TranslationModule(model, tokenizer, alignment=AlignmentHeads(2))


@pytest.mark.slow
def test_trained_demo_model_aligns_number_words_with_their_source(tokenizer):
    """The README's main job trains `runs/demo` (CI runs it before the tests): the German
    number word of its translation aligns with the English number's pieces, the noun with
    the noun."""
    from trainers.common import load_run_model

    run = ROOT / "runs" / "demo"
    if not (run / "model.weights.h5").is_file():
        pytest.skip(f"{run} holds no trained model (the README's main job writes it)")
    model, run_tokenizer = load_run_model(str(run))
    translator = TranslationModule(model, run_tokenizer, kt.SearchSettings(beam_size=4))
    out = translator.translate_with_alignment(tf.constant(["I have forty-two apples"]))
    assert out["translation"].numpy()[0].decode() == "ich habe zweiundvierzig Äpfel"
    source = [p.decode() for p in out["source_pieces"][0].numpy()]
    aligned = {piece.decode(): source[index] for piece, index in
               zip(out["target_pieces"][0].numpy(), out["alignment"][0].numpy()) if piece}
    number = [piece for piece in aligned if "zweiundvierzig" in piece]
    assert number and all(aligned[piece].strip("\u2581-") in ("forty", "two")
                          for piece in number)
    assert aligned["\u2581Äpfel"].startswith("\u2581apple")


@pytest.mark.slow
def test_trained_demo_model_continues_a_prefix_with_the_source_meaning(tokenizer):
    """A forced start that is not the model's own ("wir" for "I") is kept verbatim, and the
    rest still translates the source: the number word and the noun follow."""
    from trainers.common import load_run_model

    run = ROOT / "runs" / "demo"
    if not (run / "model.weights.h5").is_file():
        pytest.skip(f"{run} holds no trained model (the README's main job writes it)")
    model, run_tokenizer = load_run_model(str(run))
    translator = TranslationModule(model, run_tokenizer, kt.SearchSettings(beam_size=4))
    texts = tf.constant(["I have forty-two apples", "I have forty-two apples"])
    out = translator.translate_with_prefix(texts, tf.constant(["ich habe", "wir haben"]))
    first, second = [t.decode() for t in out["translation"].numpy()]
    assert first == "ich habe zweiundvierzig Äpfel"
    assert second.startswith("wir haben") and "zweiundvierzig Äpfel" in second
    assert out["score"][1] < out["score"][0]  # the forced start is less likely


def test_a_translator_used_inline_translates_as_one_kept_and_is_freed_after(tokenizer):
    model = kt.Transformer(kt.TransformerConfig.preset(
        "tiny", vocab_size=tokenizer.vocab_size, max_length=24, num_layers=1))
    settings = kt.SearchSettings(beam_size=2, max_decode_extra=5)
    inline = TranslationModule(model, tokenizer, settings).translate(tf.constant(TEXTS))
    kept = TranslationModule(model, tokenizer, settings)
    assert inline["translation"].numpy().tolist() == \
        kept.translate(tf.constant(TEXTS))["translation"].numpy().tolist()
    freed = weakref.ref(kept)
    del kept
    gc.collect()
    assert freed() is None
