"""kt-translate-corpus with a real run, its process killed by a signal: the same command run
again writes the uninterrupted run's bytes (the job itself, with a stand-in translator:
tests/unit/distillation/test_corpus_translation.py)."""
import subprocess
import time

import pytest

from helpers import kt_translate_corpus, random_run
from warm_commands import start_warm


@pytest.mark.slow
@pytest.mark.system
def test_kt_translate_corpus_killed_by_a_signal_resumes_exactly(demo_vocab, demo_train,
                                                                tmp_path, capsys, warm):
    """A real run translating the demo corpus: a process killed (SIGKILL) once chunks are
    written, the same command run again writes the uninterrupted run's bytes; two shards write
    them too; another search setting or a bad shard is refused by name. (The command runs in
    this process but for the killed one, started warm.)"""
    run = random_run(demo_vocab, tmp_path / "teacher")
    corpus = tmp_path / "train.en"
    corpus.write_text("\n".join(demo_train[0][:1500]) + "\n", encoding="utf-8")
    common = [str(run.root), str(corpus), "--chunk-lines", "50", "--beam-size", "2",
              "--max-decode-extra", "5"]
    code, err = kt_translate_corpus(capsys, *common, "--output", str(tmp_path / "whole.de"))
    assert code == 0 and "complete" in err, err
    expected = (tmp_path / "whole.de").read_bytes()
    assert expected.count(b"\n") == 1500

    output = tmp_path / "killed.de"
    process = start_warm(warm, "kt-translate-corpus", [*common, "--output", str(output)],
                         stderr=subprocess.DEVNULL)
    parts = output.with_name("killed.de.parts")
    deadline = time.monotonic() + 300
    while len(list(parts.glob("chunk-*.txt"))) < 3 and time.monotonic() < deadline:
        time.sleep(0.05)
    process.kill()
    process.wait()
    written = len(list(parts.glob("chunk-*.txt")))
    assert 3 <= written < 30 and not output.exists()
    code, err = kt_translate_corpus(capsys, *common, "--output", str(output))
    assert code == 0 and f"{written} chunk(s) written before" in err, err
    assert output.read_bytes() == expected

    sharded = tmp_path / "sharded.de"
    for shard in ("2/2", "1/2"):
        code, err = kt_translate_corpus(capsys, *common, "--output", str(sharded), "--shard",
                                        shard)
        assert code == 0, err
    assert sharded.read_bytes() == expected

    code, err = kt_translate_corpus(capsys, *common[:-2], "--max-decode-extra", "6",
                                    "--output", str(sharded))
    assert code == 2 and "teacher" in err and "max_decode_extra" in err
    code, err = kt_translate_corpus(capsys, *common, "--output", str(sharded), "--shard", "3/2")
    assert code == 2 and "--shard: 3/2 is not a shard I/N" in err
