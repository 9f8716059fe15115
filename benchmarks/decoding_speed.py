"""Beam-search decoding speed on CPU: our exported SavedModel (float32, and with
`--export-dtypes` bfloat16) vs our uncached decoder vs CTranslate2 (float32 and int8) vs the TF
Model Garden `Seq2SeqTransformer`, on newstest2014 English sources.

    python benchmarks/decoding_speed.py [--data PATH] [--model-garden-python PYTHON] \
        [--ctranslate2-python PYTHON] [--export-dtypes float32,bfloat16] [--profile] \
        [--shortlists 1000,20 1000,50 --shortlist-data SRC,TGT[,SRC,TGT...]]

CTranslate2 runs OUR model, converted by `keras_transformer.serving.ctranslate2_export` (what
`kt-export --format ctranslate2` writes) once per `--ctranslate2-types` quantization, searched
by the library's CTranslate2 path (`CTranslate2Search`: what `kt-translate` runs, with the
same search settings as our export), and the first sentences' output ids are compared with the
export's (equal in float32: the same function and search). Its worker runs under
`--ctranslate2-python` (default: this Python; it imports this package).

Both models have `base` dimensions with random weights, and the embedding rows of PAD, BOS and EOS
are zeroed (the output projection is tied), so those three get logit 0, far below the best of
thousands of random logits: EOS is never chosen, so every hypothesis runs to its length limit and
both systems do the same work; and PAD and BOS hold no probability, as in a trained model (a random
model otherwise puts much of it on BOS, which CTranslate2 removes from its normalization and ours
keeps, so float32 beams could differ: docs/decoding-and-serving.md). Sources are sentences with at
least `--source-tokens - 1` subwords, cut to that length plus EOS, so every output has exactly
`--source-tokens + --extra-length` tokens. The Model Garden part runs in a separate venv
(`--model-garden-python`) via this same file's `--model-garden-worker` mode, which imports only
TensorFlow and `official`.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Optional

import numpy as np

# keras_transformer.config's reserved ids, repeated for the Model Garden worker (no package there).
PAD_ID, BOS_ID, EOS_ID = 0, 2, 3


def parse_args(argv=None) -> argparse.Namespace:
    # The library's rule (`data.shared_data_dir`): $KT_SHARED_DATA, else ../shared/data.
    shared = os.environ.get("KT_SHARED_DATA", os.path.join(
        os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "..", "shared", "data"))
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data", default=os.path.join(shared, "wmt14", "newstest2014.en"),
                        help="English sources (default: $KT_SHARED_DATA/wmt14/newstest2014.en)")
    parser.add_argument("--vocab-size", type=int, default=8000)
    parser.add_argument("--vocab-data", help="comma-separated files to learn the vocabulary "
                        "from (default: --data); more text reaches the paper's 32k-ish sizes")
    parser.add_argument("--source-tokens", type=int, default=16,
                        help="source length in subwords, EOS included")
    parser.add_argument("--extra-length", type=int, default=16)
    parser.add_argument("--beam-size", type=int, default=4)
    parser.add_argument("--kernels", choices=("fast", "reference"), default="fast",
                        help="the implementation our model is built under (default: fast; the "
                             "decoding step is the same under both)")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--throughput-batches", type=int, default=2)
    parser.add_argument("--latency-sentences", type=int, default=8)
    parser.add_argument("--uncached-batches", type=int, default=1)
    parser.add_argument("--inter-op-threads", type=int, default=0,
                        help="TensorFlow's inter-op threads for our exports (TF Serving's "
                             "--tensorflow_inter_op_parallelism; default 0: TensorFlow's choice)")
    parser.add_argument("--export-dtypes", default="float32",
                        help="comma-separated dtypes to export and time (float32, bfloat16); "
                             "ratios are against the first")
    parser.add_argument("--xla", action="store_true",
                        help="also time each export as an XLA export (kt-export --xla)")
    parser.add_argument("--model-garden-python", default="/work/bench-venv/bin/python",
                        help="python of a venv with tf-models-official ('' to skip)")
    parser.add_argument("--ctranslate2-python", default=sys.executable,
                        help="python with ctranslate2 and this package's dependencies "
                             "(default: this one; '' to skip)")
    parser.add_argument("--ctranslate2-types", default="float32,int8",
                        help="CTranslate2 quantizations to time (comma-separated)")
    parser.add_argument("--shortlists", nargs="*", default=[], metavar="FREQUENT,PER_SOURCE",
                        help="also time each export with a vocabulary shortlist of each of "
                             "these sizes (`kt-export --shortlist`)")
    parser.add_argument("--shortlist-data", metavar="SRC,TGT[,SRC,TGT...]",
                        help="line-aligned parallel files the shortlist is learned from")
    parser.add_argument("--profile", action="store_true",
                        help="also profile one batch and one sentence of each export: op time "
                             "by model part (XLA exports: by instruction kind), ops per step, "
                             "op time against wall time")
    parser.add_argument("--model-garden-worker", nargs=2, metavar=("IDS_NPY", "SETTINGS_JSON"),
                        help=argparse.SUPPRESS)
    parser.add_argument("--ctranslate2-worker", nargs=3,
                        metavar=("WEIGHTS_NPZ", "IDS_NPY", "SETTINGS_JSON"),
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
    piece_ids = tokenizer.tokenize(tf.constant(lines))
    long_enough = [row[:source_tokens - 1] for row in piece_ids.to_list()
                   if len(row) >= source_tokens - 1]
    if len(long_enough) < count:
        raise ValueError(f"--data: only {len(long_enough)} sentences have "
                         f"{source_tokens - 1} subwords, {count} needed")
    return np.array([row + [EOS_ID] for row in long_enough[:count]], np.int32)


def run_ours(args: argparse.Namespace, workdir: str, settings: dict) -> tuple[dict, np.ndarray]:
    import tensorflow as tf

    import keras_transformer as kt
    from keras_transformer import fast
    from keras_transformer.data import SubwordTokenizer
    from keras_transformer.decoding import beam_search
    from keras_transformer.serving.export import export_translator
    from keras_transformer.config import SearchSettings
    from trainers.export import learn_shortlist

    tf.config.threading.set_inter_op_parallelism_threads(args.inter_op_threads)
    texts = []
    for path in (args.vocab_data or args.data).split(","):
        with open(path, encoding="utf-8") as handle:
            texts += [line.strip() for line in handle if line.strip()]
    tokenizer = SubwordTokenizer.train(texts, args.vocab_size, os.path.join(workdir, "vocab"))
    fast.set_implementation(args.kernels)
    count = max(settings["batch_size"] * settings["throughput_batches"],
                settings["latency_sentences"])
    ids = source_ids(args.data, tokenizer, count, args.source_tokens)

    model = kt.Transformer(kt.TransformerConfig.preset("base", vocab_size=tokenizer.vocab_size,
                                                       dropout=0.0))
    embeddings = model.source_embedding.embeddings
    embeddings.assign(tf.tensor_scatter_nd_update(embeddings, [[PAD_ID], [BOS_ID], [EOS_ID]],
                                                  tf.zeros([3, embeddings.shape[1]])))
    search = SearchSettings(args.beam_size, length_penalty=0.6, max_decode_extra=args.extra_length)
    shortlists = {"": None}
    for sizes in args.shortlists:
        suffix = "_shortlist_" + sizes.replace(",", "_")
        shortlists[suffix] = learn_shortlist(sizes, args.shortlist_data.split(","), "",
                                             tokenizer)
        size = settings["batch_size"]
        settings["ids_per_batch" + suffix] = statistics.mean(
            int(tf.size(shortlists[suffix].target_ids(ids[start:start + size])))
            for start in range(0, size * settings["throughput_batches"], size))
    results = {}
    variants = [(dtype, suffix, False) for dtype in args.export_dtypes.split(",")
                for suffix in shortlists]
    variants += [(dtype, suffix + "_xla", True) for dtype in args.export_dtypes.split(",")
                 for suffix in shortlists if args.xla]
    for dtype, suffix, xla in variants:
        path = export_translator(model, tokenizer, dtype, os.path.join(workdir, "saved_models"),
                                 search, dtype, shortlists.get(suffix.removesuffix("_xla")),
                                 jit_compile=xla)
        translate_ids = tf.saved_model.load(path).signatures["translate_ids"]
        check = translate_ids(source_ids=tf.constant(ids[:2]))["ids"].numpy()
        assert check.shape[1] == settings["output_tokens"] and not (check == EOS_ID).any(), check
        name = ("exported" if dtype == "float32" else f"exported_{dtype}") + suffix
        results[name] = {**measure(lambda batch, run=translate_ids: run(
            source_ids=tf.constant(batch)), ids, settings), "first_ids": check.tolist()}
        if args.profile:
            for label, rows in (("profile", args.batch_size), ("profile_batch_1", 1)):
                results[name][label] = op_time_by_part(
                    lambda run=translate_ids, rows=rows: run(source_ids=tf.constant(ids[:rows])),
                    settings["output_tokens"])
    if args.uncached_batches > 0:  # 0 skips the slow recomputing reference
        uncached = dict(settings, throughput_batches=args.uncached_batches, latency_sentences=0)
        results["uncached"] = measure(
            lambda batch: beam_search(model, batch, args.beam_size, 0.6, args.extra_length,
                                      use_cache=False), ids, uncached)
    if args.ctranslate2_python:
        results.update(run_ctranslate2(args.ctranslate2_python, model, tokenizer, search, ids,
                                       settings, workdir, args.ctranslate2_types.split(","),
                                       list(shortlists.values())[-1]))
    return results, ids


# Ops whose events span the ops they run (the decoding loop, function calls): not counted.
_CONTAINERS = {"While", "StatelessWhile", "StatefulPartitionedCall", "PartitionedCall", "If",
               "StatelessIf"}


def part_of(scope: str, op_type: str) -> str:
    """The part of the model or search an op of a decoding graph belongs to, by its name scope."""
    if "encoder" in scope:
        return "encoder (once per batch)"
    for layer, part in (("self_attention", "decoder self-attention"),
                        ("cross_attention", "decoder cross-attention"),
                        ("feed_forward", "decoder feed-forward"), ("norm", "layer norms")):
        if layer in scope:
            return part + (" (cache gathers)" if op_type == "GatherV2" and layer ==
                           "self_attention" else "")
    if "MatMul" in op_type:
        return "output projection (logits)"
    if op_type in ("LogSoftmax", "TopKV2"):
        return f"search: {op_type}"
    return f"search: {op_type}" if op_type in ("GatherV2", "SelectV2") else "search: other"


def xla_kind(instruction: str) -> str:
    """An XLA instruction's name without its numbering (`MatMul_1.127` -> `MatMul`)."""
    return re.sub(r"(_\d+)?(\.\d+)?$", "", instruction)


