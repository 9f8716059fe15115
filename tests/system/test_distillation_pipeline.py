"""benchmarks/distillation_pipeline.sh end to end with micro models on a few hundred demo pairs
laid out as Multi30k, in five tests that take one job further each (KT_PIPELINE_STOP_AFTER),
as a job stopped and started again goes on: every stage runs (teachers, the ensemble's
translation of train, students on two corpora with separate depths, test scores, exports timed,
then the diversification attempt: each teacher's translation, a student on four corpora, its
second seed as dev decides; then the Seq-Inter attempt: the ensemble's hypotheses nearest the
references, a student on them and the originals; then the students continued to twice the
steps; then the ensemble's sampled translations, a student on them, the originals and the
beam's; then the diversification student continued to twice the steps, its second seed from the
start if the first attempt had none; each attempt's second seed as dev decides), and a second
run redoes none."""
import gzip
import json
import statistics
import subprocess
from datetime import datetime
from pathlib import Path
from typing import NamedTuple

import pytest

from benchmarks import distillation_report
from helpers import ROOT, text_lines
from keras_transformer.data import write_demo_corpus
from keras_transformer.evaluation import sentence_bleu
from keras_transformer.training.run_dir import RunDir

pytestmark = pytest.mark.system  # a script's whole job, its commands as processes
LINES = {"train": 300, "val": 40, "test_2016_flickr": 12}
# A checkpoint at the end of each 6 steps: a run of 6 keeps one (nothing to average, seconds
# less), one continued to 12 averages two; dev BLEU every 3 steps, the curves below.
MICRO = ("--set vocab_size=400 --set d_model=32 --set d_ff=64 --set num_layers=1 "
         "--set num_heads=2 --set batch_tokens=512 --set max_length=48 "
         "--checkpoint-every-steps 6 --eval-every 3 --eval-sentences 8 --attention-sentences 0 "
         "--progress-seconds 0")
RUNS = ("teacher_s1", "teacher_s2", "student_s1", "student_s2", "student_deep_s1",
        "student_e6d2_s1")
# The script's `python -m MODULE ARGS` and `python FILE ARGS` (the Moses form, student_speed.py:
# TensorFlow's import, seconds each) as `kt-python -c` scripts, started warm.
WARM_PYTHON = """#!/bin/sh
if [ "$1" = -m ]; then
  shift
  exec kt-python -c 'import runpy, sys
runpy.run_module(sys.argv.pop(1), run_name="__main__", alter_sys=True)' "$@"
fi
exec kt-python -c 'import runpy, sys
runpy.run_path(sys.argv.pop(1), run_name="__main__")' "$@"
"""


class Pipeline(NamedTuple):
    """The job the tests share: its work directory and the environment that runs it."""

    work: Path
    env: dict[str, str]


def kept_dev_bleu(run_dir: Path) -> float:
    result = json.loads((run_dir / "result.json").read_text())
    return result["dev_bleu"]["averaged" if result["weights"].startswith("averaged") else "final"]


def multi30k_layout(directory: Path) -> Path:
    """Demo pairs as `multi30k/<split>.<lang>.gz` under `directory` (KT_SHARED_DATA's layout)."""
    demo = write_demo_corpus(directory / "demo")
    splits = {"train": demo["train"], "val": demo["dev"], "test_2016_flickr": demo["test"]}
    (directory / "multi30k").mkdir()
    for split, paths in splits.items():
        for path, lang in zip(paths, ("en", "de")):
            lines = Path(path).read_text(encoding="utf-8").splitlines(keepends=True)
            with gzip.open(directory / "multi30k" / f"{split}.{lang}.gz", "wt",
                           encoding="utf-8") as handle:
                handle.writelines(lines[:LINES[split]])
    return directory


@pytest.fixture(scope="module")
def pipeline(tmp_path_factory: pytest.TempPathFactory, warm: dict[str, str]) -> Pipeline:
    """One job on the demo corpora that each test below takes a part further (a test run alone
    runs the parts before its own too), its commands found on `warm`'s PATH (the `warm`
    fixture's shims) and its Python steps started warm (`WARM_PYTHON`)."""
    directory = tmp_path_factory.mktemp("pipeline")
    python = directory / "python"
    python.write_text(WARM_PYTHON)
    python.chmod(0o755)
    env = {**warm, "KT_SHARED_DATA": str(multi30k_layout(directory / "shared")),
           "KT_PIPELINE_STEPS": "6", "KT_PIPELINE_TRAIN_ARGS": MICRO,
           # the one signature timed exported (not six more): a third of the export's seconds
           "KT_PIPELINE_SPEED_ARGS": "--sentences 3 --serving-default-only",
           "KT_PIPELINE_HEARTBEAT_SECONDS": "1",
           # nucleus samples of untrained models are bytes of every script, more characters
           # than a micro vocabulary holds: the few likeliest pieces instead
           "KT_PIPELINE_SAMPLING": "--top-k 3 --seed 1", "KT_PIPELINE_PYTHON": str(python)}
    return Pipeline(directory / "work", env)


