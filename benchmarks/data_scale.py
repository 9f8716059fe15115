"""Training on corpora bigger than memory: peak RSS and start-up of `kt-train` by corpus size,
the cost of a restart by step, and the input rate per core against what 8 GPUs consume.

Usage: python benchmarks/data_scale.py [--pairs 1000000 4000000 16000000] [--work-dir DIR]
           [--baseline-tree DIR] [--baseline-max-pairs 4000000]

Corpora are generated from Multi30k train (two random pairs joined and a running number per
line, about 26 words a side, WMT-like lengths) into `--work-dir` and reused by later runs.
Each size runs the README's command as a new user would (`kt-train --preset tiny
--train-src ... --steps 40`, the vocabulary learned, the corpus prepared, 40 steps): peak RSS
(the process's maximum resident set, from wait4), seconds to the end of step 1 and to the end.
`--baseline-tree` runs another checkout's `kt-train` on the same corpora (up to
`--baseline-max-pairs`) for the before/after ratio in the same run.

Restarts: seconds from opening the 4M-pair storage to the first batch of a resumed run at
steps 0, 10,000 and 100,000 (`base`'s 25,000-token batches). The input rate: real source +
target tokens per second the batch plan pads and yields on one Python thread, beside the
tokens per second an 8-GPU machine trains `base` at (analytic FLOPs per token,
`keras_transformer.training.flops`, at a stated peak and MFU).
"""
from __future__ import annotations

import argparse
import gzip
import os
import random
import re
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import keras_transformer  # noqa: E402,F401  (sets the TensorFlow backend first)
from keras_transformer.config import PAD_ID, TransformerConfig  # noqa: E402
from keras_transformer.data import shared_data_dir  # noqa: E402
from keras_transformer.data.batch_plan import BatchPlan  # noqa: E402
from keras_transformer.data.token_storage import TokenStorage  # noqa: E402
from keras_transformer.training.flops import training_flops  # noqa: E402

GPU_PEAK_TFLOPS = 312.0  # one A100's dense bfloat16 peak (NVIDIA's data sheet)
GPU_MFU = 0.4
STEP_LINE = re.compile(r"kt-train: step (\d+)")


def generate_corpus(multi30k: Path, directory: Path, pairs: int,
                    seed: int = 0) -> tuple[Path, Path]:
    """`pairs` lines a side, each two random Multi30k train pairs and the line's number (reused
    when the files exist)."""
    paths = directory / f"pairs{pairs}.en", directory / f"pairs{pairs}.de"
    if all(path.is_file() for path in paths):
        return paths
    sides = [gzip.open(multi30k / f"train.{lang}.gz", "rt", encoding="utf-8").read().splitlines()
             for lang in ("en", "de")]
    generator = random.Random(seed)
    directory.mkdir(parents=True, exist_ok=True)
    partial = [path.with_suffix(path.suffix + ".partial") for path in paths]
    with open(partial[0], "w", encoding="utf-8") as en, open(partial[1], "w",
                                                             encoding="utf-8") as de:
        for number in range(pairs):
            first, second = generator.randrange(len(sides[0])), generator.randrange(len(sides[0]))
            en.write(f"{sides[0][first]} {sides[0][second]} {number}\n")
            de.write(f"{sides[1][first]} {sides[1][second]} {number}\n")
    for done, path in zip(partial, paths):
        done.rename(path)
    return paths


def run_training(tree: Path, corpus: tuple[Path, Path], dev: tuple[Path, Path],
                 output_dir: Path) -> dict[str, float]:
    """Runs `kt-train` of the checkout `tree` as the README does, 40 `tiny` steps; returns its
    peak RSS (GB), seconds to the end of step 1 and to the end."""
    command = [sys.executable, "-m", "trainers", "train", "--preset", "tiny",
               "--train-src", str(corpus[0]), "--train-tgt", str(corpus[1]),
               "--dev-src", str(dev[0]), "--dev-tgt", str(dev[1]), "--steps", "40",
               "--eval-every", "1000", "--precision", "float32", "--kernels", "fast",
               "--progress-seconds", "0", "--no-export", "--output-dir", str(output_dir)]
    environment = {**os.environ, "PYTHONPATH": str(tree)}
    started = time.monotonic()
    process = subprocess.Popen(command, cwd=tree, env=environment, stdout=subprocess.DEVNULL,
                               stderr=subprocess.PIPE, text=True)
    first_step, log = None, []
    for line in process.stderr:
        log.append(line)
        if first_step is None and STEP_LINE.match(line):
            first_step = time.monotonic() - started
    _, status, usage = os.wait4(process.pid, 0)
    ended = time.monotonic() - started
    if status != 0:
        raise RuntimeError(f"kt-train in {tree} failed:\n{''.join(log[-20:])}")
    return {"peak_gb": usage.ru_maxrss / 2 ** 20, "first_step_s": first_step, "end_s": ended}


