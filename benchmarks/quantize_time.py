"""Seconds `Transformer.quantize("int8")` takes on a built model of a preset, each time in a
fresh process, for this checkout and, with `--other-tree`, another one's code (e.g. the one
before a change), the two taking turns `--rounds` times.

    PYTHONPATH=. python benchmarks/quantize_time.py [--preset base] [--vocab-size 8000]
        [--rounds 3] [--other-tree DIR]

Prints one JSON line per process (tree, seconds, the objects the collector tracked before
quantizing) and the median per tree.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

WORKER = """
import gc, json, sys, time, warnings
import numpy as np
import keras_transformer as kt
preset, vocab_size = sys.argv[1], int(sys.argv[2])
model = kt.Transformer(kt.TransformerConfig.preset(preset, vocab_size=vocab_size))
model((np.ones((1, 5), "int32"), np.ones((1, 5), "int32")))
tracked = len(gc.get_objects())
start = time.perf_counter()
with warnings.catch_warnings():
    warnings.simplefilter("ignore")  # Keras's note per layer class it cannot quantize
    model.quantize("int8")
print(json.dumps({"seconds": time.perf_counter() - start, "tracked_objects": tracked,
                  "projections": len(model.projections())}))
"""


def quantize_seconds(tree: Path, preset: str, vocab_size: int) -> dict:
    """One fresh process of `tree`'s code: its measurement as a dict."""
    path = os.pathsep.join([str(tree), *filter(None, [os.environ.get("PYTHONPATH")])])
    completed = subprocess.run([sys.executable, "-c", WORKER, preset, str(vocab_size)],
                               cwd=tree, env={**os.environ, "PYTHONPATH": path,
                                              "TF_CPP_MIN_LOG_LEVEL": "3"},
                               capture_output=True, text=True, check=False)
    if completed.returncode:
        raise RuntimeError(completed.stderr[-3000:])
    return json.loads(completed.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--preset", default="base")
    parser.add_argument("--vocab-size", type=int, default=8000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--other-tree", help="another checkout, timed in turn with this one")
    args = parser.parse_args()
    trees = {"this": Path(__file__).resolve().parents[1]}
    if args.other_tree:
        trees["other"] = Path(args.other_tree).resolve()
    seconds: dict[str, list[float]] = {name: [] for name in trees}
    for _ in range(args.rounds):
        for name, tree in trees.items():
            result = quantize_seconds(tree, args.preset, args.vocab_size)
            print(json.dumps({"tree": name, **result}), flush=True)
            seconds[name].append(result["seconds"])
    print(json.dumps({"preset": args.preset, "median_seconds": {
        name: round(statistics.median(values), 3) for name, values in seconds.items()}}))


if __name__ == "__main__":
    main()
