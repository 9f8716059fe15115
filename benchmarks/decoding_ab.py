"""Decoding speed of this checkout against another (e.g. the code before a change), in one run:
the same model exported by each checkout's own `kt-export`, as a graph and as an XLA SavedModel,
then timed in alternation by `decoding_speed.measure` (beam 4: target tokens/s at batch 32,
median batch-1 latency), `--rounds` times; medians per export, and each export's ratio to the
other checkout's of the same kind.

    PYTHONPATH=. python benchmarks/decoding_ab.py --other-tree /tmp/before [--rounds 7] \
        [--other-kernels fast,reference]

The model is `decoding_speed.py`'s: `base` sizes, random weights, PAD, BOS and EOS embedding
rows zeroed so that every output has exactly `--source-tokens + --extra-length` tokens (checked),
a vocabulary learned from `--data`, sources from it. It is made and saved as a .keras file by the
other checkout (this checkout's exports thus also load the other's file), and every export's
first ids are compared. Each `kt-export` runs under `KT_KERNELS` set (no probe): this checkout's
under `fast`, the other's once per kernel set of `--other-kernels` (a checkout whose decoding
step depended on the kernel set exports each).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

import numpy as np

from decoding_speed import BOS_ID, EOS_ID, PAD_ID, measure, source_ids

THIS_TREE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def parse_args(argv=None) -> argparse.Namespace:
    shared = os.environ.get("KT_SHARED_DATA", os.path.join(THIS_TREE, "..", "shared", "data"))
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--other-tree", required=True,
                        help="root of the other checkout (e.g. `git worktree add /tmp/before`)")
    parser.add_argument("--other-kernels", default="fast",
                        help="comma-separated kernel sets the other checkout exports under")
    parser.add_argument("--data", default=os.path.join(shared, "wmt14", "newstest2014.en"))
    parser.add_argument("--vocab-size", type=int, default=8000)
    parser.add_argument("--source-tokens", type=int, default=16)
    parser.add_argument("--extra-length", type=int, default=16)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--throughput-batches", type=int, default=2)
    parser.add_argument("--latency-sentences", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--prepare-worker", nargs=2, metavar=("WORKDIR", "SETTINGS_JSON"),
                        help=argparse.SUPPRESS)
    return parser.parse_args(argv)


def prepare_worker(workdir: str, settings_json: str) -> None:
    """Runs under the other checkout's code: the vocabulary, the model (saved as
    `model.keras`) and the source ids (`ids.npy`), with only APIs both checkouts have."""
    import tensorflow as tf

    import keras_transformer as kt
    from keras_transformer.data import SubwordTokenizer

    settings = json.loads(settings_json)
    with open(settings["data"], encoding="utf-8") as handle:
        texts = [line.strip() for line in handle if line.strip()]
    tokenizer = SubwordTokenizer.train(texts, settings["vocab_size"],
                                       os.path.join(workdir, "vocab"))
    count = max(settings["batch_size"] * settings["throughput_batches"],
                settings["latency_sentences"])
    np.save(os.path.join(workdir, "ids.npy"),
            source_ids(settings["data"], tokenizer, count, settings["source_tokens"]))
    model = kt.Transformer(kt.TransformerConfig.preset("base", vocab_size=tokenizer.vocab_size,
                                                       dropout=0.0))
    embeddings = model.source_embedding.embeddings
    embeddings.assign(tf.tensor_scatter_nd_update(embeddings, [[PAD_ID], [BOS_ID], [EOS_ID]],
                                                  tf.zeros([3, embeddings.shape[1]])))
    model.save(os.path.join(workdir, "model.keras"))


def run(command: list[str], tree: str, **environment: str) -> str:
    """`command` run with `tree`'s code (its root first on the path); its output."""
    env = dict(os.environ, PYTHONPATH=tree, TF_CPP_MIN_LOG_LEVEL="2", **environment)
    done = subprocess.run(command, cwd=tree, env=env, capture_output=True, text=True,
                          check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} in {tree} failed:\n{done.stderr[-3000:]}")
    return done.stdout