def xla_part_of(instruction: str) -> str:
    """The kind of an XLA-compiled search's instruction (a thunk named after it, e.g.
    `MatMul_1.127`, `gather_bitcast_fusion.12`): XLA's names keep the TensorFlow op's name
    but not its scope, so kinds, not model parts."""
    kind = xla_kind(instruction)
    if kind in ("MatMul", "dot", "Einsum", "BatchMatMulV2"):
        return "products (weights and attention)"
    if "gather" in kind:
        return "gathers (cache history, rows)"
    if kind in ("TopKV2", "custom-call", "sort"):
        return "top-k"
    if "copy" in kind:
        return "copies"
    return "other fused element-wise ops and reductions"


def _profiled_op(line_name: str, event_name: str) -> Optional[tuple[str, str]]:
    """`(part, op type)` of one event of a profile, None for what is not an op's own time.
    A graph's ops run on the `tf_Compute` lines, named `scope/op:OpType`; an XLA-compiled
    function's thunks on the intra-op threads' lines, named after their HLO instruction, next
    to the thunk executor's and the thread pool's own events."""
    if line_name.startswith("tf_Compute"):
        if ":" not in event_name or "::" in event_name:  # the executor's "ExecutorState::.."
            return None
        scope, op_type = event_name.rsplit(":", 1)
        return None if op_type in _CONTAINERS else (part_of(scope, op_type), op_type)
    if "Eigen" in line_name and "::" not in event_name and not event_name.startswith("end:"):
        return xla_part_of(event_name), xla_kind(event_name)
    return None


