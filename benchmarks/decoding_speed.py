"""Beam-search decoding speed on CPU: our exported SavedModel vs our uncached decoder vs the
TF Model Garden `Seq2SeqTransformer`, on newstest2014 English sources.

    python benchmarks/decoding_speed.py [--data PATH] [--model-garden-python PYTHON]

Both models have `base` dimensions with random weights, and the end-of-sentence embedding row
is zeroed so that EOS (logit 0, far below the best of thousands of random logits) is never
chosen: every hypothesis runs to its length limit and both systems do the same work. Sources are
sentences with at least `--source-tokens - 1` subwords, cut to that length plus EOS, so every
output has exactly `--source-tokens + --extra-length` tokens. The Model Garden part runs in a
separate venv (`--model-garden-python`) via this same file's `--model-garden-worker` mode, which
imports only TensorFlow and `official`.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import tempfile
import time

import numpy as np

EOS_ID = 3  # keras_transformer.vocab_ids.EOS_ID, repeated for the worker (no package there).


def parse_args(argv=None) -> argparse.Namespace:
    shared = os.environ.get("KT_SHARED_DATA", "/work/shared/data")
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data", default=os.path.join(shared, "wmt14", "newstest2014.en"),
                        help="English sources (default: $KT_SHARED_DATA/wmt14/newstest2014.en)")
    parser.add_argument("--vocab-size", type=int, default=8000)
    parser.add_argument("--source-tokens", type=int, default=16,
                        help="source length in subwords, EOS included")
    parser.add_argument("--extra-length", type=int, default=16)
    parser.add_argument("--beam-size", type=int, default=4)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--throughput-batches", type=int, default=2)
    parser.add_argument("--latency-sentences", type=int, default=8)
    parser.add_argument("--uncached-batches", type=int, default=1)
    parser.add_argument("--export-dtypes", default="float32",
                        help="comma-separated dtypes to export and time (float32, bfloat16); "
                             "ratios are against the first")
    parser.add_argument("--model-garden-python", default="/work/bench-venv/bin/python",
                        help="python of a venv with tf-models-official ('' to skip)")
    parser.add_argument("--model-garden-worker", nargs=2, metavar=("IDS_NPY", "SETTINGS_JSON"),
                        help=argparse.SUPPRESS)
    return parser.parse_args(argv)


def timed(function, batches) -> list[float]:
    """Seconds per call of `function` on each batch, after one untimed warm-up call."""
    function(batches[0])
    seconds = []
    for batch in batches:
        start = time.perf_counter()
        function(batch)
        seconds.append(time.perf_counter() - start)
    return seconds


def measure(function, ids: np.ndarray, settings: dict) -> dict:
    """Throughput (target tokens/s at `batch_size`) and batch-1 latency (median seconds)."""
    size, output_tokens = settings["batch_size"], settings["output_tokens"]
    batches = [ids[i * size:(i + 1) * size] for i in range(settings["throughput_batches"])]
    seconds = timed(function, batches)
    singles = [ids[i:i + 1] for i in range(settings["latency_sentences"])]
    latency = statistics.median(timed(function, singles)) if singles else None
    return {"tokens_per_second": size * output_tokens * len(batches) / sum(seconds),
            "batch_seconds": seconds, "latency_seconds": latency}


def source_ids(path: str, tokenizer, count: int, source_tokens: int) -> np.ndarray:
    """`[count, source_tokens]` ids: the first long-enough sentences, cut, EOS-terminated."""
    import tensorflow as tf

    with open(path, encoding="utf-8") as handle:
        lines = [line.strip() for line in handle if line.strip()]
    pieces = tokenizer.tokenize(tf.constant(lines))
    long_enough = [row[:source_tokens - 1] for row in pieces.to_list()
                   if len(row) >= source_tokens - 1]
    if len(long_enough) < count:
        raise ValueError(f"--data: only {len(long_enough)} sentences have "
                         f"{source_tokens - 1} subwords, {count} needed")
    return np.array([row + [EOS_ID] for row in long_enough[:count]], np.int32)


def run_ours(args: argparse.Namespace, workdir: str, settings: dict) -> tuple[dict, np.ndarray]:
    import tensorflow as tf

    import keras_transformer as kt
    from keras_transformer.data import SubwordTokenizer
    from keras_transformer.decoding import beam_search
    from keras_transformer.export import export_translator
    from keras_transformer.search_settings import SearchSettings

    with open(args.data, encoding="utf-8") as handle:
        texts = [line.strip() for line in handle if line.strip()]
    tokenizer = SubwordTokenizer.train(texts, args.vocab_size, os.path.join(workdir, "vocab"))
    count = max(settings["batch_size"] * settings["throughput_batches"],
                settings["latency_sentences"])
    ids = source_ids(args.data, tokenizer, count, args.source_tokens)

    model = kt.Transformer(kt.TransformerConfig.preset("base", vocab_size=tokenizer.vocab_size,
                                                       dropout=0.0))
    embeddings = model.source_embedding.embeddings
    embeddings.assign(tf.tensor_scatter_nd_update(embeddings, [[EOS_ID]],
                                                  tf.zeros([1, embeddings.shape[1]])))
    search = SearchSettings(args.beam_size, length_penalty=0.6, max_decode_extra=args.extra_length)
    results = {}
    for dtype in args.export_dtypes.split(","):
        path = export_translator(model, tokenizer, dtype, os.path.join(workdir, "saved_models"),
                                 search, dtype)
        translate_ids = tf.saved_model.load(path).signatures["translate_ids"]
        check = translate_ids(source_ids=tf.constant(ids[:2]))["ids"].numpy()
        assert check.shape[1] == settings["output_tokens"] and not (check == EOS_ID).any(), check
        name = "exported" if dtype == "float32" else f"exported_{dtype}"
        results[name] = measure(
            lambda batch, run=translate_ids: run(source_ids=tf.constant(batch)), ids, settings)
    if args.uncached_batches > 0:  # 0 skips the slow recomputing reference
        uncached = dict(settings, throughput_batches=args.uncached_batches, latency_sentences=0)
        results["uncached"] = measure(
            lambda batch: beam_search(model, batch, args.beam_size, 0.6, args.extra_length,
                                      use_cache=False), ids, uncached)
    return results, ids


def model_garden_worker(ids_path: str, settings_json: str) -> None:
    """Runs in the Model Garden venv: prints the `measure` result as JSON."""
    import tensorflow as tf
    from official.nlp.modeling import models

    settings = json.loads(settings_json)
    ids = np.load(ids_path)
    layers = dict(num_layers=6, num_attention_heads=8, intermediate_size=2048)
    model = models.Seq2SeqTransformer(
        vocab_size=settings["vocab_size"], embedding_width=512, beam_size=settings["beam_size"],
        alpha=0.6, extra_decode_length=settings["extra_length"], eos_id=EOS_ID,
        encoder_layer=models.TransformerEncoder(**layers),
        decoder_layer=models.TransformerDecoder(**layers))
    decode = tf.function(lambda batch: model({"inputs": batch})["outputs"],
                         reduce_retracing=True)
    decode(tf.constant(ids[:1]))
    embeddings = model.embedding_lookup.embeddings
    embeddings.assign(tf.tensor_scatter_nd_update(embeddings, [[EOS_ID]],
                                                  tf.zeros([1, embeddings.shape[1]])))
    check = decode(tf.constant(ids[:2])).numpy()
    assert check.shape[1] == settings["output_tokens"] and not (check == EOS_ID).any(), check
    print(json.dumps(measure(lambda batch: decode(tf.constant(batch)), ids, settings)))


def run_model_garden(python: str, ids: np.ndarray, settings: dict, workdir: str) -> dict:
    ids_path = os.path.join(workdir, "ids.npy")
    np.save(ids_path, ids)
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
    env.pop("PYTHONPATH", None)
    run = subprocess.run([python, os.path.abspath(__file__), "--model-garden-worker", ids_path,
                          json.dumps(settings)], capture_output=True, text=True, env=env,
                         cwd=workdir, check=False)
    if run.returncode != 0:
        raise RuntimeError(f"Model Garden worker failed:\n{run.stderr[-3000:]}")
    return json.loads(run.stdout.strip().splitlines()[-1])


def main(argv=None) -> None:
    args = parse_args(argv)
    if args.model_garden_worker:
        model_garden_worker(*args.model_garden_worker)
        return
    settings = {"batch_size": args.batch_size, "throughput_batches": args.throughput_batches,
                "latency_sentences": args.latency_sentences, "beam_size": args.beam_size,
                "extra_length": args.extra_length, "vocab_size": args.vocab_size,
                "output_tokens": args.source_tokens + args.extra_length}
    with tempfile.TemporaryDirectory() as workdir:
        results, ids = run_ours(args, workdir, settings)
        if args.model_garden_python:
            results["model_garden"] = run_model_garden(args.model_garden_python, ids,
                                                       settings, workdir)
    print(json.dumps({"settings": settings, "results": results}, indent=2))
    first = next(iter(results))
    exported = results[first]["tokens_per_second"]
    for name, result in results.items():
        latency = result["latency_seconds"]
        print(f"{name:>13}: {result['tokens_per_second']:8.1f} target tokens/s at batch "
              f"{args.batch_size}, x{exported / result['tokens_per_second']:.2f} for {first}"
              + (f"; batch-1 latency {latency:.3f} s" if latency else ""))


if __name__ == "__main__":
    main()
