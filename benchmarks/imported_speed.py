"""An imported OPUS-MT-sized model: our SavedModel exports (graph and XLA) against CTranslate2's
own conversion of the same Marian folder (float32), beam 4, one sentence at a time and batches
of 32; with `--dtypes float32 bfloat16`, our exports in bfloat16 too, and with
`--ctranslate2-types float32 int8 ...`, CTranslate2 in each compute type its build offers on
this CPU (the ratios are to its float32), and the rate at which one sentence's steps stream the
decoder's weights (float32 bytes for CTranslate2 float32); with `--profile`, where each export's
time goes at batch 1 and batch 32 (`decoding_speed.op_time_by_part`, the TF profiler); with
`--other-tree`, the same exports made by another checkout's code (e.g. the one before a change)
timed beside these.

    python benchmarks/imported_speed.py [--sentences 64] [--rounds 5] [--threads 2]
        [--dtypes float32 ...] [--ctranslate2-types float32 ...] [--profile]
        [--other-tree DIR] [--workdir DIR]

The folder is a random Marian model of OPUS-MT's size (`tests/marian_models.py`: 6 + 6 layers,
d_model 512, FFN 2048, 8 heads, swish, a joint vocabulary of about 58,000 pieces), imported by
`kt-import`'s reader and exported by `kt-export`'s code; CTranslate2 converts the folder itself
(`OpusMTConverter`). The output bias of `</s>` is set to -1e4 in the folder: no hypothesis ends,
so both run every sentence to the same length limit (`--source-tokens` + `--extra-length`) and do
the same work. Our exports are timed through their `translate_ids` signature (ids in, ids out),
CTranslate2 through `translate_batch` on the same sentences' pieces: neither tokenizes. Every
system is loaded in one process and they take turns, sentence by sentence at batch 1 and pass by
pass over the sentences at batch 32, so that the host's drift (shared cores, memory bandwidth)
reaches all alike. Prints one JSON line: per system, milliseconds per sentence at batch 1 (median
over sentences) and sentences per second at batch 32 (median over passes), and the ratios to
CTranslate2's.
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
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sentences", type=int, default=64, help="sentences timed")
    parser.add_argument("--source-tokens", type=int, default=16,
                        help="source length in pieces, EOS included")
    parser.add_argument("--extra-length", type=int, default=16)
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--spm-vocab-size", type=int, default=32000,
                        help="pieces of each SentencePiece model (their union: the vocabulary)")
    parser.add_argument("--dtypes", nargs="+", default=["float32"],
                        choices=["float32", "bfloat16"],
                        help="the exports' weights and computation, each timed")
    parser.add_argument("--ctranslate2-types", nargs="+", default=["float32"],
                        help="CTranslate2's compute types timed (float32 always)")
    parser.add_argument("--profile", action="store_true",
                        help="also profile one sentence and one batch of 32 of each export")
    parser.add_argument("--rounds", type=int, default=5,
                        help="passes over the sentences in batches of 32, per system")
    parser.add_argument("--other-tree",
                        help="another checkout (e.g. `git worktree add /tmp/before`) whose exports "
                        "are timed too, in turn with the others (names ending `_other`)")
    parser.add_argument("--workdir", help="default: a temporary directory")
    parser.add_argument("--export-worker", metavar="SETTINGS_JSON", help=argparse.SUPPRESS)
    return parser.parse_args(argv)


def opus_mt_folder(workdir: Path, spm_vocab_size: int) -> Path:
    """A random Marian folder of OPUS-MT's size whose `</s>` is never the best token."""
    sys.path.insert(0, str(ROOT / "tests"))
    from marian_models import MarianVariant, write_marian_model

    folder = write_marian_model(workdir / "marian", MarianVariant(
        enc_depth=6, dec_depth=6, dim_emb=512, heads=8, dim_ffn=2048, activation="swish",
        spm_vocab_size=spm_vocab_size))
    arrays = dict(np.load(folder / "model.npz"))
    arrays["decoder_ff_logit_out_b"][0, 0] = -1e4  # `</s>`, Marian's id 0
    np.savez(folder / "model.npz", **arrays)
    return folder


def sources(folder: Path, count: int, length: int) -> list[list[str]]:
    """`count` sentences of `length - 1` source pieces each (their EOS makes `length`)."""
    import sentencepiece

    from marian_models import random_word_sentences

    processor = sentencepiece.SentencePieceProcessor(model_file=str(folder / "source.spm"))
    texts = random_word_sentences(4 * count, seed=1)[0]
    pieces = [processor.encode(text, out_type=str)[:length - 1] for text in texts]
    return [row for row in pieces if len(row) == length - 1][:count]


