"""Decoding speed of this checkout against another (e.g. the code before a change), in one run:
the same model exported by each checkout's own `kt-export`, as a graph and as an XLA SavedModel,
then timed in alternation with `decoding_speed.py`'s figures (beam 4: target tokens/s over
batches of 32, median latency over single sentences, after untimed warm-up calls), `--rounds`
rounds; per export the medians over rounds, and the median over rounds of its ratio to the other
checkout's export of the same kind in the same round.

    PYTHONPATH=. python benchmarks/decoding_ab.py --other-tree /tmp/before [--rounds 7] \
        [--other-kernels fast,reference] [--workdir DIR]

The model is `decoding_speed.py`'s: `base` sizes, random weights, PAD, BOS and EOS embedding
rows zeroed so that every output has exactly `--source-tokens + --extra-length` tokens (checked),
a vocabulary learned from `--data`, sources from it. It is made and saved as a .keras file by the
other checkout (this checkout's exports thus also load the other's file), and every export's
first ids are compared. Each `kt-export` runs under `KT_KERNELS` set (no probe): this checkout's
under `fast`, the other's once per implementation of `--other-kernels` (a checkout whose decoding
step depended on the implementation exports each).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

from decoding_speed import BOS_ID, EOS_ID, PAD_ID, source_ids

THIS_TREE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def parse_args(argv=None) -> argparse.Namespace:
    shared = os.environ.get("KT_SHARED_DATA", os.path.join(THIS_TREE, "..", "shared", "data"))
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--other-tree", required=True,
                        help="root of the other checkout (e.g. `git worktree add /tmp/before`)")
    parser.add_argument("--other-kernels", default="fast",
                        help="comma-separated implementations the other checkout exports under")
    parser.add_argument("--data", default=os.path.join(shared, "wmt14", "newstest2014.en"))
    parser.add_argument("--vocab-size", type=int, default=8000)
    parser.add_argument("--source-tokens", type=int, default=16)
    parser.add_argument("--extra-length", type=int, default=16)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--throughput-batches", type=int, default=2)
    parser.add_argument("--latency-sentences", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--workdir", help="where the model and the exports are kept (default: "
                        "a temporary directory); one holding an earlier run's exports.json is "
                        "timed again without exporting")
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
    trees = [("this", THIS_TREE, "fast")] + [
        (f"other ({kernels})", other, kernels) for kernels in args.other_kernels.split(",")]
    with tempfile.TemporaryDirectory() as temporary:
        workdir = args.workdir or temporary
        record = os.path.join(workdir, "exports.json")
        if not os.path.exists(record):
            os.makedirs(workdir, exist_ok=True)
            run([sys.executable, os.path.abspath(__file__), "--other-tree", other,
                 "--prepare-worker", workdir, json.dumps(settings)], other)
            exported = [[kind, label, export(tree, kernels, workdir,
                                             f"{kind}-{label.split()[0]}-{kernels}".lower(),
                                             args, kind == "XLA")]
                        for kind in ("graph", "XLA") for label, tree, kernels in trees]
            with open(record, "w", encoding="utf-8") as handle:
                json.dump(exported, handle)
        with open(record, encoding="utf-8") as handle:
            paths = {(kind, label): path for kind, label, path in json.load(handle)}
        results = time_in_alternation(paths, np.load(os.path.join(workdir, "ids.npy")),
                                      settings, args.rounds)
    print(json.dumps({"settings": settings, "rounds": args.rounds,
                      "results": {f"{kind}, {label}": result
                                  for (kind, label), result in results.items()}}, indent=2))
    for (kind, label), result in results.items():
        reference = (kind, trees[1][0])
        ratios = paired_ratios(results, (kind, label), reference)
        print(f"{kind:>5}, {label:<20}: {result['tokens_per_second']:7.1f} tok/s at batch "
              f"{args.batch_size} (x{ratios['tokens_per_second']:.3f}), batch-1 latency "
              f"{result['latency_seconds']:.3f} s (x{ratios['latency_seconds']:.3f}); first "
              "ids " + ("equal" if result["first_ids"] == results[reference]["first_ids"]
                        else "DIFFER"))


def time_in_alternation(paths: dict, ids: np.ndarray, settings: dict, rounds: int) -> dict:
    """Per export: `measure`'s figures (target tokens/s over `throughput_batches` batches,
    median latency over `latency_sentences` single sentences) in each of `rounds` rounds, and
    their medians. In a round every input is run by every export in turn, the order reversed
    from one input to the next, so that the exports compared share the machine's state
    (others' load on shared cores drifts by more than the differences measured); every
    export first runs each input shape once, untimed."""
    import tensorflow as tf
    import tensorflow_text  # noqa: F401  (registers the tokenizer's ops the exports hold)

    functions = {key: tf.saved_model.load(path).signatures["translate_ids"]
                 for key, path in paths.items()}
    size = settings["batch_size"]
    batches = [ids[i * size:(i + 1) * size] for i in range(settings["throughput_batches"])]
    singles = [ids[i:i + 1] for i in range(settings["latency_sentences"])]
    first_ids = {}
    for key, function in functions.items():
        check = function(source_ids=tf.constant(ids[:2]))["ids"].numpy()
        assert check.shape[1] == settings["output_tokens"] and not (check == EOS_ID).any(), check
        first_ids[key] = check.tolist()
        for warm_up in (batches[0], singles[0]):
            function(source_ids=tf.constant(warm_up))
    reads = {key: [] for key in functions}
    for number in range(rounds):
        seconds = {key: [] for key in functions}
        for index, batch in enumerate(batches + singles):
            order = list(functions) if (number + index) % 2 == 0 else list(functions)[::-1]
            for key in order:
                start = time.perf_counter()
                functions[key](source_ids=tf.constant(batch))
                seconds[key].append(time.perf_counter() - start)
        for key, taken in seconds.items():
            reads[key].append({
                "tokens_per_second": size * settings["output_tokens"] * len(batches)
                / sum(taken[:len(batches)]),
                "latency_seconds": statistics.median(taken[len(batches):])})
    return {key: {figure: statistics.median(read[figure] for read in reads[key])
                  for figure in ("tokens_per_second", "latency_seconds")}
            | {"reads": reads[key], "first_ids": first_ids[key]} for key in functions}


def paired_ratios(results: dict, key, reference) -> dict[str, float]:
    """The median over rounds of `key`'s figure over `reference`'s in the same round."""
    return {figure: statistics.median(
        read[figure] / other[figure] for read, other in zip(results[key]["reads"],
                                                            results[reference]["reads"]))
        for figure in ("tokens_per_second", "latency_seconds")}


if __name__ == "__main__":
    main()
