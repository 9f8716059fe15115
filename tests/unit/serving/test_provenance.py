"""Provenance records of exports: what they hold round-trips, kt-export records a run's chosen
weights and figures, `kt-export --describe` prints them, and bad paths are named."""
import dataclasses
import importlib.metadata
import json
import os
import subprocess

import pytest

import keras_transformer as kt
from keras_transformer.data.tokenizer import SubwordTokenizer
from keras_transformer.serving import ctranslate2_export
from keras_transformer.serving.export import export_translator
from keras_transformer.serving.provenance import PROVENANCE_FILE, file_provenance, read_provenance
from keras_transformer.training.checkpoints import save_weights_atomic
from keras_transformer.training.run_dir import RESULT_FILE, TEST_FILE, RunDir
from keras_transformer.serving.warmup import WARMUP_FILE
from trainers import export as export_cli

SETTINGS = kt.SearchSettings(beam_size=2, length_penalty=0.3, max_decode_extra=4)


@pytest.fixture(scope="module")
def tokenizer(demo_vocab) -> SubwordTokenizer:
    return SubwordTokenizer.load(demo_vocab)


@pytest.fixture(scope="module")
def recipe(tokenizer) -> kt.Recipe:
    return kt.Recipe.preset("tiny", vocab_size=tokenizer.vocab_size, max_length=24,
                            num_layers=1, beam_size=2, length_penalty=0.3,
                            max_decode_extra=4)


@pytest.fixture(scope="module")
def run_dir(recipe, tokenizer, tmp_path_factory):
    """A finished run as kt-train leaves it: final and averaged weights, `result.json` choosing
    the averaged ones, `test.json`."""
    run = RunDir(tmp_path_factory.mktemp("run"))
    run.claim(recipe, {"precision": "mixed_bfloat16"})
    tokenizer.save(run.vocab)
    model = kt.Transformer(recipe.architecture)
    for path in (run.final_weights, run.averaged_weights):
        save_weights_atomic(model, path)
    run.write_json(RESULT_FILE, {"weights": run.averaged_weights.name,
                                 "dev_bleu": {"final": 1.5, "averaged": 2.25},
                                 "averaged": ["a.weights.h5", "b.weights.h5"],
                                 "average_last": 2})
    run.write_json(TEST_FILE, {"BLEU": 3.5, "chrF": 20.1})
    return run


def git_head() -> str | None:
    run = subprocess.run(["git", "-C", os.path.dirname(kt.__file__), "rev-parse", "HEAD"],
                         capture_output=True, text=True)
    return run.stdout.strip() if run.returncode == 0 else None


@pytest.mark.slow
def test_an_exports_record_round_trips(recipe, tokenizer, tmp_path):
    model = kt.Transformer(recipe.architecture)
    model.save(tmp_path / "model.keras")
    source = file_provenance(tmp_path / "model.keras")
    first = export_translator(model, tokenizer, "demo", tmp_path / "out", SETTINGS,
                              provenance=source)
    newest = export_translator(model, tokenizer, "demo", tmp_path / "out", SETTINGS,
                               dtype="bfloat16", provenance=source)
    version, record = read_provenance(tmp_path / "out" / "demo")
    assert str(version) == newest != first
    on_disk = json.loads((version / PROVENANCE_FILE).read_text(encoding="utf-8"))
    assert record == on_disk and {**record, **source} == record
    assert record["format"] == "savedmodel" and record["precision"] == "bfloat16"
    assert record["search"] == dataclasses.asdict(SETTINGS)
    assert record["architecture"] == recipe.architecture.to_dict()
    assert record["xla"] is False and record["shortlist"] is None
    assert record["warmup"]["file"] == WARMUP_FILE
    assert os.path.getsize(version / WARMUP_FILE) > 0
    assert record["code"]["package_version"] == importlib.metadata.version("keras-transformer")
    assert record["code"]["git_commit"] == git_head()
    assert read_provenance(first)[1]["precision"] == "float32"


@pytest.mark.slow
def test_kt_export_records_the_runs_chosen_weights_and_figures(run_dir, tmp_path, capsys):
    arguments = [str(run_dir.root), str(run_dir.vocab), "--name", "run", "--base-dir",
                 str(tmp_path / "out")]
    assert export_cli.main(arguments) == 0
    export = capsys.readouterr().out.strip()
    record = read_provenance(export)[1]
    assert record == {**record, **run_dir.provenance()}
    assert record["run_dir"] == str(run_dir.root)
    assert record["weights"] == str(run_dir.averaged_weights)
    assert record["weights_reason"].startswith(RESULT_FILE)
    assert record["dev_bleu"] == {"final": 1.5, "averaged": 2.25}
    assert record["test"] == {"BLEU": 3.5, "chrF": 20.1}
    assert record["training_precision"] == "mixed_bfloat16"
    assert record["search"]["length_penalty"] == 0.3  # the run's recipe's
    assert export_cli.main(arguments + ["--weights", str(run_dir.final_weights)]) == 0
    given = read_provenance(capsys.readouterr().out.strip())[1]
    assert given["weights"] == str(run_dir.final_weights)
    assert given["weights_reason"] == "given (--weights)"