def op_time_by_part(call, steps: int) -> dict:
    """Where the time of `call()` (run once before, untimed) goes under the TF profiler: shares
    of the op time by `part_of` (graph ops) or `xla_part_of` (XLA thunks) and of the 8 costliest
    op types (summed over the compute threads, so shares, not wall-clock), ops run per decoding
    step (`steps` of them), and op time against the call's wall time (what is left is the
    executor's own scheduling and the loop's)."""
    import collections
    import glob

    import tensorflow as tf
    from tensorflow.tsl.profiler.protobuf import xplane_pb2

    call()
    with tempfile.TemporaryDirectory() as logdir:
        tf.profiler.experimental.start(logdir)
        start = time.perf_counter()
        call()
        wall = time.perf_counter() - start
        tf.profiler.experimental.stop()
        space = xplane_pb2.XSpace()
        with open(glob.glob(f"{logdir}/**/*.xplane.pb", recursive=True)[0], "rb") as handle:
            space.ParseFromString(handle.read())
    picoseconds, by_type, events = collections.Counter(), collections.Counter(), 0
    for plane in space.planes:
        for line in plane.lines:
            for event in line.events:
                op = _profiled_op(line.name, plane.event_metadata[event.metadata_id].name)
                if op is not None:
                    picoseconds[op[0]] += event.duration_ps
                    by_type[op[1]] += event.duration_ps
                    events += 1
    total = sum(picoseconds.values())
    return {"shares": {part: round(100 * value / total, 1)
                       for part, value in picoseconds.most_common()},
            "op_types": {op_type: round(100 * value / total, 1)
                         for op_type, value in by_type.most_common(8)},
            "ops_per_step": round(events / steps), "op_seconds": total * 1e-12,
            "wall_seconds_profiled": wall}