def run_pipeline(pipeline: Pipeline, stop_after: str = "") -> None:
    """The pipeline script on the job's work directory, up to the end of the stage
    `stop_after` names ("": to the end)."""
    env = {**pipeline.env, "KT_PIPELINE_STOP_AFTER": stop_after}
    run = subprocess.run(["bash", "benchmarks/distillation_pipeline.sh", str(pipeline.work)],
                         cwd=ROOT, env=env, capture_output=True, text=True, timeout=1800)
    assert run.returncode == 0, run.stderr[-3000:]


def started(work: Path) -> list[str]:
    """The stages stages.log says were started, in order."""
    return [line.split(" ", 1)[1] for line in (work / "stages.log").read_text().splitlines()
            if " start " in line]


def expected_starts(work: Path, part: int) -> list[str]:
    """The stages the pipeline starts, in order, up to the end of the tests' `part` (1 to 5)."""
    def second_seed(attempt: str) -> list[str]:
        """The stages of the attempt's second seed, when its first beats student_s1 on dev."""
        better = (kept_dev_bleu(work / "runs" / f"student_{attempt}_s1")
                  > kept_dev_bleu(work / "runs" / "student_s1"))
        return ([f"start student_{attempt}_s2", f"start scoring student_{attempt}_s2"]
                if better else [])

    stages = [*(f"start {run}" for run in RUNS[:2]), "start translation of train",
              f"start {RUNS[2]}"]
    if part >= 2:
        stages += [f"start {run}" for run in RUNS[3:]]
    if part >= 3:
        stages += [*(f"start scoring {run}" for run in RUNS + ("teachers",)),
                   "start student_speed"]
    if part >= 4:
        stages += [*(f"start translation of train by {run}" for run in RUNS[:2]),
                   "start student_diverse_s1", "start scoring student_diverse_s1",
                   *second_seed("diverse"),
                   "start translation of train nearest the references",
                   "start student_closest_s1", "start scoring student_closest_s1",
                   *second_seed("closest")]
    if part >= 5:
        stages += ["start student_longer_s1", "start scoring student_longer_s1",
                   *second_seed("longer"),
                   "start translation of train by sampling",
                   "start student_sampled_s1", "start scoring student_sampled_s1",
                   *second_seed("sampled"),
                   "start student_diverse_longer_s1",
                   "start scoring student_diverse_longer_s1", *second_seed("diverse_longer")]
    return stages


def run_part(pipeline: Pipeline, part: int, stop_after: str = "") -> Path:
    """The job taken to the end of the tests' `part` (`run_pipeline` to `stop_after`), the
    stages it started those `expected_starts` says; its work directory."""
    run_pipeline(pipeline, stop_after)
    assert started(pipeline.work) == expected_starts(pipeline.work, part)
    return pipeline.work


def assert_corpora(work: Path, run: str, corpora: int) -> None:
    """`run` was prepared from `corpora` corpora of all the train pairs each."""
    manifest = json.loads((work / "runs" / run / "prepared" / "manifest.json").read_text())
    assert [corpus["pairs"]["read"] for corpus in manifest["corpora"]] == \
        [LINES["train"]] * corpora


@pytest.mark.slow
# The tests run a job's parts in turn (each starting its commands warm: without the imports'
# seconds each); one run alone runs the parts before its own too.
@pytest.mark.timeout(1800)
def test_teachers_and_a_student_of_their_translation(pipeline):
    work = run_part(pipeline, 1, stop_after="student_s1")
    assert len(text_lines(work / "distilled" / "train.de")) == LINES["train"]
    assert_corpora(work, "student_s1", 2)


@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_more_students_deep_ones_too(pipeline):
    work = run_part(pipeline, 2, stop_after="student_e6d2_s1")
    for run, depths in (("student_deep_s1", (8, 1)), ("student_e6d2_s1", (6, 2))):
        architecture = RunDir(work / "runs" / run).load_recipe().architecture
        assert (architecture.encoder_depth, architecture.decoder_depth) == depths


@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_test_scores_and_the_exports_timed(pipeline):
    work = run_part(pipeline, 3, stop_after="student_speed")
    for name in RUNS + ("teachers",):
        assert json.loads((work / "scores" / f"{name}.json").read_text())["name"] == "BLEU"
        hypotheses = (work / "scores" / f"{name}.hyp").read_text(encoding="utf-8").splitlines()
        assert len(hypotheses) == LINES["test_2016_flickr"]
    speed = json.loads((work / "student_speed.txt").read_text().splitlines()[-1])
    assert speed["sentences"] == 3 and speed["beam_size"] == 5
    assert set(speed["exports"]) == {f"{run} {kind}" for run in ("teacher_s1", *RUNS[4:])
                                     for kind in ("SavedModel", "CTranslate2 float32")}


