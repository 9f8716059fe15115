"""Scoring (sacreBLEU, chrF, Multi30k tokenized BLEU) and the evaluate/average command lines."""
from types import SimpleNamespace

import pytest
import tensorflow as tf

from keras_transformer.data import write_demo_corpus
from keras_transformer.evaluation import (corpus_scores, tokenized_lowercase_bleu,
                                          translate_corpus)
from trainers import average_checkpoints, evaluate, train
from helpers import final_json

REFERENCES = ["Ein Mann mit einem orangefarbenen Hut, der etwas anstarrt.",
              "Zwei Hunde spielen im \"hohen\" Gras."]
TOKENIZED = ["ein mann mit einem orangefarbenen hut , der etwas anstarrt .",
             "zwei hunde spielen im &quot; hohen &quot; gras ."]


def test_scores_carry_signatures_and_rank_hypotheses():
    perfect = corpus_scores(REFERENCES, REFERENCES)
    assert [score.name for score in perfect] == ["BLEU", "CHRF"]
    assert perfect[0].value == pytest.approx(100.0)
    assert "tok:13a" in perfect[0].signature and "case:mixed" in perfect[0].signature
    worse = corpus_scores(["Ein Mann mit Hut.", "Hunde spielen."], REFERENCES)
    assert all(w.value < p.value for w, p in zip(worse, perfect))


def test_translating_a_corpus_reports_each_batch():
    """What kt-evaluate's progress lines count: each batch's sentences once translated."""
    translator = SimpleNamespace(translate=lambda texts: {"translation": tf.constant(
        [text.upper() for text in texts])})
    sizes = []
    sources = [f"sentence {index}" for index in range(10)]
    assert translate_corpus(translator, sources, 4, sizes.append) == [
        text.upper() for text in sources]
    assert sorted(sizes) == [2, 4, 4]


def test_tokenized_bleu_lowercases_and_tokenizes_detokenized_output():
    assert tokenized_lowercase_bleu(REFERENCES, TOKENIZED).value == pytest.approx(100.0)
    cased_bleu = corpus_scores([text.lower() for text in REFERENCES], REFERENCES)[0].value
    assert cased_bleu < 100.0  # the cased score does see the case difference
    assert tokenized_lowercase_bleu(["ein mann", "zwei hunde"], TOKENIZED).value < 50.0


def test_tokenized_hypotheses_get_one_note_and_no_sacrebleu_hint(caplog, monkeypatch):
    """The benchmark's Moses form is scored as it is: one note per process (not sacreBLEU's
    three-line hint at every evaluation), and the scores are sacreBLEU's."""
    import sacrebleu

    from keras_transformer import evaluation

    monkeypatch.setattr(evaluation, "_NOTED_TOKENIZED", False)
    hypotheses = [f"a man rides bike number {index} ." for index in range(150)]
    references = [f"a man rides a bike number {index} ." for index in range(150)]
    with caplog.at_level("INFO"):
        first = corpus_scores(hypotheses, references)
        corpus_scores(hypotheses, references)
    notes = [record for record in caplog.records if "look tokenized" in record.message]
    assert len(notes) == 1
    assert not [record for record in caplog.records if record.name.startswith("sacrebleu")]
    expected = sacrebleu.BLEU().corpus_score(hypotheses, [references]).score
    assert first[0].value == pytest.approx(expected)


def test_mismatched_lengths_are_rejected():
    with pytest.raises(ValueError, match="1 hypotheses but 2 references"):
        corpus_scores(["x"], REFERENCES)




@pytest.mark.slow
def test_train_average_evaluate_round_trip(tmp_path, capsys):
    paths = write_demo_corpus(tmp_path / "data")
    run_dir = tmp_path / "run"
    assert train.main([
        "--set", "vocab_size=400", "--set", "d_model=32", "--set", "d_ff=64",
        "--set", "num_layers=1", "--set", "batch_tokens=512", "--set", "max_length=48",
        "--train-src", paths["train"][0], "--train-tgt", paths["train"][1],
        "--dev-src", paths["dev"][0], "--dev-tgt", paths["dev"][1], "--steps", "6",
        "--eval-every", "6", "--eval-sentences", "4", "--attention-sentences", "0",
        "--checkpoint-every-steps", "2", "--keep-checkpoints", "3", "--no-export",
        "--output-dir", str(run_dir)]) == 0
    assert sorted(p.name for p in (run_dir / "checkpoints").iterdir()) == [
        "ckpt-00000002.weights.h5", "ckpt-00000004.weights.h5", "ckpt-00000006.weights.h5"]
    capsys.readouterr()
    assert average_checkpoints.main([str(run_dir), "--last", "3"]) == 0
    assert (run_dir / "averaged.weights.h5").is_file()
    assert average_checkpoints.main([str(run_dir), "--last", "4"]) == 2
    assert "only 3 checkpoint(s)" in capsys.readouterr().err

    hypotheses = tmp_path / "test.hyp"
    assert evaluate.main([str(run_dir), "--src", paths["test"][0], "--ref", paths["test"][1],
                          "--tokenized-ref", paths["test"][1], "--beam-size", "2",
                          "--hypotheses", str(hypotheses)]) == 0
    captured = capsys.readouterr()
    result = final_json(captured.out)
    assert result["sentences"] == 500
    assert "kt-evaluate: translating: 500/500 sentences, " in captured.err  # progress
    assert len(hypotheses.read_text(encoding="utf-8").splitlines()) == 500
    assert set(result) >= {"BLEU", "CHRF", "tokenized lowercase BLEU", "signatures"}
    assert "nrefs:1" in result["signatures"]["BLEU"]

    # An ensemble of the run with itself decodes as the run alone.
    ensembled = tmp_path / "ensemble.hyp"
    assert evaluate.main([str(run_dir), "--src", paths["test"][0], "--ref", paths["test"][1],
                          "--beam-size", "2", "--ensemble", str(run_dir),
                          "--hypotheses", str(ensembled)]) == 0
    assert ensembled.read_text(encoding="utf-8") == hypotheses.read_text(encoding="utf-8")