def restart_seconds(storage: TokenStorage, steps: list[int]) -> dict[int, float]:
    """Seconds from opening `storage` to the first batch of a run resumed after each step
    (`base`'s batches: 25,000 tokens, max_length 256)."""
    seconds = {}
    for step in steps:
        started = time.monotonic()
        plan = BatchPlan(TokenStorage.open(storage.directory), 25_000, 256, seed=0)
        next(plan.elements(step))
        seconds[step] = time.monotonic() - started
    return seconds


def input_rate(storage: TokenStorage, batches: int = 300) -> tuple[float, list, list]:
    """Real tokens/s (both sides) the plan yields on one thread, with the batches' real source
    and target lengths (for the FLOPs per token)."""
    plan = BatchPlan(storage, 25_000, 256, seed=0)
    stream = plan.elements(0)
    next(stream)
    sources, targets = [], []
    started = time.monotonic()
    for _ in range(batches):
        _, ((source, _), target) = next(stream)
        sources += (source != PAD_ID).sum(axis=1).tolist()
        targets += (target != PAD_ID).sum(axis=1).tolist()
    elapsed = time.monotonic() - started
    return (sum(sources) + sum(targets)) / elapsed, sources, targets


def main() -> int:
    """Runs the benchmark and prints the RESULTS tables."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--pairs", type=int, nargs="+", default=[1_000_000, 4_000_000,
                                                                 16_000_000])
    parser.add_argument("--work-dir", type=Path, default=Path("/tmp/kt_data_scale"))
    parser.add_argument("--data-dir", type=Path, default=shared_data_dir())
    parser.add_argument("--baseline-tree", type=Path,
                        help="another checkout whose kt-train runs on the same corpora")
    parser.add_argument("--baseline-max-pairs", type=int, default=4_000_000)
    parser.add_argument("--restart-steps", type=int, nargs="+", default=[0, 10_000, 100_000])
    args = parser.parse_args()
    multi30k = args.data_dir / "multi30k"
    dev = multi30k / "val.en.gz", multi30k / "val.de.gz"
    tree = Path(__file__).resolve().parents[1]
    print("| pairs | text MB | tree | peak RSS GB | to step 1 s | to the end s |")
    print("| ---: | ---: | --- | ---: | ---: | ---: |")
    storages = {}
    for pairs in args.pairs:
        corpus = generate_corpus(multi30k, args.work_dir, pairs)
        megabytes = sum(path.stat().st_size for path in corpus) / 1e6
        trees = [("this", tree)] + ([("baseline", args.baseline_tree)] if args.baseline_tree
                                    and pairs <= args.baseline_max_pairs else [])
        for name, checkout in trees:
            output = args.work_dir / f"run_{name}_{pairs}"
            subprocess.run(["rm", "-rf", str(output)], check=True)
            figures = run_training(checkout.resolve(), corpus, dev, output)
            print(f"| {pairs:,} | {megabytes:,.0f} | {name} | {figures['peak_gb']:.2f} | "
                  f"{figures['first_step_s']:.1f} | {figures['end_s']:.1f} |", flush=True)
        storages[pairs] = TokenStorage.open(args.work_dir / f"run_this_{pairs}" / "prepared")
    storage = storages[min(storages, key=lambda pairs: abs(pairs - 4_000_000))]
    print(f"\nrestart from the {storage.pairs:,}-pair storage (base's 25,000-token batches):")
    for step, seconds in restart_seconds(storage, args.restart_steps).items():
        print(f"| step {step:,} | {seconds:.2f} s |")
    rate, sources, targets = input_rate(storage)
    config = TransformerConfig.preset("base")
    flops_per_token = training_flops(config, sources, targets) / (sum(sources) + sum(targets))
    consumed = 8 * GPU_PEAK_TFLOPS * 1e12 * GPU_MFU / flops_per_token
    print(f"\ninput: {rate:,.0f} real tokens/s on one thread; 8 GPUs at {GPU_PEAK_TFLOPS:.0f} "
          f"TFLOP/s and {GPU_MFU:.0%} MFU train base on {consumed:,.0f} tokens/s "
          f"({consumed / rate:.1f} threads' worth)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
