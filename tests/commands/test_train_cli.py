"""kt-train, kt-evaluate and kt-average-checkpoints reject bad input before any work."""
import json
import os
import re
import subprocess
import sys

import pytest

import keras_transformer as kt
from keras_transformer.training.run_dir import RunDir
from trainers import average_checkpoints, evaluate, train
from trainers.launch import lines_at_level
from helpers import ROOT


def parse_error(capsys, parse, argv):
    with pytest.raises(SystemExit) as exit_info:
        parse(argv)
    assert exit_info.value.code == 2
    return capsys.readouterr().err


@pytest.mark.parametrize("argv, message", [
    (["--preset", "huge"], "--preset: invalid choice: 'huge'"),
    (["--learning-rate", "1"], "unrecognized arguments: --learning-rate"),
    (["--steps", "10", "--epochs", "1"], "--steps and --epochs"),
    (["--tfds", "wmt14_translate/de-en", "--train-src", "a", "--train-tgt", "b"], "--tfds"),
    (["--train-src", "a.en"], "--train-src and --train-tgt"),
    (["--train-src", "a", "--train-tgt", "b"], "at least train and dev"),
    (["--steps", "0"], "--steps: must be positive"),
    (["--set", "d_modle=8"], "unknown field(s) ['d_modle']"),
    (["--set", "dropout"], "--set: expected KEY=VALUE"),
    (["--set", "dropout=1.5"], "dropout: must be in [0, 1)"),
    (["--set", "dropout=high"], "--set 'dropout=high': dropout must be a float, got 'high'"),
    (["--precision", "float64"], "--precision: invalid choice: 'float64'"),
])
def test_train_rejects_bad_options(capsys, argv, message):
    assert message in parse_error(capsys, train.parse_args, argv)


def test_precision_defaults_to_auto_without_xla():
    args = train.parse_args([])
    assert args.options.precision == "auto" and args.options.jit_compile is False
    assert train.parse_args(["--precision", "mixed_float16", "--jit-compile"]).options.jit_compile


def test_config_layers_preset_file_and_set(tmp_path):
    config_file = tmp_path / "overrides.json"
    config_file.write_text(json.dumps({"d_model": 32, "dropout": 0.3}))
    args = train.parse_args(["--preset", "small", "--config", str(config_file),
                             "--set", "dropout=0.2", "--set", "share_embeddings=false",
                             "--set", "warmup_steps=100", "--set", "length_penalty=1"])
    assert args.recipe == kt.Recipe.preset(
        "small", d_model=32, dropout=0.2, share_embeddings=False, warmup_steps=100,
        length_penalty=1.0)
    config_file.write_text("\ufeff" + json.dumps({"d_model": 32}), encoding="utf-8")
    assert train.parse_args(["--preset", "small", "--config", str(config_file)]).recipe == (
        kt.Recipe.preset("small", d_model=32))  # as a Windows editor saves it: a byte-order mark


def test_config_file_errors_name_the_file(capsys, tmp_path):
    broken = tmp_path / "broken.json"
    broken.write_text("{not json")
    assert "--config: " in parse_error(capsys, train.parse_args, ["--config", str(broken)])
    broken.write_text("[1, 2]")
    assert "is not a JSON object" in parse_error(capsys, train.parse_args,
                                                 ["--config", str(broken)])
    broken.write_text('{"num_layers": "six"}')
    assert "num_layers must be a int" in parse_error(capsys, train.parse_args,
                                                     ["--config", str(broken)])
    assert "missing.json" in parse_error(capsys, train.parse_args,
                                         ["--config", str(tmp_path / "missing.json")])


def test_unwritable_output_dir_fails_before_training(capsys, tmp_path):
    blocker = tmp_path / "a_file"
    blocker.write_text("")
    assert train.main(["--output-dir", str(blocker / "run")]) == 2
    assert "--output-dir: cannot write to" in capsys.readouterr().err
    assert not (blocker.parent / "run").exists()


