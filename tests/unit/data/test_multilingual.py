"""Several language pairs in one model: the target-language token reaches each pair's batches
(and survives word dropout), pairs drawn by temperature in the stated shares with exact resumes
and per-worker streams, a vocabulary balanced over the languages with the tokens reserved, and
the options refused by name. That a model trained on the three made-up languages translates
into the one asked for is tested with its serving (test_multilingual_serving.py), on the same
trained runs."""
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf

from keras_transformer.data import SubwordTokenizer
from keras_transformer.data.batch_plan import BatchPlan
from keras_transformer.data.languages import (AskedLanguages, LanguageError, LanguagePair,
                                              LanguageTokenizer, RunLanguages, asked_languages,
                                              chosen_languages, language_token,
                                              language_token_ids, reserved_tokens,
                                              sample_language_sentences)
from keras_transformer.data.pair_sampling import BLOCK, PairSampling, temperature_shares
from keras_transformer.data.prepare import prepare, text_file_source
from keras_transformer.config import BOS_ID, EOS_ID, PAD_ID, UNK_ID
from keras_transformer.training.run_dir import RunDir
from trainers import train
from keras_transformer.training.settings import recorded_options
from trainers.train_arguments import parse_args
from helpers import LEARNS, LANGUAGE_PAIRS, TARGETS, pair_args, three_language_corpus


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Path]]:
    """The corpus, split -> language -> file: train 3,000 lines, dev and test 40."""
    return three_language_corpus(tmp_path_factory.mktemp("three_languages"))


@pytest.fixture(scope="module")
def vocabulary(corpus) -> SubwordTokenizer:
    """A vocabulary of the four languages with the three target-language tokens."""
    texts = [line for path in corpus["train"].values()
             for line in path.read_text(encoding="utf-8").splitlines()]
    pairs = [LanguagePair.parse(name) for name in LANGUAGE_PAIRS]
    return SubwordTokenizer.train(texts, 380, None, reserved=reserved_tokens(pairs))


@pytest.fixture(scope="module")
def storages(corpus, vocabulary, tmp_path_factory) -> dict[str, tuple]:
    """Each pair's storage (its first 200, 800 and all 3,000 lines: three sizes), with its
    token first in every source, and its token id."""
    directory = tmp_path_factory.mktemp("pair_storages")
    ids = language_token_ids(vocabulary, list(TARGETS), "the test vocabulary")
    found = {}
    for name, lines in zip(LANGUAGE_PAIRS, (200, 800, 3000)):
        files = []
        for language in ("en", name.split("-")[1]):
            path = directory / f"{name}.{language}"
            text = corpus["train"][language].read_text(encoding="utf-8").splitlines()[:lines]
            path.write_text("\n".join(text) + "\n", encoding="utf-8")
            files.append(path)
        token = ids[name.split("-")[1]]
        found[name] = (prepare(text_file_source(*files), directory / name, vocabulary,
                               prefixes=([token], [])), token)
    return found


def sampling(storages, temperature: float, seed: int = 0, word_dropout: float = 0.0,
             placement: str = "source") -> PairSampling:
    """A `PairSampling` over `storages` (batches of 256 tokens)."""
    plans = {name: BatchPlan(storage, 256, 24, seed, word_dropout=word_dropout)
             for name, (storage, _) in storages.items()}
    prefixes = {name: ([token], []) if placement == "source" else ([], [token])
                for name, (_, token) in storages.items()}
    return PairSampling(plans, temperature, seed, prefixes)


def test_temperature_shares_follow_the_formula():
    np.testing.assert_allclose(temperature_shares([100, 300, 600], 1.0), [0.1, 0.3, 0.6])
    np.testing.assert_allclose(temperature_shares([100, 400], 2.0), [1 / 3, 2 / 3])
    np.testing.assert_allclose(temperature_shares([100, 300, 600], float("inf")), [1 / 3] * 3)
    np.testing.assert_allclose(temperature_shares([10 ** 9, 1], 0.01), [1, 0], atol=1e-12)
    for temperature in (0.0, -1.0, float("nan")):
        with pytest.raises(ValueError, match="temperature: must be positive"):
            temperature_shares([1, 2], temperature)


