"""A bounded soak of one loaded export: many calls from several threads, as a model server
makes them; calls/s and resident memory at the start and the end (flat = no leak).

    python benchmarks/serving_soak.py SAVED_MODEL_DIR [--calls 10000] [--threads 8] \
        [--batch 4] [--data PATH]

Each call translates `--batch` sentences drawn in turn from `--data` (default: the demo
corpus' test sources) through `serving_default`. Resident memory is read from
/proc/self/status (VmRSS) after a warm-up, at every 10% of the calls, and at the end.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import tensorflow as tf

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def resident_megabytes() -> float:
    """This process' resident set size (Linux)."""
    with open("/proc/self/status", encoding="utf-8") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS in /proc/self/status")


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("saved_model")
    parser.add_argument("--calls", type=int, default=10_000)
    parser.add_argument("--threads", type=int, default=8)
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--data", help="sentences, one a line (default: the demo test set)")
    args = parser.parse_args(argv)
    sys.path.insert(0, REPO_ROOT)
    import tensorflow_text  # noqa: F401  (registers the SentencePiece ops)
    from keras_transformer.data import read_lines, write_demo_corpus

    if args.data:
        sentences = [line for line in read_lines(args.data) if line]
    else:
        with tempfile.TemporaryDirectory() as directory:
            sentences = read_lines(write_demo_corpus(directory)["test"][0])
    serving = tf.saved_model.load(args.saved_model).signatures["serving_default"]
    batches = [sentences[(i * args.batch) % len(sentences):][:args.batch] or sentences[:1]
               for i in range(args.calls)]
    serving(text=tf.constant(batches[0]))
    memory = [(0, round(resident_megabytes(), 1))]
    done, lock = [0], threading.Lock()

    def call(texts):
        serving(text=tf.constant(texts))
        with lock:
            done[0] += 1
            if done[0] % max(1, args.calls // 10) == 0:
                memory.append((done[0], round(resident_megabytes(), 1)))

    start = time.perf_counter()
    with ThreadPoolExecutor(max_workers=args.threads) as pool:
        list(pool.map(call, batches))
    seconds = time.perf_counter() - start
    result = {"calls": args.calls, "threads": args.threads, "batch": args.batch,
              "seconds": round(seconds, 1), "calls_per_second": round(args.calls / seconds, 1),
              "resident_mb": memory}
    print(json.dumps(result))
    print(f"{args.calls} calls in {seconds:.1f} s ({args.calls / seconds:.1f} calls/s); "
          f"resident memory {memory[0][1]} MB after warm-up, {memory[-1][1]} MB at the end")


if __name__ == "__main__":
    main()
