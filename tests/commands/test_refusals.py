"""kt-train refuses a bad start before its first write: the output directory stays absent, or
as it was, and the corrected command starts. The training pairs a run does not train on are
named on stderr (count and first line numbers) and kept in the run directory; kt-prepare names
them too."""
import json
from pathlib import Path

import pytest

from keras_transformer.data import write_demo_corpus
from keras_transformer.training import run
from trainers import prepare, train

MODEL = ["--set", "vocab_size=400", "--set", "d_model=32", "--set", "d_ff=64",
         "--set", "num_layers=1"]
RECIPE = MODEL + ["--set", "max_length=48"]
MICRO = RECIPE + ["--precision", "float32", "--steps", "2"]
LONG = " ".join(["seventeen green pears"] * 40)  # some 120 pieces: over max_length 48


class Started(Exception):
    """Raised where the model would be built: every check of the start passed."""


@pytest.fixture
def until_training(monkeypatch):
    """kt-train stops with `Started` once its data is ready, before building the model."""
    def build(*args, **kwargs):
        raise Started()
    monkeypatch.setattr(run, "compiled_model", build)


@pytest.fixture(scope="module")
def demo(tmp_path_factory) -> dict[str, tuple[str, str]]:
    return write_demo_corpus(tmp_path_factory.mktemp("demo"))


def data_args(train_pair, dev_pair) -> list[str]:
    return ["--train-src", str(train_pair[0]), "--train-tgt", str(train_pair[1]),
            "--dev-src", str(dev_pair[0]), "--dev-tgt", str(dev_pair[1])]


def test_a_refused_start_writes_nothing_and_the_corrected_command_starts(
        demo, tmp_path, capsys, until_training):
    run_dir = tmp_path / "run"
    empty = (tmp_path / "empty.en", tmp_path / "empty.de")
    for path in empty:
        path.write_text("", encoding="utf-8")
    good = data_args(demo["train"], demo["dev"]) + ["--no-export"]
    refusals = [
        (data_args((tmp_path / "missing.en", demo["train"][1]), demo["dev"]),
         f"corpus file not found: {str(tmp_path / 'missing.en')!r}"),
        (data_args(demo["train"], (demo["dev"][0], tmp_path / "missing.de")),
         f"corpus file not found: {str(tmp_path / 'missing.de')!r}"),
        (data_args(empty, demo["dev"]),
         f"--train-src/--train-tgt: {empty[0]} and {empty[1]}: no pair with two non-empty "
         "sides"),
        (good + ["--set", "batch_tokens=40"], "batch_tokens=40 cannot hold one pair"),
        (["--set", "batch_tokens=40"], "batch_tokens=40 cannot hold one pair"),  # the demo
        (good[:-1] + ["--export-name", "../up"], "name: '../up' must be letters"),
    ]
    for argv, message in refusals:
        assert train.main(MICRO + argv + ["--output-dir", str(run_dir)]) == 2
        assert message in capsys.readouterr().err
        assert not run_dir.exists()
    run_dir.mkdir()
    (run_dir / "notes.txt").write_text("mine", encoding="utf-8")
    assert train.main(MICRO + refusals[0][0] + ["--output-dir", str(run_dir)]) == 2
    assert [path.name for path in run_dir.iterdir()] == ["notes.txt"]
    with pytest.raises(Started):
        train.main(MICRO + good + ["--output-dir", str(run_dir)])
    assert json.loads((run_dir / "config.json").read_text())["max_length"] == 48


def test_pairs_left_out_of_training_are_counted_and_named(demo, tmp_path, capsys,
                                                           until_training):
    """Line 3 has an empty side, lines 5 and 9 a side over max_length 48: kt-train names
    them on stderr and in left_out.json; kt-prepare with the same recipe too. A run on
    storage prepared for another max_length counts its over-long pairs without lines."""
    sources = Path(demo["train"][0]).read_text(encoding="utf-8").splitlines()[:40]
    targets = Path(demo["train"][1]).read_text(encoding="utf-8").splitlines()[:40]
    sources[2], sources[4], targets[8] = "", LONG, LONG
    pair = (tmp_path / "train.en", tmp_path / "train.de")
    for path, lines in zip(pair, (sources, targets)):
        path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    expected = [f"{pair[0]} and {pair[1]}: 1 pair with an empty side, not trained on (line 3)",
                f"{pair[0]} and {pair[1]}: 2 pairs with a side longer than max_length 48 (EOS "
                "included), not trained on (lines 5, 9)"]
    run_dir = tmp_path / "run"
    with pytest.raises(Started):
        train.main(MICRO + data_args(pair, demo["dev"]) + ["--no-export", "--output-dir",
                                                           str(run_dir)])
    err = capsys.readouterr().err
    assert all(f"kt-train: warning: {line}" in err for line in expected), err
    recorded = json.loads((run_dir / "left_out.json").read_text())
    assert [(entry["pairs"], entry["first_lines"]) for entry in recorded] == [(1, [3]),
                                                                            (2, [5, 9])]

    storage = tmp_path / "prepared"
    assert prepare.main(RECIPE + ["--train-src", str(pair[0]), "--train-tgt", str(pair[1]),
                                  "--output-dir", str(storage)]) == 0
    err = capsys.readouterr().err
    assert all(f"kt-prepare: warning: {line}" in err for line in expected), err
    with pytest.raises(Started):
        train.main(MODEL + ["--set", "max_length=40", "--precision", "float32",
                            "--no-export", "--prepared", str(storage), "--dev-src",
                            demo["dev"][0], "--dev-tgt", demo["dev"][1], "--output-dir",
                            str(tmp_path / "other")])
    err = capsys.readouterr().err
    assert f"{pair[0]} and {pair[1]}: 1 pair with an empty side, not trained on (line 3)" in err
    assert ("2 pairs with a side longer than max_length 40 (EOS included), not trained on "
            "(line numbers not recorded)") in err