def export_ours(folder: Path, export_dir: Path, dtypes: list[str], extra_length: int) -> dict:
    """Our graph and XLA SavedModels of the imported folder in each of `dtypes`, by this
    process's `keras_transformer` (with `--other-tree`, the other checkout's): name -> path.
    Only APIs every checkout since the import has."""
    from keras_transformer.config import SearchSettings
    from keras_transformer.data.sentencepiece_pair import SentencePiecePair
    from keras_transformer.importing.marian import read_marian_folder
    from keras_transformer.importing.run_directory import imported_transformer
    from keras_transformer.serving.export import export_translator

    imported = read_marian_folder(folder)
    model = imported_transformer(imported)
    tokenizer = SentencePiecePair(imported.source_spm, imported.target_spm,
                                  imported.source_pieces, imported.target_pieces)
    settings = SearchSettings(beam_size=4, length_penalty=0.6, max_decode_extra=extra_length)
    paths = {}
    for dtype in dtypes:
        for kind, jit_compile in (("graph", False), ("xla", True)):
            name = f"savedmodel_{kind}" + ("" if dtype == "float32" else f"_{dtype}")
            paths[name] = str(export_translator(model, tokenizer, name, export_dir, settings,
                                                dtype=dtype, jit_compile=jit_compile))
    return paths


def other_exports(folder: Path, workdir: Path, args) -> dict:
    """`export_ours` run by the checkout `args.other_tree` (its `keras_transformer` first on
    the path), its names suffixed `_other`."""
    tree = str(Path(args.other_tree).resolve())
    settings = {"folder": str(folder.resolve()),
                "export_dir": str((workdir / "other_exports").resolve()),
                "dtypes": args.dtypes, "extra_length": args.extra_length}
    path = os.pathsep.join([tree, *filter(None, [os.environ.get("PYTHONPATH")])])
    completed = subprocess.run(
        [sys.executable, str(Path(__file__).resolve()), "--export-worker", json.dumps(settings)],
        cwd=tree, env={**os.environ, "PYTHONPATH": path}, capture_output=True, text=True,
        check=False)
    if completed.returncode:
        raise RuntimeError(completed.stderr[-3000:])
    paths = json.loads(completed.stdout.strip().splitlines()[-1])
    return {f"{name}_other": path for name, path in paths.items()}


def ours(folder: Path, workdir: Path, pieces: list[list[str]], args) -> dict:
    """Each of our exports (this checkout's, and the other's with `--other-tree`) as a
    function of a batch of source pieces, with the bytes of weights its decoding step reads."""
    import tensorflow as tf

    from keras_transformer.importing.marian import read_marian_folder
    from keras_transformer.importing.run_directory import imported_transformer
    from keras_transformer.config import EOS_ID

    tf.config.threading.set_intra_op_parallelism_threads(args.threads)
    paths = export_ours(folder, workdir / "exports", args.dtypes, args.extra_length)
    if args.other_tree:
        paths.update(other_exports(folder, workdir, args))
    imported = read_marian_folder(folder)
    model = imported_transformer(imported)
    index = {piece: number for number, piece in enumerate(imported.source_pieces)}

    def ids_of(batch: list[list[str]]) -> np.ndarray:
        return np.array([[index[piece] for piece in row] + [EOS_ID] for row in batch], np.int32)

    systems = {}
    for name, path in paths.items():
        signature = tf.saved_model.load(path).signatures["translate_ids"]

        def translate(batch, signature=signature):
            return signature(source_ids=tf.constant(ids_of(batch)))["nbest_ids"].numpy()[:, 0]

        itemsize = 2 if "bfloat16" in name else 4
        systems[name] = {"translate": translate, "signature": signature,
                         "profile_ids": ids_of(pieces[:32]),
                         "step_weight_bytes": decoder_weight_bytes(model, itemsize)}
    return systems


def decoder_weight_bytes(model, itemsize: int) -> int:
    """Bytes of the weights one decoding step reads: the decoder layers' and the output
    projection's (the target embedding when tied), each once; the encoder runs once per
    sentence."""
    layers = [*model.decoder_layers, model.output_projection or model.target_embedding]
    return itemsize * sum(int(np.prod(weight.shape)) for layer in layers
                          for weight in layer.weights)


def profiles(signature, ids: np.ndarray, args) -> dict:
    """`op_time_by_part` of one sentence and of a batch of 32."""
    import tensorflow as tf

    sys.path.insert(0, str(ROOT / "benchmarks"))
    from decoding_speed import op_time_by_part

    return {label: op_time_by_part(lambda rows=rows: signature(source_ids=tf.constant(ids[:rows])),
                                   args.source_tokens + args.extra_length)
            for label, rows in (("profile_batch_1", 1), ("profile_batch_32", 32))}