def ctranslate2_worker(directories_json: str, ids_path: str, settings_json: str) -> None:
    """Runs where ctranslate2 and this package are installed: for each model directory (one
    per quantization, written by `keras_transformer.serving.ctranslate2_export`), prints its
    `measure` result and the first sentences' ids as JSON, searched by the library's
    `CTranslate2Search` (the export's search settings, our rules for PAD, BOS and EOS)."""
    import tensorflow as tf

    from keras_transformer.serving.ctranslate2_export import CTranslate2Search

    settings, ids = json.loads(settings_json), np.load(ids_path)
    results = {}
    for quantization, directory in json.loads(directories_json).items():
        for use_vmap in [False, True] if settings.get("vmap") else [False]:
            if use_vmap:
                shutil.copy(settings["vmap"], os.path.join(directory, "vmap.txt"))
            translate_ids = CTranslate2Search(directory, use_vmap=use_vmap).translate_ids

            def translate(batch, translate_ids=translate_ids):
                return translate_ids(tf.constant(batch))["nbest_ids"][:, 0]

            name = f"ctranslate2_{quantization}" + ("_vmap" if use_vmap else "")
            results[name] = {**measure(translate, ids, settings),
                             "first_ids": translate(ids[:2]).numpy().tolist()}
    print(json.dumps(results))