def export(tree: str, kernels: str, workdir: str, name: str, args: argparse.Namespace,
           xla: bool) -> str:
    """The path of `tree`'s `kt-export` of the model, under `KT_KERNELS=kernels`."""
    return run([sys.executable, "-m", "trainers.export", os.path.join(workdir, "model.keras"),
                os.path.join(workdir, "vocab"), "--name", name, "--base-dir",
                os.path.join(workdir, "exports"), "--beam-size", "4", "--length-penalty", "0.6",
                "--max-decode-extra", str(args.extra_length)] + (["--xla"] if xla else []),
               tree, KT_KERNELS=kernels).strip().splitlines()[-1]


def main(argv=None) -> None:
    args = parse_args(argv)
    if args.prepare_worker:
        prepare_worker(*args.prepare_worker)
        return
    other = os.path.abspath(args.other_tree)
    settings = {"batch_size": args.batch_size, "throughput_batches": args.throughput_batches,
                "latency_sentences": args.latency_sentences, "data": os.path.abspath(args.data),
                "vocab_size": args.vocab_size, "source_tokens": args.source_tokens,
                "output_tokens": args.source_tokens + args.extra_length}
    with tempfile.TemporaryDirectory() as workdir:
        run([sys.executable, os.path.abspath(__file__), "--other-tree", other,
             "--prepare-worker", workdir, json.dumps(settings)], other)
        trees = [("this", THIS_TREE, "fast")] + [
            (f"other ({kernels})", other, kernels) for kernels in args.other_kernels.split(",")]
        paths = {}
        for kind, xla in (("graph", False), ("XLA", True)):
            for label, tree, kernels in trees:
                name = f"{kind}-{label.split()[0]}-{kernels}".lower()
                paths[(kind, label)] = export(tree, kernels, workdir, name, args, xla)
        results = time_in_alternation(paths, np.load(os.path.join(workdir, "ids.npy")),
                                      settings, args.rounds)
    print(json.dumps({"settings": settings, "rounds": args.rounds,
                      "results": {f"{kind}, {label}": result
                                  for (kind, label), result in results.items()}}, indent=2))
    for (kind, label), result in results.items():
        reference = results[(kind, trees[1][0])]
        print(f"{kind:>5}, {label:<20}: {result['tokens_per_second']:7.1f} tok/s at batch "
              f"{args.batch_size} (x{result['tokens_per_second'] / reference['tokens_per_second']:.3f}"
              f"), batch-1 latency {result['latency_seconds']:.3f} s "
              f"(x{result['latency_seconds'] / reference['latency_seconds']:.3f}); first ids "
              + ("equal" if result["first_ids"] == reference["first_ids"] else "DIFFER"))


def time_in_alternation(paths: dict, ids: np.ndarray, settings: dict, rounds: int) -> dict:
    """Per export: the medians over `rounds` of `measure`'s throughput and latency, the exports
    timed one after another in each round, in reverse order every other round."""
    import tensorflow as tf
    import tensorflow_text  # noqa: F401  (registers the tokenizer's ops the exports hold)

    functions = {key: tf.saved_model.load(path).signatures["translate_ids"]
                 for key, path in paths.items()}
    first_ids = {}
    for key, function in functions.items():
        check = function(source_ids=tf.constant(ids[:2]))["ids"].numpy()
        assert check.shape[1] == settings["output_tokens"] and not (check == EOS_ID).any(), check
        first_ids[key] = check.tolist()
    reads = {key: [] for key in functions}
    for number in range(rounds):
        for key in (list(functions) if number % 2 == 0 else list(functions)[::-1]):
            reads[key].append(measure(lambda batch, run=functions[key]: run(
                source_ids=tf.constant(batch)), ids, settings))
    return {key: {"tokens_per_second": statistics.median(
                      read["tokens_per_second"] for read in reads[key]),
                  "latency_seconds": statistics.median(
                      read["latency_seconds"] for read in reads[key]),
                  "tokens_per_second_reads": [read["tokens_per_second"] for read in reads[key]],
                  "latency_seconds_reads": [read["latency_seconds"] for read in reads[key]],
                  "first_ids": first_ids[key]} for key in functions}


if __name__ == "__main__":
    main()