@pytest.mark.parametrize("temperature", [1.0, 5.0, float("inf")])
def test_pairs_are_drawn_in_the_stated_shares(storages, temperature):
    """Over 40,000 batches each pair's share is within 0.015 of `temperature_shares` of the
    pairs' batches per epoch (the binomial's standard deviation: at most 0.0025), and every
    batch read is of the pair drawn: its sources start with that pair's token."""
    plan = sampling(storages, temperature)
    sizes = [plan.plans[name].batches_per_epoch for name in LANGUAGE_PAIRS]
    assert len(set(sizes)) == 3
    expected = temperature_shares(sizes, temperature)
    drawn = np.concatenate([plan.choices(block) for block in range(40_000 // BLOCK)])
    np.testing.assert_allclose(np.bincount(drawn, minlength=3) / len(drawn), expected,
                               atol=0.015)
    tokens = {name: token for name, (_, token) in storages.items()}
    stream = plan.elements(0)
    for _ in range(300):
        element, ((source, _), _) = next(stream)
        assert (source[:, 0] == tokens[plan.pair_of(element)]).all()


@pytest.mark.parametrize("first", [1, 333, BLOCK - 2, BLOCK + 700])
def test_a_resume_gives_the_uninterrupted_batches_and_workers_split_them(storages, first):
    """The stream from any element equals an uninterrupted stream's from there (across a
    block of draws too), and two workers' streams are its even and odd elements."""
    plan = sampling(storages, 2.0, seed=7, word_dropout=0.2)
    count = 16
    uninterrupted = plan.elements(0, lambda element: element >= first)
    expected = [next(uninterrupted) for _ in range(count)]
    assert [element for element, _ in expected] == list(range(first, first + count))
    resumed = sampling(storages, 2.0, seed=7, word_dropout=0.2).elements(first)
    workers = [sampling(storages, 2.0, seed=7, word_dropout=0.2).elements(
        first, lambda element, worker=worker: element % 2 == worker) for worker in range(2)]
    for element, batch in expected:
        for stream in (resumed, workers[element % 2]):
            got_element, got = next(stream)
            assert got_element == element
            for want, have in zip(tf.nest.flatten(batch), tf.nest.flatten(got)):
                np.testing.assert_array_equal(want, have)


def test_the_token_survives_word_dropout_and_is_no_label_in_the_target(storages, corpus,
                                                                        vocabulary, tmp_path):
    """Word dropout never replaces the token; placed first in the target it follows BOS in
    the decoder's input and its label is padding (trained on the words alone)."""
    tokens = {name: token for name, (_, token) in storages.items()}
    plan = sampling(storages, 1.0, word_dropout=0.9)
    stream = plan.elements(0)
    for _ in range(40):
        element, ((source, _), _) = next(stream)
        assert (source[:, 0] == tokens[plan.pair_of(element)]).all()
        assert (source[:, 1:] == UNK_ID).any()  # dropout did run
    token = tokens["en-up"]
    storage = prepare(text_file_source(corpus["dev"]["en"], corpus["dev"]["up"]), tmp_path,
                      vocabulary, prefixes=([], [token]))
    target_first = PairSampling({"en-up": BatchPlan(storage, 256, 24, 0, word_dropout=0.9)},
                                1.0, 0, {"en-up": ([], [token])})
    for _ in range(3):
        _, ((source, target_in), target_out) = next(target_first.elements(0))
        assert (target_in[:, 0] == BOS_ID).all() and (target_in[:, 1] == token).all()
        assert (target_out[:, 0] == PAD_ID).all() and (target_out[:, 1] > EOS_ID).all()
        assert (source != token).all()


def test_the_vocabulary_reserves_one_piece_per_target_language(vocabulary, corpus):
    """Each token is a piece of its own with an id right after the special ones; a
    vocabulary without them is refused naming where it is."""
    ids = language_token_ids(vocabulary, sorted(TARGETS), "the test vocabulary")
    assert sorted(ids.values()) == [4, 5, 6]
    assert vocabulary.id_to_piece(list(ids.values())) == [language_token(language)
                                                          for language in ids]
    plain = SubwordTokenizer.train([line for path in corpus["train"].values()
                                    for line in path.read_text().splitlines()], 370, None)
    with pytest.raises(ValueError, match=r"the plain vocabulary has no piece '<2up>'"):
        language_token_ids(plain, ["up"], "the plain vocabulary")


def test_the_vocabulary_sample_takes_as_many_sentences_of_each_language(corpus):
    """English is the source of all three pairs (three times the lines of each target
    language) yet gives the same number of sentences as each of them."""
    sources = {name: text_file_source(corpus["train"]["en"], corpus["train"][name[3:]])
               for name in LANGUAGE_PAIRS}
    sides = [(language, sources[name], side) for name in LANGUAGE_PAIRS
             for side, language in enumerate(("en", name[3:]))]
    texts = list(sample_language_sentences(sides, 4 * 500, seed=0))
    counts = {language: sum(text in lines for text in texts)
              for language, lines in (("up", set(corpus["train"]["up"].read_text().split("\n"))),
                                      ("rv", set(corpus["train"]["rv"].read_text().split("\n"))),
                                      ("dd", set(corpus["train"]["dd"].read_text().split("\n"))))}
    assert len(texts) == 2000 and counts == {"up": 500, "rv": 500, "dd": 500}
    assert texts == list(sample_language_sentences(sides, 4 * 500, seed=0))
    assert texts != list(sample_language_sentences(sides, 4 * 500, seed=1))


def test_a_language_tokenizer_puts_the_tokens_where_the_placement_says(vocabulary):
    """`RunLanguages.pair_prefixes` per placement (and with the source language's token, as
    NLLB reads it), applied by `LanguageTokenizer`."""
    token = language_token_ids(vocabulary, ["up"], "the test vocabulary")["up"]
    texts = tf.constant(["big cat", "SUN"])
    plain = vocabulary.tokenize(texts).to_list()
    pair = LanguagePair("rv", "up")
    source = RunLanguages("source", {"up": token, "rv": 7}, {"up": "<2up>", "rv": "<2rv>"})
    target = RunLanguages("target", {"up": token, "rv": 7}, {"up": "<2up>", "rv": "<2rv>"})
    both = RunLanguages("target", {"up": token, "rv": 7}, {"up": "up", "rv": "rv"},
                        source_language_token=True)
    assert [languages.pair_prefixes(pair) for languages in (source, target, both)] == [
        ([token], []), ([], [token]), ([7], [token])]
    for languages in (source, target, both):
        tokenizer = LanguageTokenizer(vocabulary, languages.pair_prefixes(pair))
        prefix_source, prefix_target = languages.pair_prefixes(pair)
        assert tokenizer.tokenize(texts).to_list() == [prefix_source + ids for ids in plain]
        assert tokenizer.tokenize_target(texts).to_list() == [prefix_target + ids
                                                              for ids in plain]
    with pytest.raises(ValueError, match="source language 'cs': the model translates from"):
        both.pair_prefixes(LanguagePair("cs", "up"))
    with pytest.raises(ValueError, match="source_language_token: .* \"target\" placement"):
        RunLanguages("source", {"up": token}, {"up": "up"}, source_language_token=True)


@pytest.mark.parametrize("seed", range(3))
def test_the_source_token_asked_for_starts_the_row_in_place_of_the_texts_own(seed):
    """`RunLanguages.with_source_tokens` on random batches (empty rows and batches, rows that
    start with a language token or not, rows asking for none) as a graph traces it, against
    the rule written per row."""
    languages = RunLanguages.trained("source", {"dd": 4, "rv": 5, "up": 6}, 1.0, [])
    placed = tf.function(languages.with_source_tokens)
    rng = np.random.default_rng(seed)
    for _ in range(20):
        rows = [[int(i) for i in rng.integers(4, 10, rng.integers(0, 4))]
                for _ in range(rng.integers(0, 5))]
        tokens = [int(token) for token in rng.choice([-1, 4, 5, 6], len(rows))]
        pieces = tf.RaggedTensor.from_row_lengths(
            tf.constant(sum(rows, []), tf.int32), [len(row) for row in rows])
        expected = [row if token < 0 else [token] + row[row[:1] in ([4], [5], [6]):]
                    for row, token in zip(rows, tokens)]
        assert placed(pieces, tf.constant(tokens, tf.int32)).to_list() == expected


def test_an_unknown_target_language_is_refused_by_name():
    languages = RunLanguages.trained("source", {"de": 4, "fr": 5}, 1.0, [])
    assert RunLanguages.from_dict(languages.to_dict()) == languages
    assert languages.token_id("fr") == 5
    with pytest.raises(ValueError, match=r"target language 'cs': the model translates into "
                                         r"de, fr only"):
        languages.token_id("cs")


NLLB_LIKE = RunLanguages("target", {"eng_Latn": 5, "zho_Hans": 6, "zho_Hant": 7},
                         {"eng_Latn": "eng_Latn", "zho_Hans": "zho_Hans", "zho_Hant": "zho_Hant"},
                         source_language_token=True)
OPUS_LIKE = RunLanguages("source", {"fra": 4, "deu": 5}, {"fra": ">>fra<<", "deu": ">>deu<<"},
                         optional=True)


@pytest.mark.parametrize("languages, target, source, asked", [
    (None, None, None, AskedLanguages()),
    (OPUS_LIKE, None, None, AskedLanguages("", None, None, None)),
    (OPUS_LIKE, "deu", None, AskedLanguages("deu", None, 5, None)),
    (NLLB_LIKE, "eng", "zho_Hant", AskedLanguages("eng_Latn", "zho_Hant", 5, 7)),
])
def test_a_requests_languages_are_the_models_codes_and_tokens(languages, target, source, asked):
    assert asked_languages(languages, target, source) == asked


@pytest.mark.parametrize("languages, target, source, side, message", [
    (None, "de", None, "target", "target language 'de': the model translates into one"),
    (None, None, "en", "source", "source language 'en': the model reads no source language"),
    (OPUS_LIKE, "deu", "fra", "source", "source language 'fra': the model reads no source"),
    (OPUS_LIKE, "cs", None, "target", "target language 'cs': the model translates into deu, fra"),
    (NLLB_LIKE, None, "eng", "target", "target language: needed, the model translates into"),
    (NLLB_LIKE, "eng", None, "source", "source language: needed, the model translates from"),
    (NLLB_LIKE, "eng", "zho", "source", "source language: language 'zho' is ambiguous: the "
                                        "model has zho_Hans, zho_Hant"),
    (NLLB_LIKE, "xho_Latn", "eng", "target", "target language 'xho_Latn': the model translates "
                                             "into eng_Latn, zho_Hans, zho_Hant only"),
])
def test_a_request_names_the_language_the_model_cannot_take(languages, target, source, side,
                                                             message):
    with pytest.raises(LanguageError, match=message) as raised:
        asked_languages(languages, target, source)
    assert raised.value.side == side
    with pytest.raises(LanguageError, match=f"--{side}-language: 'runs/x': {message}"):
        chosen_languages(languages, target, source, "'runs/x'")


@pytest.mark.parametrize("extra, message", [
    (["--train-src", "a", "--train-tgt", "b"], "--pair: cannot be combined with --train-src"),
    (["--prepared", "p"], "--pair: cannot be combined with --prepared"),
    (["--dev-pair", "en-fr", "d", "e"], "--dev-pair en-fr: no --pair en-fr to evaluate"),
    (["--pair", "en-de", "x", "y"], "--pair en-de: given twice"),
    (["--pair", "en", "x", "y"], "--pair en: 'en' is not a language pair"),
    (["--pair", "de-de", "x", "y"], "--pair de-de: 'de-de' is not a language pair"),
    (["--pair-temperature", "0"], "--pair-temperature: must be positive"),
    (["--language-token", "middle"], "--language-token: invalid choice"),
])
def test_bad_pair_options_are_refused_by_name(capsys, extra, message):
    with pytest.raises(SystemExit):
        parse_args(["--pair", "en-de", "t.en", "t.de", "--dev-pair", "en-de", "d.en", "d.de",
                    *extra])
    assert message in capsys.readouterr().err


@pytest.mark.parametrize("argv, message", [
    (["--pair", "en-de", "t.en", "t.de"], "--dev-pair: missing for en-de"),
    (["--pair-temperature", "0"], "--pair-temperature: only with --pair"),
    (["--language-token", "target"], "--language-token: only with --pair"),
    (["--dev-pair", "en-de", "d.en", "d.de"], "--dev-pair: only with --pair"),
])
def test_pair_options_go_together(capsys, argv, message):
    with pytest.raises(SystemExit):
        parse_args(argv)
    assert message in capsys.readouterr().err


def test_a_missing_training_file_is_named_and_nothing_is_written(corpus, tmp_path, capsys):
    argv = (LEARNS + pair_args(corpus, "train", "dev")
            + ["--pair", "en-xx", str(tmp_path / "missing.en"), str(corpus["train"]["up"]),
               "--dev-pair", "en-xx", str(corpus["dev"]["en"]), str(corpus["dev"]["up"]),
               "--output-dir", str(tmp_path / "run")])
    assert train.main(argv) == 2
    assert "missing.en" in capsys.readouterr().err
    assert not (tmp_path / "run").exists()


def test_a_restart_with_the_pairs_in_another_order_is_refused(corpus, tmp_path):
    """The order of the pairs is the order of the shares drawn: another one is another
    stream."""
    run = RunDir(tmp_path / "run")
    first = parse_args(pair_args(corpus, "train", "dev"))
    run.claim(first.recipe, recorded_options(first.data, first.options))
    reordered = parse_args([word for name in reversed(LANGUAGE_PAIRS) for word in (
        "--pair", name, str(corpus["train"]["en"]), str(corpus["train"][name[3:]]),
        "--dev-pair", name, str(corpus["dev"]["en"]), str(corpus["dev"][name[3:]]))])
    with pytest.raises(ValueError, match="run.json.*pairs"):
        run.check_claim(reordered.recipe, recorded_options(reordered.data, reordered.options))
