"""Terminology through the TranslationModule's `translate_with_terms` signature, its SavedModel,
kt-translate's `--terms` and `--constraints`, and the glossary's parsing and matching."""
import io
import logging

import pytest
import tensorflow as tf

import keras_transformer as kt
from helpers import random_run
from keras_transformer.data.tokenizer import SubwordTokenizer
from keras_transformer.decoding.terminology import Glossary, read_constraints, sentence_terms
from keras_transformer.decoding.translator import TranslationModule
from keras_transformer.serving.export import export_translator
from trainers import translate

TEXTS = ["I have forty-two apples", "She sees three dogs", "", "one cat", "two birds"]
TERMS = ["Hund", "", "Katze", "drei\tKatzen", "Vögel\tgestern\tzwei"]


@pytest.fixture(scope="module")
def tokenizer(demo_vocab):
    return SubwordTokenizer.load(demo_vocab)


@pytest.fixture(scope="module")
def model(tokenizer):
    model = kt.Transformer(kt.TransformerConfig.preset(
        "tiny", vocab_size=tokenizer.vocab_size, max_length=32, num_layers=1))
    model.set_weights([weight * 3.0 for weight in model.get_weights()])  # varied outputs
    return model


def decoded(values) -> list[str]:
    return [value.decode("utf-8") for value in values.numpy().tolist()]


def test_each_translation_contains_its_terms_and_the_others_are_unchanged(model, tokenizer):
    translator = TranslationModule(model, tokenizer, kt.SearchSettings(beam_size=3,
                                                                max_decode_extra=12))
    out = translator.translate_with_terms(tf.constant(TEXTS), tf.constant(TERMS))
    plain = translator.translate(tf.constant(TEXTS))
    missing = decoded(out["missing_terms"])
    for row, (translation, terms) in enumerate(zip(decoded(out["translation"]), TERMS)):
        if not TEXTS[row]:  # an empty source: an empty translation lacking every term
            assert translation == "" and missing[row] == terms
            continue
        assert missing[row] == ""
        for term in filter(None, terms.split("\t")):
            assert term in translation, (row, term, translation)
    assert decoded(out["translation"])[1] == decoded(plain["translation"])[1]
    assert float(out["score"][1]) == pytest.approx(float(plain["score"][1]), abs=1e-6)


def test_terms_that_do_not_fit_the_length_limit_are_named(model, tokenizer):
    translator = TranslationModule(model, tokenizer, kt.SearchSettings(beam_size=2,
                                                                max_decode_extra=0))
    many = "\t".join(["Hund", "Katze", "Vögel", "gestern gesehen", "dreihundert"])
    out = translator.translate_with_terms(tf.constant(["one cat"]), tf.constant([many]))
    translation, missing = decoded(out["translation"])[0], decoded(out["missing_terms"])[0]
    assert missing
    for term in many.split("\t"):  # each term is in the translation or named missing
        assert (term in translation) != (term in missing.split("\t"))


def test_a_sampling_translator_places_terms_with_the_beam_search_of_its_beam_size(model,
                                                                               tokenizer):
    """Terms are placed by a search: a translator that samples constrains as the beam search
    of its beam size does."""
    beam = kt.SearchSettings(beam_size=3, max_decode_extra=12)
    sampling = kt.SearchSettings(beam_size=3, max_decode_extra=12, sampling=True, top_k=5,
                                 sampling_seed=1)
    outputs = [TranslationModule(model, tokenizer, settings).translate_with_terms(
        tf.constant(TEXTS), tf.constant(TERMS)) for settings in (beam, sampling)]
    for key in ("translation", "missing_terms"):
        assert decoded(outputs[1][key]) == decoded(outputs[0][key])


@pytest.mark.slow
def test_the_savedmodel_and_an_xla_translator_constrain_as_the_python_search(
        model, tokenizer, tmp_path):
    settings = kt.SearchSettings(beam_size=3, max_decode_extra=12)
    expected = TranslationModule(model, tokenizer, settings).translate_with_terms(
        tf.constant(TEXTS), tf.constant(TERMS))
    xla = TranslationModule(model, tokenizer, settings, jit_compile=True).translate_with_terms(
        tf.constant(TEXTS), tf.constant(TERMS))
    path = export_translator(model, tokenizer, "terms", tmp_path, settings)
    served = tf.saved_model.load(str(path)).signatures["translate_with_terms"](
        text=tf.constant(TEXTS), terms=tf.constant(TERMS))
    for out in (xla, served):
        assert decoded(out["translation"]) == decoded(expected["translation"])
        assert decoded(out["missing_terms"]) == decoded(expected["missing_terms"])