@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_diversification_and_seq_inter_attempts(pipeline):
    work = run_part(pipeline, 4, stop_after="student_closest")
    for name in ("train.teacher_s1", "train.teacher_s2", "train.closest"):
        assert len(text_lines(work / "distilled" / f"{name}.de")) == LINES["train"]
    references = text_lines(work / "data" / "train.de")
    nearness = {name: statistics.fmean(map(sentence_bleu,
                                           text_lines(work / "distilled" / f"{name}.de"),
                                           references))
                for name in ("train", "train.closest")}
    assert nearness["train.closest"] >= nearness["train"]  # the beam's best is a candidate too
    for run, corpora in (("student_diverse_s1", 4), ("student_closest_s1", 2)):
        assert_corpora(work, run, corpora)


@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_the_last_attempts_the_report_and_a_rerun_that_redoes_nothing(pipeline, capsys):
    work = run_part(pipeline, 5)
    stages = (work / "stages.log").read_text().splitlines()
    assert len(text_lines(work / "distilled" / "train.sampled.de")) == LINES["train"]
    for run, corpora in (("student_sampled_s1", 3), ("student_diverse_longer_s1", 4)):
        assert_corpora(work, run, corpora)
    assert (text_lines(work / "distilled" / "train.sampled.de")
            != text_lines(work / "distilled" / "train.de"))

    for run in RUNS:
        run_dir = work / "runs" / run
        assert "dev_bleu" in json.loads((run_dir / "result.json").read_text())
        assert (run_dir / "checkpoints" / "ckpt-00000006.weights.h5").exists()
        assert not (run_dir / "checkpoints" / "ckpt-00000012.weights.h5").exists()
    # copies of student_s1 and student_diverse_s1 continued to 12 steps; student_diverse_longer_s2
    # (when trained) from the start, or from student_diverse_s2 when that was trained
    longer = [work / "runs" / name for name in ("student_longer_s1", "student_diverse_longer_s1",
                                                "student_diverse_longer_s2")]
    for run_dir in [path for path in longer if path.exists()]:
        assert (run_dir / "checkpoints" / "ckpt-00000012.weights.h5").exists()
        curve = (run_dir / "bleu_curve.tsv").read_text().splitlines()[1:]
        assert [int(line.split()[0]) for line in curve] == [3, 6, 9, 12]
    assert ((longer[1] / "bleu_curve.tsv").read_text().splitlines()[:3]
            == (work / "runs" / "student_diverse_s1" / "bleu_curve.tsv").read_text().splitlines())

    capsys.readouterr()
    distillation_report.main([str(work)])  # in this process: its own start is not tested here
    report = capsys.readouterr().out
    rows = {row.split(" | ")[0].strip("| "): row.split(" | ")[1:] for row in report.splitlines()
            if row.startswith("| ") and " | " in row}
    scores = {name: json.loads((work / "scores" / f"{name}.json").read_text())["score"]
              for name in RUNS + ("teachers",)}
    assert rows["student_deep_s1"][0] == "8 + 1" and rows["teacher_s1"][0] == "1 + 1"
    assert float(rows["student_s2"][3]) == pytest.approx(scores["student_s2"], abs=0.006)
    mean = rows["mean of student_s1 and student_s2"][3].strip("*")
    assert float(mean) == pytest.approx((scores["student_s1"] + scores["student_s2"]) / 2,
                                        abs=0.006)
    # the job's minutes from its first stage to its end, the parts' runs and the moments
    # between them (a second or so: the tests' checks) together
    times = [datetime.fromisoformat(line.split(" ")[0]) for line in stages]
    wall = (times[-1] - times[0]).total_seconds() / 60
    pipeline_minutes = float(rows["the pipeline (teachers, translations, students)"][0]
                             .strip("*| "))
    scoring = float(rows["then: test scores and the speed comparison"][0].strip("| "))
    assert 0.8 * wall - 1 <= pipeline_minutes + scoring <= wall + 1

    modified = {path: path.stat().st_mtime_ns for path in work.rglob("*")
                if path.is_file() and path.name not in ("stages.log", "heartbeat.tsv")}
    run_pipeline(pipeline)
    again = (work / "stages.log").read_text().splitlines()[len(stages):]
    assert [line.split(" ", 1)[1] for line in again] == ["pipeline done"]
    assert {path: path.stat().st_mtime_ns for path in modified} == modified
