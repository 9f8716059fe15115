"""Resumes that cannot silently change the data stream: a run records what fixes it (a
`--prepared` storage's identity; the replica count: tests/system/test_resumed_runs.py) and a
restart that differs is refused, naming the old and new values."""
from pathlib import Path

import pytest

from keras_transformer.data import write_demo_corpus
from helpers import MICRO
from trainers import prepare, train


@pytest.mark.slow
def test_storage_prepared_again_in_place_is_refused_on_restart(tmp_path, capsys):
    """`--prepared DIR` prepared again with another seed (same vocabulary, same path) is
    another stream: the restart names the storage's old and new identity."""
    data = write_demo_corpus(tmp_path / "data")
    storage = tmp_path / "prepared"

    def kt_prepare(seed: str) -> None:
        assert prepare.main(["--preset", "tiny", "--set", "vocab_size=400", "--train-src",
                             data["train"][0], "--train-tgt", data["train"][1],
                             "--output-dir", str(storage), "--seed", seed,
                             "--shard-pairs", "4000"]) == 0

    kt_prepare("1")
    argv = MICRO + ["--prepared", str(storage), "--dev-src", data["dev"][0], "--dev-tgt",
                    data["dev"][1], "--output-dir", str(tmp_path / "run"), "--backup-every", "2"]
    assert train.main(argv + ["--steps", "2"]) == 0
    vocab = Path(storage / "spm.model").read_bytes()
    (tmp_path / "vocab").mkdir()
    (tmp_path / "vocab" / "spm.model").write_bytes(vocab)
    assert prepare.main(["--preset", "tiny", "--set", "vocab_size=400", "--train-src",
                         data["train"][0], "--train-tgt", data["train"][1], "--output-dir",
                         str(storage), "--seed", "2", "--vocab", str(tmp_path / "vocab"),
                         "--shard-pairs", "4000"]) == 0
    capsys.readouterr()
    assert train.main(argv + ["--steps", "4"]) == 2
    err = capsys.readouterr().err
    assert "prepared_storage" in err and "'shard_seed': 1" in err and "'shard_seed': 2" in err


def broken_corpora(directory: Path, data: dict) -> dict[str, tuple[Path, Path]]:
    """Two copies of the demo train split, one with a target line too few (mid-file is where
    a partial vocabulary could come from), one with invalid UTF-8 at source line 900."""
    sources = Path(data["train"][0]).read_bytes().splitlines(keepends=True)
    targets = Path(data["train"][1]).read_bytes().splitlines(keepends=True)
    broken = {}
    for name, source_lines, target_lines in (
            ("short", sources, targets[:-1]),
            ("bad_utf8", sources[:899] + [b"caf\xc3 broken\n"] + sources[900:], targets)):
        paths = directory / f"{name}.en", directory / f"{name}.de"
        paths[0].write_bytes(b"".join(source_lines))
        paths[1].write_bytes(b"".join(target_lines))
        broken[name] = paths
    return broken


@pytest.mark.parametrize("command", ["kt-train", "kt-prepare"])
def test_vocabulary_training_fails_loudly_on_bad_input(command, tmp_path, capsys):
    """Without --vocab the vocabulary is learned from the corpus: a line count mismatch or
    invalid UTF-8 found while sampling fails the command naming the files or the line, and
    leaves no vocabulary behind (never one learned from part of the corpus)."""
    data = write_demo_corpus(tmp_path / "data")
    for name, (source, target) in broken_corpora(tmp_path, data).items():
        output = tmp_path / f"{command}-{name}"
        files = ["--train-src", str(source), "--train-tgt", str(target)]
        if command == "kt-train":
            code = train.main(MICRO + files + ["--dev-src", data["dev"][0], "--dev-tgt",
                                               data["dev"][1], "--output-dir", str(output),
                                               "--steps", "2"])
            vocabulary = output / "vocab" / "spm.model"
        else:
            code = prepare.main(["--preset", "tiny", "--set", "vocab_size=400", *files,
                                 "--output-dir", str(output)])
            vocabulary = output / "spm.model"
        err = capsys.readouterr().err
        assert code == 2 and not vocabulary.exists()
        if name == "short":
            assert "parallel files differ in line count" in err and str(target) in err
        else:
            assert f"{source}:900: not valid UTF-8" in err
        assert "INTERNAL" not in err and "At:" not in err


def test_prepared_storage_of_another_preset_names_the_fix(tmp_path, capsys):
    """Storage prepared with other recipe settings than kt-train is given: storage whose
    vocabulary size the recipe does not match is refused naming `--prepared` and the preset to
    repeat, before anything is written into the run directory."""
    data = write_demo_corpus(tmp_path / "data")
    assert prepare.main(["--preset", "tiny", "--set", "vocab_size=500", "--train-src",
                         data["train"][0], "--train-tgt", data["train"][1],
                         "--output-dir", str(tmp_path / "prepared")]) == 0
    capsys.readouterr()
    code = train.main(MICRO + ["--prepared", str(tmp_path / "prepared"), "--dev-src",
                               data["dev"][0], "--dev-tgt", data["dev"][1], "--output-dir",
                               str(tmp_path / "run"), "--steps", "2"])
    err = capsys.readouterr().err
    assert code == 2 and f"--prepared: {tmp_path / 'prepared'}" in err
    assert "500 pieces but the recipe (--preset tiny) says vocab_size=400" in err
    assert not (tmp_path / "run" / "vocab").exists()
