"""Corpus translation as a data job: a killed and restarted job writes what an uninterrupted one
writes, shards join into one job's output, and a restart with another input, chunking or
teacher is refused naming what differs (the job with a stand-in translator, then
kt-translate-corpus with a real run; its process killed by a signal:
tests/system/test_resumed_corpus_translation.py)."""
import dataclasses
from pathlib import Path

import pytest

from helpers import kt_translate_corpus, random_run
from keras_transformer.distillation.corpus_translation import CorpusTranslation, Shard
from keras_transformer.decoding.translator import TranslationModule
from keras_transformer.evaluation import sentence_bleu
from keras_transformer.serving.text_translation import (LineTranslator, best_lines, closest_lines,
                                                length_batches, output_line)
from trainers.common import load_run_model

TEACHER = {"runs": [{"weights_sha256": "ab"}], "search": {"beam_size": 4}}
LINES = [f"sentence {index} " * (1 + index % 5) for index in range(47)]


def reversed_words(lines: list[bytes]) -> list[str]:
    """A deterministic stand-in teacher."""
    return [" ".join(reversed(line.decode("utf-8", "replace").split())) for line in lines]


@pytest.fixture
def corpus(tmp_path) -> Path:
    path = tmp_path / "train.en"
    lines = [line.encode() for line in LINES]
    lines[5], lines[9] = b"", b"caf\xc3 broken \xff"  # an empty line, invalid UTF-8
    path.write_bytes(b"\n".join(lines) + b"\n")
    return path


class Crash(Exception):
    """The stand-in for a kill."""


def crashing_after(chunks: int, calls: list):
    """`reversed_words` that dies (mid-write of nothing) at chunk `chunks`, like a kill."""
    def translate(lines, references=None):
        if len(calls) == chunks:
            raise Crash()
        calls.append(len(lines))
        return reversed_words(lines)
    return translate


def test_a_job_killed_half_way_and_restarted_writes_the_uninterrupted_output(corpus, tmp_path):
    whole = CorpusTranslation(corpus, tmp_path / "whole.de", TEACHER, chunk_lines=10)
    report = whole.run(reversed_words)
    assert report.complete and report.chunks_translated == 5 and report.invalid_lines == [10]
    expected = (tmp_path / "whole.de").read_bytes()
    assert expected.count(b"\n") == len(LINES) and expected.split(b"\n")[5] == b""

    output = tmp_path / "resumed.de"
    calls: list = []
    with pytest.raises(Crash):
        CorpusTranslation(corpus, output, TEACHER, chunk_lines=10).run(crashing_after(2, calls))
    assert not output.exists()
    parts = output.with_name("resumed.de.parts")
    (parts / ".chunk-000002.txt.tmp1234").write_bytes(b"half a chu")  # a torn temporary
    restarted: list = []
    report = CorpusTranslation(corpus, output, TEACHER, chunk_lines=10).run(
        crashing_after(99, restarted))
    assert (report.chunks_found, report.chunks_translated) == (2, 3)
    assert restarted == [10, 10, 7] and report.complete
    assert output.read_bytes() == expected


def test_shards_together_equal_one_job(corpus, tmp_path):
    CorpusTranslation(corpus, tmp_path / "one.de", TEACHER, chunk_lines=6).run(reversed_words)
    output = tmp_path / "sharded.de"
    seen = []
    for index in (1, 2, 3):
        job = CorpusTranslation(corpus, output, TEACHER, chunk_lines=6)
        report = job.run(lambda lines: seen.append(lines) or reversed_words(lines),
                         Shard(index, 3))
        assert report.complete == (index == 3) and output.exists() == (index == 3)
    assert sum(map(len, seen)) == len(LINES)
    assert output.read_bytes() == (tmp_path / "one.de").read_bytes()
    assert CorpusTranslation(corpus, output, TEACHER, chunk_lines=6).run(
        lambda lines: pytest.fail("nothing is left to translate")).complete


@pytest.mark.parametrize("change, named", [("input", "input_sha256"),
                                           ("teacher", "teacher"),
                                           ("chunk_lines", "chunk_lines")])
def test_a_restart_with_other_input_teacher_or_chunking_is_refused(corpus, tmp_path, change,
                                                                   named):
    output = tmp_path / "out.de"
    with pytest.raises(Crash):
        CorpusTranslation(corpus, output, TEACHER, 10).run(crashing_after(1, []))
    teacher, chunk_lines = TEACHER, 10
    if change == "input":
        corpus.write_bytes(corpus.read_bytes().replace(b"sentence 3 ", b"sentence 33 ", 1))
    elif change == "teacher":
        teacher = {**TEACHER, "search": {"beam_size": 5}}
    else:
        chunk_lines = 11
    with pytest.raises(ValueError, match=f"another input, teacher or reference.*{named}: .* "
                                         "when the partial output was written"):
        CorpusTranslation(corpus, output, teacher, chunk_lines).run(reversed_words)