def test_chosen_weights_say_why_without_a_result(run_dir, tmp_path):
    run = RunDir(tmp_path)
    save_weights_atomic(kt.Transformer(run_dir.load_recipe().architecture), run.final_weights)
    assert run.chosen_weights() == (run.final_weights, "the final weights (no result.json "
                                                       "naming the run's result)")
    assert run.recorded_results() == {}
    record = run.provenance()
    assert record["test"] is None and record["dev_bleu"] is None


@pytest.mark.slow
def test_describe_prints_every_field_readably(run_dir, tmp_path, capsys):
    assert export_cli.main([str(run_dir.root), str(run_dir.vocab), "--name", "run",
                            "--base-dir", str(tmp_path)]) == 0
    export = capsys.readouterr().out.strip()
    assert export_cli.main(["--describe", str(tmp_path / "run")]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == f"export {export}"
    fields = {line.split("  ")[1].strip(): line for line in lines[1:]}
    for label in ("run directory", "weights", "weights chosen as", "dev BLEU", "test figures",
                  "search settings", "precision", "XLA-compiled", "warm-up requests",
                  "architecture", "written by", "written (UTC)"):
        assert label in fields, label
    assert str(run_dir.averaged_weights) in fields["weights"]
    assert "averaged 2.25" in fields["dev BLEU"] and "final 1.5" in fields["dev BLEU"]
    assert "BLEU 3.5" in fields["test figures"]
    assert "beam_size 2" in fields["search settings"]
    assert "package_version" in fields["written by"]


def test_describe_names_a_path_that_is_no_export(run_dir, tmp_path, capsys):
    assert export_cli.main(["--describe", str(tmp_path / "missing")]) == 2
    error = capsys.readouterr().err
    assert f"--describe: {str(tmp_path / 'missing')!r} does not exist" in error
    (tmp_path / "old" / "1").mkdir(parents=True)
    (tmp_path / "old" / "1" / "saved_model.pb").write_bytes(b"")
    assert export_cli.main(["--describe", str(tmp_path / "old")]) == 2
    error = capsys.readouterr().err
    assert str(tmp_path / "old" / "1") in error and PROVENANCE_FILE in error
    with pytest.raises(SystemExit):
        export_cli.parse_args(["model", "vocab", "--describe", str(tmp_path)])
    with pytest.raises(SystemExit):
        export_cli.parse_args(["model", "vocab"])  # --name is needed to export
    with pytest.raises(SystemExit):
        export_cli.parse_args(["model", "vocab", "--name", "x", "--warmup-max-width", "32"])


def test_a_ctranslate2_export_records_its_provenance_too(run_dir, tmp_path, capsys):
    pytest.importorskip("ctranslate2")
    assert export_cli.main([str(run_dir.root), str(run_dir.vocab), "--name", "ct2",
                            "--base-dir", str(tmp_path), "--format", "ctranslate2"]) == 0
    captured = capsys.readouterr()
    record = read_provenance(captured.out.strip())[1]
    assert (record["format"], record["quantization"]) == ("ctranslate2", "int8")
    assert record["weights"] == str(run_dir.averaged_weights) and "warmup" not in record
    # what it cannot do, said when written and recorded with it
    assert record["unsupported"] == ctranslate2_export.UNSUPPORTED
    assert set(record["unsupported"]) == {"terms", "scores"}
    assert "no lexically constrained search" in captured.err
    assert export_cli.main(["--describe", str(tmp_path / "ct2")]) == 0
    assert "cannot" in capsys.readouterr().out


def test_the_commit_is_only_claimed_from_the_packages_own_checkout(tmp_path, monkeypatch):
    from keras_transformer.serving import provenance

    def git(*arguments: str) -> str:
        return subprocess.run(["git", "-C", str(tmp_path), "-c", "user.name=t", "-c",
                               "user.email=t@example.org", *arguments], check=True,
                              capture_output=True, text=True).stdout.strip()

    git("init", "-q")
    git("commit", "-q", "--allow-empty", "-m", "start")
    for package in ("keras_transformer", "venv/site-packages/keras_transformer"):
        (tmp_path / package).mkdir(parents=True)
    monkeypatch.setattr(provenance, "_PACKAGE_DIR", tmp_path / "keras_transformer")
    own = provenance.code_version()
    assert own["git_commit"] == git("rev-parse", "HEAD")
    assert own["git_uncommitted_changes"] is False
    monkeypatch.setattr(provenance, "_PACKAGE_DIR",
                        tmp_path / "venv" / "site-packages" / "keras_transformer")
    inside_another = provenance.code_version()
    assert inside_another["git_commit"] is None
    assert inside_another["git_uncommitted_changes"] is None