def run_ctranslate2(python: str, model, tokenizer, search, ids: np.ndarray, settings: dict,
                    workdir: str, types: list[str], shortlist=None) -> dict:
    """CTranslate2 timings from `ctranslate2_worker` run by `python`, of our model converted by
    `kt-export --format ctranslate2`'s converter once per quantization in `types`, with our
    export's `search` settings; with our `shortlist` (the last of `--shortlists`), also with the
    same table as its vocabulary map (`use_vmap`)."""
    from keras_transformer.serving.ctranslate2_export import export_ctranslate2

    directories = {kind: os.fspath(export_ctranslate2(
        model, tokenizer, os.path.join(workdir, f"ct2_{kind}"), kind, search)) for kind in types}
    ids_path = os.path.join(workdir, "ids.npy")
    np.save(ids_path, ids)
    worker = dict(settings)
    if shortlist is not None:
        worker["vmap"] = os.path.join(workdir, "vmap.txt")
        write_vmap(shortlist, tokenizer, worker["vmap"])
    env = dict(os.environ, PYTHONPATH=os.path.dirname(os.path.dirname(os.path.abspath(
        __file__))))  # this package, for the library's search
    run = subprocess.run([python, os.path.abspath(__file__), "--ctranslate2-worker",
                          json.dumps(directories), ids_path, json.dumps(worker)],
                         capture_output=True, text=True, env=env, cwd=workdir, check=False)
    if run.returncode != 0:
        raise RuntimeError(f"CTranslate2 worker failed:\n{run.stderr[-3000:]}")
    return json.loads(run.stdout.strip().splitlines()[-1])


def write_vmap(shortlist, tokenizer, path: str) -> None:
    """Our shortlist as a CTranslate2 vocabulary map over the tokenizer's pieces: the frequent
    ids under the empty n-gram, then each source id's candidates (PAD fill dropped)."""
    pieces = tokenizer.id_to_piece(list(range(tokenizer.vocab_size)))

    def tokens(ids) -> str:
        return " ".join(pieces[token] for token in ids if token > EOS_ID)

    with open(path, "w", encoding="utf-8") as handle:
        handle.write(f"\t{tokens(shortlist.frequent_ids.numpy())}\n")
        for source, candidates in enumerate(shortlist.candidates.numpy()):
            if source > EOS_ID and candidates.any():
                handle.write(f"{pieces[source]}\t{tokens(candidates)}\n")


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


def ids_check(name: str, result: dict, reference: str, reference_result: dict) -> str:
    """Whether a row's first ids equal the reference export's, and whether they should: rows
    of other weights (quantized, bfloat16) or candidates (shortlists, vocabulary maps) compute
    another function and may differ; the rest, float32 CTranslate2 included, must not."""
    if result["first_ids"] == reference_result["first_ids"]:
        return f"equal {reference}'s"
    if any(part in name for part in ("int8", "int16", "float16", "shortlist", "vmap")):
        return f"differ from {reference}'s (another function: may differ)"
    return f"DIFFER from {reference}'s (the same function: should equal)"


def main(argv=None) -> None:
    args = parse_args(argv)
    if args.model_garden_worker:
        model_garden_worker(*args.model_garden_worker)
        return
    if args.ctranslate2_worker:
        ctranslate2_worker(*args.ctranslate2_worker)
        return
    settings = {"batch_size": args.batch_size, "throughput_batches": args.throughput_batches,
                "latency_sentences": args.latency_sentences, "beam_size": args.beam_size,
                "extra_length": args.extra_length, "vocab_size": args.vocab_size,
                "output_tokens": args.source_tokens + args.extra_length,
                "inter_op_threads": args.inter_op_threads}
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
        same = ("" if "first_ids" not in result else
                "; first sentences' ids " + ids_check(name, result, first, results[first]))
        print(f"{name:>20}: {result['tokens_per_second']:8.1f} target tokens/s at batch "
              f"{args.batch_size}, x{exported / result['tokens_per_second']:.2f} for {first}"
              + (f"; batch-1 latency {latency:.3f} s" if latency else "") + same)


if __name__ == "__main__":
    main()
