"""Confidence (`keras_transformer.decoding.confidence`, `kt-score`): Bergamot's word and
sentence scores from teacher-forced token log-probabilities, which equal CTranslate2's
`score_batch` on the CTranslate2 export of the same model and the search's own scores; what
kt-score refuses, by name."""
import json
import shutil

import numpy as np
import pytest
import tensorflow as tf

import keras_transformer as kt
from helpers import random_run, text_lines
from keras_transformer.data import read_parallel, write_demo_corpus
from keras_transformer.data.languages import RunLanguages
from keras_transformer.decoding import greedy_decode, token_log_probs
from keras_transformer.decoding.confidence import confidence
from keras_transformer.search import length_divisor
from keras_transformer.training.loaded_run import load_run
from keras_transformer.training.run_dir import LANGUAGES_FILE
from trainers import export, score


def test_words_are_the_pieces_sentencepiece_joins_and_score_their_mean():
    """A word starts at a "▁" piece (or the first piece) and scores the mean of its pieces'
    log-probabilities; EOS is a token, not a word, and the sentence the mean of its words' and
    EOS's: an empty translation is as sure as its EOS, not surest."""
    scored = confidence(["n", "▁a", "▁ma", "n", "▁."], [-0.5, -1.0, -2.0, -4.0, -0.25, -3.0])
    assert scored.words == [("n", -0.5), ("a", -1.0), ("man", -3.0), (".", -0.25)]
    assert scored.sentence == pytest.approx((-0.5 - 1.0 - 3.0 - 0.25 - 3.0) / 5)
    assert scored.tokens[-1] == ("</s>", -3.0) and len(scored.tokens) == 6
    empty = confidence([], [-0.7])
    assert (empty.words, empty.tokens) == ([], [("</s>", -0.7)])
    assert empty.sentence == pytest.approx(-0.7)


@pytest.fixture(scope="module")
def scored_run(demo_vocab, tmp_path_factory):
    """A random run, demo pairs (their first 24) and kt-score's records of them."""
    root = tmp_path_factory.mktemp("scoring")
    run = random_run(demo_vocab, root / "run")
    sources, targets = (lines[:24] for lines in read_parallel(
        *write_demo_corpus(root / "demo")["test"]))
    targets[3] = ""  # an empty translation: its EOS alone
    files = [root / "test.en", root / "test.de"]
    for path, lines in zip(files, (sources, targets)):
        path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    output = root / "scores.jsonl"
    assert score.main([str(run.root), "--src", str(files[0]), "--tgt", str(files[1]),
                       "--output", str(output), "--batch-size", "5"]) == 0
    records = [json.loads(line) for line in output.read_text(encoding="utf-8").splitlines()]
    return {"run": run.root, "root": root, "sources": sources, "targets": targets,
            "records": records, "files": files}


def test_kt_scores_token_log_probs_are_ctranslate2s_score_batch(scored_run):
    """Every token's log-probability within 1e-4 of CTranslate2's `score_batch` on the
    model's CTranslate2 export (float32): an implementation we did not write."""
    ctranslate2 = pytest.importorskip("ctranslate2")
    base = scored_run["root"] / "exports"
    assert export.main([str(scored_run["run"]), "--name", "ct2", "--base-dir", str(base),
                        "--format", "ctranslate2", "--quantization", "float32"]) == 0
    translator = ctranslate2.Translator(str(base / "ct2" / "1"), device="cpu")
    tokenizer = load_run(scored_run["run"]).tokenizer
    pieces = [tokenizer.id_to_piece(ids) if ids else [] for ids in
              tokenizer.tokenize(tf.constant(scored_run["sources"])).to_list()]
    targets = [[token for token, _ in record["tokens"][:-1]] for record in scored_run["records"]]
    theirs = translator.score_batch(pieces, targets)
    assert len(theirs) == len(scored_run["records"]) == 24
    for record, result in zip(scored_run["records"], theirs):
        assert [token for token, _ in record["tokens"]] == [*result.tokens]
        np.testing.assert_allclose([value for _, value in record["tokens"]], result.log_probs,
                                   atol=1e-4)
    assert scored_run["records"][3]["words"] == [] and len(scored_run["records"][3]["tokens"]) == 1
    sentences = [record["sentence"] for record in scored_run["records"]]
    assert len(set(sentences)) > 20  # the scores differ: the comparison can fail


