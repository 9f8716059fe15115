"""Dev-BLEU learning curves of kt-train runs, against steps and wall clock, as one PNG.

    python benchmarks/learning_curve.py RUN_DIR[=LABEL] [RUN_DIR[=LABEL] ...] --out curve.png

Each run directory's `bleu_curve.tsv` (step, seconds, dev BLEU; written by kt-train at every
`--eval-every`) becomes one line in both panels.
"""
from __future__ import annotations

import argparse
import csv
import os
import sys

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def read_curve(run_dir: str) -> tuple[list[int], list[float], list[float]]:
    """(steps, minutes, dev BLEU) of a run directory's `bleu_curve.tsv`."""
    path = os.path.join(run_dir, "bleu_curve.tsv")
    try:
        with open(path, encoding="utf-8") as handle:
            rows = list(csv.DictReader(handle, delimiter="\t"))
    except OSError as error:
        raise SystemExit(f"learning_curve: cannot read {path!r}: {error.strerror}") from None
    if not rows:
        raise SystemExit(f"learning_curve: {path!r} holds no evaluations")
    return ([int(row["step"]) for row in rows], [float(row["seconds"]) / 60 for row in rows],
            [float(row["dev_bleu"]) for row in rows])


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("runs", nargs="+", metavar="RUN_DIR[=LABEL]")
    parser.add_argument("--out", required=True, help="PNG path")
    parser.add_argument("--title", default="dev BLEU (periodic evaluation)")
    args = parser.parse_args(argv)
    sys.path.insert(0, REPO_ROOT)
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, (by_step, by_time) = plt.subplots(1, 2, figsize=(10, 4), sharey=True)
    for run in args.runs:
        run_dir, _, label = run.partition("=")
        steps, minutes, bleu = read_curve(run_dir)
        label = label or os.path.basename(os.path.normpath(run_dir))
        by_step.plot(steps, bleu, marker=".", label=label)
        by_time.plot(minutes, bleu, marker=".", label=label)
    by_step.set(xlabel="step", ylabel="dev BLEU")
    by_time.set(xlabel="wall clock (minutes)")
    for axes in (by_step, by_time):
        axes.grid(alpha=0.3)
    by_step.legend()
    figure.suptitle(args.title)
    figure.tight_layout()
    figure.savefig(args.out, dpi=100)
    print(args.out)


if __name__ == "__main__":
    main()
