"""The device's runtime against the servers': the LiteRT exports (float32, float16, int8; the
LiteRT interpreter with XNNPACK, `--threads`) against our SavedModel exports (graph and XLA)
and CTranslate2 (float32 and int8) of the same model, in one process: one sentence at a time,
sentence by sentence in alternation (latency), and batches of each `--batch` size
(throughput: a LiteRT export of any source length takes a batch a call; "one sentence a call"
beside each LiteRT system calls it once per sentence of the batch, as exports before batches
did); and each export's size on disk. `--systems` keeps the systems whose names start with one
of its prefixes (the SavedModel graph, the reference, always runs).

    PYTHONPATH=.:benchmarks python benchmarks/litert_speed.py [--model base|opus-mt] \
        [--sentences 12] [--batch 1 8 32 64] [--threads 2] [--rounds 3] [--workdir DIR] \
        [--systems "LiteRT int8" "CTranslate2 int8"]

`--model base` is `decoding_speed.py`'s: `base` sizes, random weights, PAD, BOS and EOS
embedding rows zeroed so that every output has exactly `--source-tokens + --extra-length`
tokens, a vocabulary learned from `--data`; `--model opus-mt` `imported_speed.py`'s random
Marian model of OPUS-MT's shape (6 + 6 layers, 512 wide, swish, two SentencePiece models of
`--vocab-size` pieces; `</s>` never the best token, so outputs have that length too), imported.
Sources from `--data`; beam 4. Every system's first ids are compared with the SavedModel's
(float32 ones equal). Prints one JSON object: per system the median latency over every sentence
of every round and its ratio to CTranslate2 int8's, at each batch size the median throughput
(sentences per second) and its ratio to CTranslate2 int8's (when it runs), and the file size.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time

import numpy as np

from decoding_speed import BOS_ID, EOS_ID, PAD_ID, source_ids


def parse_args(argv=None) -> argparse.Namespace:
    shared = os.environ.get("KT_SHARED_DATA", os.path.join(
        os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "..", "shared", "data"))
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", choices=("base", "opus-mt"), default="base")
    parser.add_argument("--data", default=os.path.join(shared, "wmt14", "newstest2014.en"))
    parser.add_argument("--vocab-size", type=int, default=8000)
    parser.add_argument("--source-tokens", type=int, default=16)
    parser.add_argument("--extra-length", type=int, default=16)
    parser.add_argument("--sentences", type=int, default=12)
    parser.add_argument("--batch", type=int, nargs="+", default=[1, 8, 32, 64],
                        help="batch sizes the throughput is measured at (default: 1 8 32 64)")
    parser.add_argument("--systems", nargs="+", help="prefixes of the systems' names to run "
                        "(default: every system)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--workdir", help="where the exports are written (default: a temporary "
                        "directory)")
    return parser.parse_args(argv)


def size_of(path: str) -> int:
    """Bytes of the files under `path`."""
    return sum(os.path.getsize(os.path.join(root, name))
               for root, _, names in os.walk(path) for name in names)


def systems(args: argparse.Namespace, workdir: str) -> tuple[dict, dict, np.ndarray]:
    """Each system's one-sentence translation function (ids `[1, len]` -> best ids) and the
    size of its export on disk."""
    import tensorflow as tf

    import keras_transformer as kt
    from keras_transformer.data import SubwordTokenizer
    from keras_transformer.serving.ctranslate2_export import (CTranslate2Search,
                                                              export_ctranslate2)
    from keras_transformer.serving.export import export_translator
    from keras_transformer.serving.litert_export import export_litert, litert_functions

    if args.model == "base":
        with open(args.data, encoding="utf-8") as handle:
            texts = [line.strip() for line in handle if line.strip()]
        tokenizer = SubwordTokenizer.train(texts, args.vocab_size, os.path.join(workdir, "vocab"))
        model = kt.Transformer(kt.TransformerConfig.preset(
            "base", vocab_size=tokenizer.vocab_size, dropout=0.0))
        embeddings = model.source_embedding.embeddings
        embeddings.assign(tf.tensor_scatter_nd_update(embeddings, [[PAD_ID], [BOS_ID], [EOS_ID]],
                                                      tf.zeros([3, embeddings.shape[1]])))
    else:
        from pathlib import Path

        from imported_speed import opus_mt_folder
        from keras_transformer.data.sentencepiece_pair import SentencePiecePair
        from keras_transformer.importing.marian import read_marian_folder
        from keras_transformer.importing.run_directory import imported_transformer

        imported = read_marian_folder(opus_mt_folder(Path(workdir), args.vocab_size))
        model = imported_transformer(imported)
        tokenizer = SentencePiecePair(imported.source_spm, imported.target_spm,
                                      imported.source_pieces, imported.target_pieces)
    ids = source_ids(args.data, tokenizer, max(args.sentences, *args.batch),
                     args.source_tokens)

    def wanted(name: str) -> bool:
        return name == "SavedModel graph" or not args.systems or any(
            name.startswith(prefix) for prefix in args.systems)

    search = kt.SearchSettings(4, length_penalty=0.6, max_decode_extra=args.extra_length)
    functions, sizes = {}, {}
    for name, xla in (("SavedModel graph", False), ("SavedModel XLA", True)):
        if not wanted(name):
            continue
        path = export_translator(model, tokenizer, name.split()[1].lower(),
                                 os.path.join(workdir, "saved_models"), search,
                                 jit_compile=xla)
        signature = tf.saved_model.load(path).signatures["translate_ids"]
        functions[name] = lambda row, run=signature: run(source_ids=tf.constant(row))["ids"]
        sizes[name] = size_of(path)
    for quantization in ("float32", "float16", "int8"):
        if not wanted(f"LiteRT {quantization}"):
            continue
        started = time.perf_counter()
        path = export_litert(model, tokenizer, os.path.join(workdir, f"litert_{quantization}"),
                             search, quantization)
        print(f"litert {quantization}: converted in {time.perf_counter() - started:.0f} s",
              flush=True)
        _, translate_ids, _, _, _ = litert_functions(path, threads=args.threads)
        functions[f"LiteRT {quantization}"] = lambda row, run=translate_ids: run(row)["ids"]
        functions[f"LiteRT {quantization}, one sentence a call"] = (
            lambda rows, run=translate_ids: [run(rows[index:index + 1])["ids"][0]
                                             for index in range(len(rows))])
        sizes[f"LiteRT {quantization}"] = size_of(path)
    for quantization in ("float32", "int8"):
        if not wanted(f"CTranslate2 {quantization}"):
            continue
        path = export_ctranslate2(model, tokenizer, os.path.join(workdir, f"ct2_{quantization}"),
                                  quantization=quantization, settings=search)
        translate_ids = CTranslate2Search(path, intra_threads=args.threads).translate_ids
        functions[f"CTranslate2 {quantization}"] = lambda row, run=translate_ids: run(
            tf.constant(row))["nbest_ids"][:, 0]
        sizes[f"CTranslate2 {quantization}"] = size_of(path)
    return functions, sizes, ids


def main(argv=None) -> None:
    args = parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="litert_speed-") as temporary:
        workdir = args.workdir or temporary
        functions, sizes, ids = systems(args, workdir)
        reference = np.asarray(functions["SavedModel graph"](ids[:1]))
        first_ids = {}
        for name, function in functions.items():  # untimed: warm-up, and the first ids
            first = np.asarray(function(ids[:1]))
            first_ids[name] = bool(np.array_equal(first[0, :reference.shape[1]], reference[0]))
        seconds = {name: [] for name in functions}
        for _ in range(args.rounds):
            for row in range(args.sentences):
                for name, function in functions.items():
                    start = time.perf_counter()
                    function(ids[row:row + 1])
                    seconds[name].append(time.perf_counter() - start)
        latency = {name: statistics.median(values) for name, values in seconds.items()}
        throughput = {}
        for size in args.batch:
            batch = ids[:size]
            batch_seconds = {name: [] for name in functions}
            for _ in range(args.rounds):
                for name, function in functions.items():
                    start = time.perf_counter()
                    function(batch)
                    batch_seconds[name].append(time.perf_counter() - start)
            throughput[size] = {name: size / statistics.median(values)
                                for name, values in batch_seconds.items()}

        def over_ctranslate2_int8(figures: dict, name: str):
            return (round(figures[name] / figures["CTranslate2 int8"], 3)
                    if "CTranslate2 int8" in figures else None)

        print(json.dumps({"model": args.model, "sentences": args.sentences,
                          "rounds": args.rounds, "threads": args.threads,
                          "output_tokens": args.source_tokens + args.extra_length,
                          "systems": {name: {
                              "latency_seconds": round(latency[name], 4),
                              "latency_over_ctranslate2_int8": over_ctranslate2_int8(latency,
                                                                                     name),
                              "sentences_per_second": {
                                  size: round(figures[name], 2)
                                  for size, figures in throughput.items()},
                              "throughput_over_ctranslate2_int8": {
                                  size: over_ctranslate2_int8(figures, name)
                                  for size, figures in throughput.items()},
                              "megabytes": round(sizes[name.split(",")[0]] / 1e6, 1),
                              "first_ids_equal_savedmodel": first_ids[name]}
                              for name in functions}}, indent=2))


if __name__ == "__main__":
    main()