def test_the_searchs_score_is_the_sum_of_the_teacher_forced_log_probs(demo_vocab, tmp_path):
    """The greedy search's score of its own output is its tokens' teacher-forced
    log-probabilities summed and length-normalized (the cached search and the full pass agree)."""
    loaded = load_run(random_run(demo_vocab, tmp_path / "run").root)
    texts = read_parallel(*write_demo_corpus(tmp_path / "demo")["test"])[0][:8]
    piece_ids = loaded.tokenizer.tokenize(tf.constant(texts))
    sources = tf.concat([piece_ids, tf.fill([piece_ids.nrows(), 1], kt.EOS_ID)], 1).to_tensor()
    result = greedy_decode(loaded.model, sources, max_decode_extra=6)
    ids = result.ids[:, 0]
    log_probs = token_log_probs(loaded.model, sources, ids)
    lengths = tf.reduce_sum(tf.cast(tf.not_equal(ids, kt.PAD_ID), tf.int32), 1)
    np.testing.assert_allclose(tf.reduce_sum(log_probs, 1) / length_divisor(lengths, 0.6),
                               result.scores[:, 0], atol=1e-4)


def test_kt_score_refuses_what_it_cannot_score_by_name(scored_run, tmp_path, capsys):
    """Files of different lengths, a target longer than the model's positions and a model of
    several languages without --target-language are named; nothing is written. A source
    longer than the model takes is scored from its start, and the warning says so."""
    source, target = scored_run["files"]
    short = tmp_path / "short.de"
    short.write_text("ein Hund\n", encoding="utf-8")
    output = tmp_path / "out.jsonl"
    run = str(scored_run["run"])
    assert score.main([run, "--src", str(source), "--tgt", str(short), "--output",
                       str(output)]) == 2
    assert "has 24 lines, --tgt" in capsys.readouterr().err and not output.exists()
    long = tmp_path / "long.de"
    long.write_text("\n".join([" ".join(scored_run["targets"][:8])] * 24) + "\n",
                    encoding="utf-8")
    assert score.main([run, "--src", str(source), "--tgt", str(long), "--output",
                       str(output)]) == 2
    assert "target line 1: more subwords than the model's 23" in capsys.readouterr().err
    several = tmp_path / "several"
    shutil.copytree(run, several)
    (several / LANGUAGES_FILE).write_text(json.dumps(RunLanguages.trained(
        "source", {"de": 5, "fr": 6}, 1.0, []).to_dict()), encoding="utf-8")
    assert score.main([str(several), "--src", str(source), "--tgt", str(target), "--output",
                       str(output)]) == 2
    assert ("--target-language: " f"{str(several)!r}: target language: needed, the model "
            "translates into de, fr") in capsys.readouterr().err
    assert not output.exists()
    long_source = tmp_path / "long.en"
    long_source.write_text(" ".join(scored_run["sources"][:8]) + "\n", encoding="utf-8")
    short.write_text("ein Hund\n", encoding="utf-8")
    assert score.main([run, "--src", str(long_source), "--tgt", str(short), "--output",
                       str(output)]) == 0
    assert (f"{long_source}: 1 line longer than the model takes (max_length 24), scored from "
            "its first 23 subwords: line 1") in capsys.readouterr().err


def test_the_translators_confidence_is_bergamots_of_the_translations_own_tokens(scored_run):
    """`translate_with_scores`: the token scores are the search's own (summed and length-
    normalized they give its score), the words and their scores Bergamot's of those tokens
    (`confidence` on the translation's pieces), the sentence the mean of its words'."""
    from keras_transformer.decoding.confidence import confidence
    from keras_transformer.decoding.translator import TranslationModule

    loaded = load_run(scored_run["run"])
    translator = TranslationModule(loaded.model, loaded.tokenizer,
                            kt.SearchSettings(beam_size=1, max_decode_extra=6))
    texts = scored_run["sources"][:10] + [""]
    out = translator.translate_with_scores(tf.constant(texts))
    best = translator.translate_ids(loaded.tokenizer.tokenize(tf.constant(texts)).to_tensor())
    assert out["translation"].numpy().tolist() == translator.translate(
        tf.constant(texts))["translation"].numpy().tolist()
    for row in range(len(texts)):
        ids = [i for i in best["ids"][row].numpy().tolist() if i != kt.PAD_ID]
        tokens = out["token_scores"][row].numpy()[:len(ids)]
        if texts[row]:
            assert float(out["score"][row]) == pytest.approx(
                tokens.sum() / float(length_divisor(len(ids), 0.6)), abs=1e-4)
        piece_ids = ids[:-1] if ids and ids[-1] == kt.EOS_ID else ids  # the limit may come first
        expected = confidence(loaded.tokenizer.id_to_piece(piece_ids) if piece_ids else [],
                              [*tokens.tolist(), *[0.0] * (piece_ids == ids)])
        words = [word.decode() for word in out["words"][row].numpy().tolist() if word]
        assert words == [word for word, _ in expected.words]
        np.testing.assert_allclose(out["word_scores"][row].numpy()[:len(words)],
                                   [value for _, value in expected.words], atol=1e-6)
        if piece_ids != ids:  # ended by EOS: the sentence sees it
            assert float(out["confidence"][row]) == pytest.approx(expected.sentence, abs=1e-6)
    assert not out["words"][-1].numpy().any()  # the empty text: its EOS alone
    assert float(out["confidence"][-1]) == pytest.approx(float(out["token_scores"][-1][0]))