def test_run_dir_refuses_a_different_config(tmp_path):
    run = RunDir(tmp_path / "run")
    config = kt.Recipe.preset("tiny")
    assert run.claim(config, {"seed": 0}) is False
    assert run.claim(config, {"seed": 0}) is True
    with pytest.raises(ValueError, match=r"config.json \(d_model: 64 -> 32\)"):
        run.claim(config.replace(d_model=32), {"seed": 0})
    with pytest.raises(ValueError, match=r"run.json \(seed: 0 -> 1\)"):
        run.claim(config, {"seed": 1})
    assert RunDir(tmp_path / "run").load_recipe() == config
    # A field an older version did not record is no difference; once recorded, it must match.
    assert run.claim(config, {"seed": 0, "precision": "float32"}) is True
    (tmp_path / "run" / "run.json").write_text('{"seed": 0, "precision": "float32"}')
    with pytest.raises(ValueError, match=r"precision: 'float32' -> 'mixed_float16'"):
        run.claim(config, {"seed": 0, "precision": "mixed_float16"})


def test_evaluate_and_average_reject_bad_input(capsys, tmp_path):
    assert "--src and --ref" in parse_error(capsys, evaluate.parse_args, [str(tmp_path)])
    message = parse_error(capsys, evaluate.parse_args,
                          [str(tmp_path), "--src", str(tmp_path / "x.en"), "--ref", "y"])
    assert "--src: no such file" in message
    assert "--last: must be at least 2" in parse_error(capsys, average_checkpoints.parse_args,
                                                       [str(tmp_path), "--last", "0"])
    assert average_checkpoints.main([str(tmp_path)]) == 2
    assert "no config.json" in capsys.readouterr().err


@pytest.mark.slow
def test_command_lines_start_quietly_unless_verbose(tmp_path):
    """TensorFlow's C++ start-up lines (oneDNN, CUDA stubs, absl) are hidden by default, and
    below the level a user's `TF_CPP_MIN_LOG_LEVEL` sets (2: no INFO or WARNING line)."""
    env = {key: value for key, value in os.environ.items() if key != "TF_CPP_MIN_LOG_LEVEL"}
    env["PYTHONPATH"] = str(ROOT)
    runs = {name: subprocess.run([sys.executable, "-m", "trainers", "train", "--help", *flags],
                                 cwd=tmp_path, env={**env, **level}, capture_output=True,
                                 text=True, timeout=300)
            for name, flags, level in (("quiet", (), {}), ("verbose", ("--verbose",), {}),
                                       ("level 2", (), {"TF_CPP_MIN_LOG_LEVEL": "2"}))}
    assert all(run.returncode == 0 and "usage: kt-train" in run.stdout for run in runs.values())
    assert runs["quiet"].stderr == ""
    assert not re.search(r"^(I|W)\d{4} |^WARNING: All log", runs["level 2"].stderr, re.M)
    assert lines_at_level(runs["verbose"].stderr, 2) == runs["level 2"].stderr
    # Where TensorFlow prints start-up lines at all, --verbose keeps them: absl's lines
    # ("I0000 ...") and TensorFlow's own, stamped "YYYY-MM-DD HH:MM:SS.ffffff: I ..." (TF 2.20).
    tensorflow_line = re.compile(r"([IWEF]\d{4} |\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d+: [IWEF] "
                                 r"|WARNING: All log messages|To enable the following)")
    assert all(tensorflow_line.match(line) for line in runs["verbose"].stderr.splitlines())


def test_the_export_root_has_kt_exports_name_and_the_old_one():
    """`--base-dir` as in kt-export; `--export-dir`, its earlier name, still works."""
    assert train.parse_args(["--base-dir", "root"]).options.export_dir == "root"
    assert train.parse_args(["--export-dir", "root"]).options.export_dir == "root"
    assert train.parse_args([]).options.export_dir == "saved_models"
