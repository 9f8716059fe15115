"""The RESULTS tables of a `benchmarks/distillation_pipeline.sh` work directory: each model's dev
and test BLEU, the students' mean, the time of every stage and of the whole pipeline, and the
one-sentence decoding times of `benchmarks/student_speed.py`.

    python benchmarks/distillation_report.py WORK_DIR
    python benchmarks/distillation_report.py WORK_DIR --better-on-dev RUN OTHER_RUN

Test BLEU is the pipeline's `scores/NAME.json` (sacrebleu, tokenized lowercased text against the
Moses-form references); dev BLEU is kt-train's on the whole dev set (greedy) with the weights
the run kept (`result.json`). `--better-on-dev` prints both runs' dev BLEU and exits 0 only when
the first run's is higher: the pipeline's choice whether an attempt gets its second seed. A
stage's minutes are the heartbeat's (`heartbeat.tsv`: the running stage once a minute), so the
time the pipeline or its machine was stopped counts for no stage.
"""
from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path
from typing import Optional

TEACHERS = ("teacher_s1", "teacher_s2")
SPEED_STAGE = "student_speed"  # the pipeline's timing stage: scoring, not a student
DISTILLED = "original + ensemble's"
DIVERSE = "original + ensemble's + each teacher's"
CLOSEST = "original + ensemble's nearest the reference"
LONGER = "original + ensemble's, twice the steps"
SAMPLED = "original + ensemble's + ensemble's sampled"
DIVERSE_LONGER = "original + ensemble's + each teacher's, twice the steps"
STUDENT_SEEDS = {DISTILLED: ("student_s1", "student_s2"),
                 DIVERSE: ("student_diverse_s1", "student_diverse_s2"),
                 CLOSEST: ("student_closest_s1", "student_closest_s2"),
                 LONGER: ("student_longer_s1", "student_longer_s2"),
                 SAMPLED: ("student_sampled_s1", "student_sampled_s2"),
                 DIVERSE_LONGER: ("student_diverse_longer_s1", "student_diverse_longer_s2")}
CORPORA = {**dict.fromkeys(TEACHERS, "original"), "student_s1": DISTILLED,
           "student_s2": DISTILLED, "student_deep_s1": DISTILLED, "student_e6d2_s1": DISTILLED,
           **{name: corpus for corpus, seeds in STUDENT_SEEDS.items() if corpus != DISTILLED
              for name in seeds}}


def stage_minutes(heartbeat: Path) -> dict[str, float]:
    """Stage -> minutes it ran, from `heartbeat.tsv` lines "EPOCH_SECONDS STAGE"."""
    beats = []
    for line in heartbeat.read_text(encoding="utf-8").splitlines() if heartbeat.exists() else []:
        seconds, _, stage = line.partition(" ")
        beats.append((int(seconds), stage))
    minutes: dict[str, float] = {}
    if len(beats) < 2:
        return minutes
    gaps = [next_time - time for (time, _), (next_time, _) in zip(beats, beats[1:])]
    interval = statistics.median(gaps)  # the heartbeat's; a gap far longer spans a stop
    for (_, stage), gap in zip(beats, gaps):
        if gap <= 2 * interval:
            minutes[stage] = minutes.get(stage, 0.0) + gap / 60
    return minutes


def test_bleu(work: Path, name: str) -> Optional[float]:
    path = work / "scores" / f"{name}.json"
    return json.loads(path.read_text())["score"] if path.exists() else None


def dev_bleu(run_dir: Path) -> Optional[float]:
    path = run_dir / "result.json"
    if not path.exists():
        return None
    result = json.loads(path.read_text())
    kept = "averaged" if result["weights"].startswith("averaged") else "final"
    return result["dev_bleu"][kept]


def cell(value: Optional[float], digits: int = 2) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def model_table(work: Path, minutes: dict[str, float]) -> list[str]:
    # imported here: the pipeline's --better-on-dev checks between stages read JSON alone, and
    # keras_transformer's import (TensorFlow's) would cost each of them seconds
    from keras_transformer.training.run_dir import RunDir

    rows = ["| model | encoder + decoder layers | trained on | dev BLEU | test BLEU | minutes |",
            "|---|---|---|---:|---:|---:|"]
    for name, corpus in CORPORA.items():
        run_dir = work / "runs" / name
        if not (run_dir / "config.json").exists():
            continue
        architecture = RunDir(run_dir).load_recipe().architecture
        rows.append(f"| {name} | {architecture.encoder_depth} + {architecture.decoder_depth} | "
                    f"{corpus} | {cell(dev_bleu(run_dir))} | {cell(test_bleu(work, name))} | "
                    f"{cell(minutes.get(name), 0)} |")
    rows.append(f"| the teachers' ensemble | 2 x the teacher's | - | - | "
                f"{cell(test_bleu(work, 'teachers'))} | - |")
    for corpus, seeds in STUDENT_SEEDS.items():
        scores = [test_bleu(work, name) for name in seeds]
        if None not in scores:
            rows.append(f"| mean of {' and '.join(seeds)} | - | {corpus} | - | "
                        f"**{statistics.fmean(scores):.2f}** | - |")
    return rows


def stage_table(minutes: dict[str, float]) -> list[str]:
    groups = {"teachers (2)": [stage for stage in minutes if stage.startswith("teacher")],
              "translations of train":
                  [stage for stage in minutes if stage.startswith("translation")],
              "students": [stage for stage in minutes
                           if stage.startswith("student_") and stage != SPEED_STAGE]}
    rows = ["| stage | minutes |", "|---|---:|"]
    for label, stages in groups.items():
        rows.append(f"| {label} | {sum(minutes[stage] for stage in stages):.0f} |")
    pipeline = sum(minutes[stage] for stages in groups.values() for stage in stages)
    rows.append(f"| the pipeline (teachers, translations, students) | **{pipeline:.0f}** |")
    scoring = sum(value for stage, value in minutes.items()
                  if stage.startswith("scoring") or stage == SPEED_STAGE)
    rows.append(f"| then: test scores and the speed comparison | {scoring:.0f} |")
    return rows


def better_on_dev(work: Path, run: str, other: str) -> bool:
    """Prints both runs' dev BLEU; whether `run`'s is the higher."""
    scores = {name: dev_bleu(work / "runs" / name) for name in (run, other)}
    print(" ".join(f"{name} {cell(score)}" for name, score in scores.items()))
    missing = [name for name, score in scores.items() if score is None]
    if missing:
        raise SystemExit(f"--better-on-dev: no result.json in {work / 'runs' / missing[0]}")
    return scores[run] > scores[other]


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("work_dir", type=Path, help="distillation_pipeline.sh's WORK_DIR")
    parser.add_argument("--better-on-dev", nargs=2, metavar=("RUN", "OTHER_RUN"),
                        help="exit 0 when RUN's dev BLEU is higher than OTHER_RUN's, else 1")
    args = parser.parse_args(argv)
    work = args.work_dir
    if args.better_on_dev:
        raise SystemExit(0 if better_on_dev(work, *args.better_on_dev) else 1)
    minutes = stage_minutes(work / "heartbeat.tsv")
    lines = model_table(work, minutes) + [""] + stage_table(minutes)
    speed = work / "student_speed.txt"
    if speed.exists():
        lines += [""] + [line for line in speed.read_text().splitlines() if line.startswith("|")]
    print("\n".join(lines))


if __name__ == "__main__":
    main()