def test_references_reach_the_teacher_line_for_line_and_restarts_keep_them(corpus, tmp_path):
    reference = tmp_path / "train.de"
    reference.write_text("".join(f"reference {index}\n" for index in range(len(LINES))))

    def beside_reference(lines, references):
        return [f"{ref.decode()} | {line.decode('utf-8', 'replace')}"
                for line, ref in zip(lines, references)]

    whole = tmp_path / "whole.de"
    assert CorpusTranslation(corpus, whole, TEACHER, 10, reference).run(beside_reference).complete
    assert whole.read_text().splitlines() == beside_reference(
        corpus.read_bytes().split(b"\n")[:-1], reference.read_bytes().split(b"\n")[:-1])

    output = tmp_path / "out.de"
    with pytest.raises(Crash):
        CorpusTranslation(corpus, output, TEACHER, 10, reference).run(crashing_after(1, []))
    with pytest.raises(ValueError, match="reference_sha256: .* when the partial output"):
        CorpusTranslation(corpus, output, TEACHER, 10).run(reversed_words)
    reference.write_text(reference.read_text().replace("reference 33", "reference 34"))
    with pytest.raises(ValueError, match="reference_sha256: .* when the partial output"):
        CorpusTranslation(corpus, output, TEACHER, 10, reference).run(beside_reference)
    reference.write_text("".join(f"reference {index}\n" for index in range(len(LINES) - 1)))
    with pytest.raises(ValueError, match=f"reference: '{reference}' has 46 lines, the input "
                                         f"'{corpus}' 47: they must be line-aligned"):
        CorpusTranslation(corpus, tmp_path / "new.de", TEACHER, 10, reference).run(
            beside_reference)


class ListedTranslator:
    """A stand-in beam of 4: hypothesis i of a line is the line with its first i words
    dropped, scored -i."""

    beam_size = 4

    def __init__(self):
        self.batches: list[int] = []

    def nbest(self, texts, k):
        self.batches.append(len(texts))
        return [[(b" ".join(text.split()[i:]), -float(i)) for i in range(k)] for text in texts]


def test_closest_lines_keeps_the_hypothesis_nearest_each_reference():
    lines = [" ".join(f"w{index}x{word}" for word in range(3 + index % 4)).encode()
             for index in range(9)]
    translator = ListedTranslator()
    wanted = [index % 4 for index in range(9)]  # the hypothesis each reference copies
    references = [b" ".join(line.split()[drop:]) + b" extra" for line, drop in
                  zip(lines, wanted)]
    chosen = closest_lines(translator, lines, references, sentence_bleu, batch_size=4)
    assert chosen == [" ".join(line.decode().split()[drop:]) for line, drop in
                      zip(lines, wanted)]
    assert translator.batches == [4, 4, 1]
    # Equally close hypotheses: the better-scored one.
    assert closest_lines(translator, [b"a b c d"], [b"z"], lambda *_: 0.0) == ["a b c d"]
    with pytest.raises(ValueError, match="references: 1 for 2 lines"):
        closest_lines(translator, [b"a", b"b"], [b"a"], sentence_bleu)


@pytest.mark.parametrize("text", ["3/2", "0/2", "2", "a/b", "1/0"])
def test_shards_out_of_range_are_named(text):
    with pytest.raises(ValueError, match="shard: "):
        Shard.parse(text)


def test_a_translator_that_loses_lines_stops_the_job(corpus, tmp_path):
    with pytest.raises(RuntimeError, match="9 outputs for the 10 lines of chunk 0"):
        CorpusTranslation(corpus, tmp_path / "out.de", TEACHER, 10).run(
            lambda lines: reversed_words(lines)[1:])
    assert not list((tmp_path / "out.de.parts").glob("chunk-*"))


@pytest.mark.slow
def test_kt_translate_corpus_closest_to_reference(demo_vocab, demo_train, tmp_path, capsys):
    """With references made of the second hypotheses of the run's model (its beam of 3, the
    command's batches), the command outputs `closest_lines`' choice, not the best; a search
    without a beam, or a reference of other length, is refused by name."""
    run = random_run(demo_vocab, tmp_path / "teacher")
    model, tokenizer = load_run_model(str(run.root))
    settings = dataclasses.replace(run.load_recipe().search, beam_size=3, max_decode_extra=5)
    translator = LineTranslator.from_translator(TranslationModule(model, tokenizer, settings))
    sources = [line.encode() for line in demo_train[0][:30]]
    seconds = [""] * len(sources)
    for batch in length_batches([len(line.split()) for line in sources], 64, 6000):
        for index, hypotheses in zip(batch, translator.nbest([sources[i] for i in batch], 3)):
            seconds[index] = output_line(hypotheses[1][0])
    corpus, reference = tmp_path / "train.en", tmp_path / "train.de"
    corpus.write_bytes(b"\n".join(sources) + b"\n")
    reference.write_text("\n".join(seconds) + "\n", encoding="utf-8")
    common = [str(run.root), str(corpus), "--max-decode-extra", "5", "--closest-to-reference",
              str(reference)]
    code, err = kt_translate_corpus(capsys, *common, "--beam-size", "3", "--output",
                                    str(tmp_path / "out.de"))
    assert code == 0 and "complete" in err, err
    # Degenerate texts (control characters only) score 0 even against themselves: the
    # selection, not the second hypotheses, is what the command must reproduce.
    expected = closest_lines(translator, sources, [line.encode() for line in seconds],
                             sentence_bleu)
    assert expected != best_lines(translator, sources)
    assert (tmp_path / "out.de").read_text(encoding="utf-8").split("\n") == expected + [""]

    code, err = kt_translate_corpus(capsys, *common, "--beam-size", "1", "--output",
                                    str(tmp_path / "greedy.de"))
    assert code == 2 and "--closest-to-reference: needs a beam search of 2 or more" in err
    reference.write_text("one line\n", encoding="utf-8")
    code, err = kt_translate_corpus(capsys, *common, "--output", str(tmp_path / "short.de"))
    assert code == 2 and f"reference: '{reference}' has 1 lines" in err