def test_a_glossary_applies_its_longest_matching_source_phrases(tmp_path):
    path = tmp_path / "glossary.txt"
    path.write_text("# product names\nsea lion ||| Seelöwe\nlion ||| Löwe\n\n"
                    "cat ||| Katze\nNew York ||| New York\n", encoding="utf-8")
    glossary = Glossary.read(path)
    assert glossary.terms("a sea lion and a lion") == ["Seelöwe", "Löwe"]
    assert glossary.terms("the sea lion") == ["Seelöwe"]
    assert glossary.terms("concatenate cats") == []  # whole words only
    assert glossary.terms("a cat in New York, a cat") == ["Katze", "New York"]
    assert sentence_terms(["a cat", "dogs"], glossary, [["Hund"], ["Hund", "Katze"]]) == [
        "Katze\tHund", "Hund\tKatze"]


def test_a_glossary_s_first_entry_matches_after_a_byte_order_mark_and_repeats_are_named(
        tmp_path, caplog):
    path = tmp_path / "glossary.txt"
    path.write_text("\ufeffcat ||| Katze\ndog ||| Hund\n# again\ncat ||| Kater\n",
                    encoding="utf-8")
    with caplog.at_level(logging.WARNING):
        glossary = Glossary.read(path)
    assert glossary.terms("a cat and a dog") == ["Katze", "Hund"]
    assert [record.getMessage() for record in caplog.records
            if "again" in record.getMessage()] == [
        f"{path}:4: the source phrase 'cat' again (first at {path}:1); the first entry "
        "applies, this one is ignored"]
    constraints = tmp_path / "constraints.de"
    constraints.write_text("\ufeffHund\tKatze\n", encoding="utf-8")
    assert read_constraints(constraints, 1) == [["Hund", "Katze"]]


@pytest.mark.parametrize("line, problem", [
    ("cat Katze", "expected 'source phrase ||| target phrase'"),
    ("cat ||| Katze ||| Kater", "expected 'source phrase ||| target phrase'"),
    (" ||| Katze", "an empty source phrase"),
    ("cat |||  ", "an empty target phrase"),
    ("cat ||| Kat\tze", "a tab")])
def test_a_malformed_glossary_line_is_named(tmp_path, line, problem):
    path = tmp_path / "glossary.txt"
    path.write_text(f"dog ||| Hund\n{line}\n", encoding="utf-8")
    with pytest.raises(ValueError, match=f"{path}:2: {problem}"):
        Glossary.read(path)


def test_constraints_must_have_a_line_per_sentence(tmp_path):
    path = tmp_path / "constraints.txt"
    path.write_text("Hund\tKatze\n\nzwei\n", encoding="utf-8")
    assert read_constraints(path, 3) == [["Hund", "Katze"], [], ["zwei"]]
    with pytest.raises(ValueError, match=f"{path}: 3 lines of constraints for 4 sentences"):
        read_constraints(path, 4)


@pytest.mark.slow
def test_kt_translate_places_the_terms_and_warns_of_those_it_could_not(demo_vocab, tmp_path,
                                                                       capsys):
    run_dir = random_run(demo_vocab, tmp_path / "run")
    source = tmp_path / "input.en"
    source.write_text("one cat\nthree dogs\nseven birds\n", encoding="utf-8")
    glossary = tmp_path / "glossary.txt"
    glossary.write_text("cat ||| Katze\ndogs ||| Hunde\n", encoding="utf-8")
    constraints = tmp_path / "constraints.de"
    constraints.write_text("\n\nsieben\tVögel\n", encoding="utf-8")
    stdout = io.StringIO()
    code = translate.main([str(run_dir.root), str(source), "--terms", str(glossary),
                           "--constraints", str(constraints), "--beam-size", "3",
                           "--max-decode-extra", "10", "--quiet"], stdout=stdout)
    lines = stdout.getvalue().split("\n")[:-1]
    assert code == 0 and len(lines) == 3
    assert "Katze" in lines[0] and "Hunde" in lines[1]
    assert "sieben" in lines[2] and "Vögel" in lines[2]

    capsys.readouterr()
    many = tmp_path / "many.de"  # more pieces than the length limit leaves room for
    many.write_text("\n\nsieben\tVögel\tgestern gesehen\tdreihundertsiebzig\n",
                    encoding="utf-8")
    code = translate.main([str(run_dir.root), str(source), "--constraints", str(many),
                           "--max-decode-extra", "0", "--quiet"], stdout=io.StringIO())
    err = capsys.readouterr().err
    assert code == 0 and f"{source}:3: not placed before the length limit: " in err
    assert f"{source}:1:" not in err and f"{source}:2:" not in err

    broken = tmp_path / "broken.txt"
    broken.write_text("cat Katze\n", encoding="utf-8")
    assert translate.main([str(run_dir.root), str(source), "--terms", str(broken)]) == 2
    assert f"{broken}:1: expected" in capsys.readouterr().err