def theirs(folder: Path, workdir: Path, args) -> dict:
    """CTranslate2's conversion of the folder in each compute type offered, as functions of
    a batch of source pieces."""
    import ctranslate2
    from ctranslate2.converters import OpusMTConverter

    converted = OpusMTConverter(str(folder)).convert(str(workdir / "ct2"), force=True)
    limit = args.source_tokens + args.extra_length
    supported = ctranslate2.get_supported_compute_types("cpu")
    systems = {}
    for compute_type in dict.fromkeys(["float32", *args.ctranslate2_types]):
        if compute_type not in supported:
            print(f"CTranslate2 {ctranslate2.__version__} does not compute in {compute_type} "
                  f"on this CPU (it offers {', '.join(sorted(supported))})", file=sys.stderr)
            continue
        translator = ctranslate2.Translator(converted, device="cpu",
                                            compute_type=compute_type,
                                            intra_threads=args.threads)

        def translate(batch, translator=translator):
            outputs = translator.translate_batch(batch, beam_size=4, max_decoding_length=limit,
                                                 length_penalty=0.6)
            return [output.hypotheses[0] for output in outputs]

        systems[f"ctranslate2_{compute_type}"] = {"translate": translate}
    return systems


def interleaved_timings(systems: dict, inputs: list, rounds: int) -> dict:
    """Per system: milliseconds per sentence one at a time (median over `inputs`) and sentences
    per second in batches of 32 (median over `rounds` passes over `inputs`), with the output
    lengths seen. The systems take turns, sentence by sentence and pass by pass, each turn
    starting with the next system, so that a host's drift reaches them alike."""
    names = list(systems)
    results = {}
    for name in names:  # warm-up: the first calls trace, compile and allocate
        translate = systems[name]["translate"]
        results[name] = {"output_lengths": sorted({len(row) for row in translate(inputs[:2])})}
        translate(inputs[:32])
    single = {name: [] for name in names}
    rates = {name: [] for name in names}
    for turn in range(max(len(inputs), rounds)):
        order = names[turn % len(names):] + names[:turn % len(names)]
        for name in order:
            translate = systems[name]["translate"]
            if turn < len(inputs):
                started = time.perf_counter()
                translate(inputs[turn:turn + 1])
                single[name].append(time.perf_counter() - started)
            if turn < rounds:
                started = time.perf_counter()
                for start in range(0, len(inputs), 32):
                    translate(inputs[start:start + 32])
                rates[name].append(len(inputs) / (time.perf_counter() - started))
    for name in names:
        results[name].update(batch1_ms_per_sentence=1000 * statistics.median(single[name]),
                             batch32_sentences_per_second=statistics.median(rates[name]))
    return results


def main(argv=None) -> None:
    args = parse_args(argv)
    if args.export_worker:
        settings = json.loads(args.export_worker)
        print(json.dumps(export_ours(Path(settings["folder"]), Path(settings["export_dir"]),
                                     settings["dtypes"], settings["extra_length"])))
        return
    workdir = Path(args.workdir or tempfile.mkdtemp(prefix="imported_speed-"))
    folder = opus_mt_folder(workdir, args.spm_vocab_size)
    pieces = sources(folder, args.sentences, args.source_tokens)
    systems = {**theirs(folder, workdir, args), **ours(folder, workdir, pieces, args)}
    results = interleaved_timings(systems, pieces, args.rounds)
    if args.profile:
        for name, system in systems.items():
            if "signature" in system:
                results[name].update(profiles(system["signature"], system["profile_ids"], args))
    steps = args.source_tokens + args.extra_length
    reference = results["ctranslate2_float32"]
    for name, result in results.items():
        weight_bytes = systems[name].get("step_weight_bytes",
                                         systems["savedmodel_graph"]["step_weight_bytes"])
        if name.startswith("savedmodel") or name == "ctranslate2_float32":
            result["batch1_weight_gb_per_second"] = (
                weight_bytes * steps / result["batch1_ms_per_sentence"] / 1e6)
        result["batch1_latency_vs_ctranslate2"] = (result["batch1_ms_per_sentence"]
                                                   / reference["batch1_ms_per_sentence"])
        result["batch32_throughput_vs_ctranslate2"] = (
            result["batch32_sentences_per_second"] / reference["batch32_sentences_per_second"])
    print(json.dumps({"sentences": len(pieces), "threads": args.threads, **results}))


if __name__ == "__main__":
    main()