def test_kt_translate_writes_each_lines_confidence(scored_run, tmp_path, capsys):
    from trainers import translate

    source = scored_run["files"][0]
    scores, output = tmp_path / "scores.jsonl", tmp_path / "out.de"
    assert translate.main([str(scored_run["run"]), str(source), "--output", str(output),
                           "--scores", str(scores), "--quiet"]) == 0
    records = [json.loads(line) for line in scores.read_text(encoding="utf-8").splitlines()]
    translations = text_lines(output)
    assert len(records) == len(translations) == 24
    for record, translation in zip(records, translations):
        assert bool(record["words"]) == bool(translation)
    with pytest.raises(SystemExit):
        translate.main([str(scored_run["run"]), str(source), "--scores", str(scores),
                        "--nbest", "2"])
    assert "--scores: not with --nbest" in capsys.readouterr().err


def test_kt_translate_scores_constrained_translations_as_kt_score_scores_them(
        scored_run, demo_vocab, tmp_path, capsys):
    """--scores with --constraints: each record's sentence and words are kt-score's of the
    line and its constrained translation, its score the constrained search's; a line without
    constraints gets the translation and the record of --scores alone (where its text reads
    back as the search's pieces). The random model's many byte pieces read back as three each
    (U+FFFD): its positions leave room for them; a model of fewer positions leaves such a
    translation unscored, naming its line."""
    from trainers import translate

    run, lines = str(random_run(demo_vocab, tmp_path / "run", max_length=128).root), \
        scored_run["sources"][:6]
    source, constraints = tmp_path / "in.en", tmp_path / "constraints.de"
    source.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    constraints.write_text("Hund\n\nKatze\tzwei\n\n\n\n", encoding="utf-8")
    outputs = {}
    for name, extra in (("constrained", ["--constraints", str(constraints)]), ("free", [])):
        outputs[name] = (tmp_path / f"{name}.de", tmp_path / f"{name}.jsonl")
        assert translate.main([run, str(source), "--output", str(outputs[name][0]), "--scores",
                               str(outputs[name][1]), "--quiet", "--max-decode-extra", "8",
                               *extra]) == 0
    records, texts = ({name: function(paths[index]) for name, paths in outputs.items()}
                      for index, function in ((1, lambda path: [json.loads(line) for line in
                                                                 path.read_text().splitlines()]),
                                              (0, text_lines)))
    assert "Hund" in texts["constrained"][0] and "Katze" in texts["constrained"][2]
    scored = tmp_path / "kt-score.jsonl"
    assert score.main([run, "--src", str(source), "--tgt", str(outputs["constrained"][0]),
                       "--output", str(scored)]) == 0
    for record, expected in zip(records["constrained"], map(json.loads,
                                                            scored.read_text().splitlines())):
        assert record["words"] == expected["words"]
        assert record["sentence"] == pytest.approx(expected["sentence"], abs=1e-6)
    assert "not scored" not in capsys.readouterr().err
    free_rows = [1, 3, 4, 5]
    assert [texts["constrained"][row] for row in free_rows] == [
        texts["free"][row] for row in free_rows]
    for row in free_rows:
        ours, theirs = records["constrained"][row], records["free"][row]
        assert ours["score"] == pytest.approx(theirs["score"], abs=1e-4)
        if [word for word, _ in ours["words"]] == [word for word, _ in theirs["words"]]:
            assert ours["sentence"] == pytest.approx(theirs["sentence"], abs=1e-4)
    assert translate.main([str(scored_run["run"]), str(source), "--constraints",
                           str(constraints), "--scores", str(outputs["free"][1]), "--output",
                           str(outputs["free"][0]), "--quiet", "--max-decode-extra", "8"]) == 0
    unscored = [row for row, line in enumerate(outputs["free"][1].read_text().splitlines())
                if json.loads(line)["sentence"] is None]
    assert unscored and (f"--scores: {source}: line{'s' if len(unscored) > 1 else ''} "
                         f"{', '.join(str(row + 1) for row in unscored)}: the constrained "
                         "translation reads back as more subwords") in capsys.readouterr().err


def test_scores_of_constrained_translations_are_refused_by_an_export(tmp_path):
    from keras_transformer.serving.text_translation import LineTranslator
    from trainers import translate
    from trainers.translate_documents import LineFlags

    source = tmp_path / "in.en"
    source.write_text("one cat\n", encoding="utf-8")
    flags = LineFlags(constraints=[str(source)], scores=[str(tmp_path / "s.jsonl")])
    export = LineTranslator(None, None, None, translate_terms=print, translate_scored=print)
    with pytest.raises(ValueError, match="--scores with --constraints: .* is an export; the "
                                         "confidence of a constrained translation"):
        translate.check_translator(export, str(tmp_path), flags, [["one"]])
