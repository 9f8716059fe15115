"""Corpus translation as a data job: a killed and restarted job writes what an uninterrupted one
writes, shards join into one job's output, and a restart with another input, chunking or
teacher is refused naming what differs (the job with a stand-in translator, then
kt-translate-corpus with a real run, killed by a signal)."""
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import random_run
from keras_transformer.corpus_translation import CorpusTranslation, Shard

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
    def translate(lines):
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
    with pytest.raises(ValueError, match=f"another input or teacher.*{named}: .* when the "
                                         "partial output was written"):
        CorpusTranslation(corpus, output, teacher, chunk_lines).run(reversed_words)


@pytest.mark.parametrize("text", ["3/2", "0/2", "2", "a/b", "1/0"])
def test_shards_out_of_range_are_named(text):
    with pytest.raises(ValueError, match="shard: "):
        Shard.parse(text)


def test_a_translator_that_loses_lines_stops_the_job(corpus, tmp_path):
    with pytest.raises(RuntimeError, match="9 outputs for the 10 lines of chunk 0"):
        CorpusTranslation(corpus, tmp_path / "out.de", TEACHER, 10).run(
            lambda lines: reversed_words(lines)[1:])
    assert not list((tmp_path / "out.de.parts").glob("chunk-*"))


def kt_translate_corpus(*arguments: str, wait: bool = True):
    command = [sys.executable, "-m", "trainers", "translate_corpus", *arguments]
    process = subprocess.Popen(command, cwd=Path(__file__).parents[1], stderr=subprocess.PIPE,
                               text=True)
    if wait:
        _, err = process.communicate(timeout=600)
        return process.returncode, err
    return process


@pytest.mark.slow
def test_kt_translate_corpus_killed_by_a_signal_resumes_exactly(demo_vocab, demo_train,
                                                                tmp_path):
    """A real run translating the demo corpus: killed (SIGKILL) once chunks are written,
    restarted with the same command, it writes the uninterrupted run's bytes; two shards
    write them too; another search setting or a bad shard is refused by name."""
    run = random_run(demo_vocab, tmp_path / "teacher")
    corpus = tmp_path / "train.en"
    corpus.write_text("\n".join(demo_train[0][:1500]) + "\n", encoding="utf-8")
    common = [str(run.root), str(corpus), "--chunk-lines", "50", "--beam-size", "2",
              "--max-decode-extra", "5"]
    code, err = kt_translate_corpus(*common, "--output", str(tmp_path / "whole.de"))
    assert code == 0 and "complete" in err, err
    expected = (tmp_path / "whole.de").read_bytes()
    assert expected.count(b"\n") == 1500

    output = tmp_path / "killed.de"
    process = kt_translate_corpus(*common, "--output", str(output), wait=False)
    parts = output.with_name("killed.de.parts")
    deadline = time.monotonic() + 300
    while len(list(parts.glob("chunk-*.txt"))) < 3 and time.monotonic() < deadline:
        time.sleep(0.05)
    os.kill(process.pid, signal.SIGKILL)
    process.wait()
    written = len(list(parts.glob("chunk-*.txt")))
    assert 3 <= written < 30 and not output.exists()
    code, err = kt_translate_corpus(*common, "--output", str(output))
    assert code == 0 and f"{written} chunk(s) written before" in err, err
    assert output.read_bytes() == expected

    sharded = tmp_path / "sharded.de"
    for shard in ("2/2", "1/2"):
        code, err = kt_translate_corpus(*common, "--output", str(sharded), "--shard", shard)
        assert code == 0, err
    assert sharded.read_bytes() == expected

    code, err = kt_translate_corpus(*common[:-2], "--max-decode-extra", "6",
                                    "--output", str(sharded))
    assert code == 2 and "teacher" in err and "max_decode_extra" in err
    code, err = kt_translate_corpus(*common, "--output", str(sharded), "--shard", "3/2")
    assert code == 2 and "--shard: 3/2 is not a shard I/N" in err
