"""An imported OPUS-MT-sized model: our SavedModel exports (graph and XLA) against CTranslate2's
own conversion of the same Marian folder (float32), beam 4, one sentence at a time and batches
of 32; with `--dtypes float32 bfloat16`, our exports in bfloat16 too, and with
`--ctranslate2-types float32 int8 ...`, CTranslate2 in each compute type its build offers on
this CPU (the ratios are to its float32), and the rate at which one sentence's steps stream the
decoder's weights (float32 bytes for CTranslate2 float32); with `--profile`, where each export's
time goes at batch 1 and batch 32 (`decoding_speed.op_time_by_part`, the TF profiler).

    python benchmarks/imported_speed.py [--sentences 64] [--threads 2] [--dtypes float32 ...]
        [--ctranslate2-types float32 ...] [--profile] [--workdir DIR]

The folder is a random Marian model of OPUS-MT's size (`tests/marian_models.py`: 6 + 6 layers,
d_model 512, FFN 2048, 8 heads, swish, a joint vocabulary of about 58,000 pieces), imported by
`kt-import`'s reader and exported by `kt-export`'s code; CTranslate2 converts the folder itself
(`OpusMTConverter`). The output bias of `</s>` is set to -1e4 in the folder: no hypothesis ends,
so both run every sentence to the same length limit (`--source-tokens` + `--extra-length`) and do
the same work. Our exports are timed through their `translate_ids` signature (ids in, ids out),
CTranslate2 through `translate_batch` on the same sentences' pieces: neither tokenizes. Prints
one JSON line: per system, milliseconds per sentence at batch 1 (median over sentences) and
sentences per second at batch 32, and the ratios to CTranslate2's.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
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
    parser.add_argument("--workdir", help="default: a temporary directory")
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


def ours(folder: Path, workdir: Path, pieces: list[list[str]], args) -> dict:
    import tensorflow as tf

    from keras_transformer.config import SearchSettings
    from keras_transformer.data.sentencepiece_pair import SentencePiecePair
    from keras_transformer.importing.marian import read_marian_folder
    from keras_transformer.importing.run_directory import imported_transformer
    from keras_transformer.serving.export import export_translator
    from keras_transformer.vocab_ids import EOS_ID

    tf.config.threading.set_intra_op_parallelism_threads(args.threads)
    imported = read_marian_folder(folder)
    model = imported_transformer(imported)
    tokenizer = SentencePiecePair(imported.source_spm, imported.target_spm,
                                  imported.source_pieces, imported.target_pieces)
    index = {piece: number for number, piece in enumerate(imported.source_pieces)}
    ids = np.array([[index[piece] for piece in row] + [EOS_ID] for row in pieces], np.int32)
    settings = SearchSettings(beam_size=4, length_penalty=0.6,
                              max_decode_extra=args.extra_length)
    results = {}
    for dtype in args.dtypes:
        for kind, jit_compile in (("graph", False), ("xla", True)):
            name = f"savedmodel_{kind}" + ("" if dtype == "float32" else f"_{dtype}")
            path = export_translator(model, tokenizer, name, workdir / "exports", settings,
                                     dtype=dtype, jit_compile=jit_compile)
            translate = tf.saved_model.load(path).signatures["translate_ids"]
            results[name] = timings(lambda batch: translate(source_ids=tf.constant(batch))[
                "nbest_ids"].numpy()[:, 0], ids)
            results[name]["step_weight_bytes"] = decoder_weight_bytes(
                model, 4 if dtype == "float32" else 2)
            if args.profile:
                results[name].update(profiles(translate, ids, args))
    return results


def decoder_weight_bytes(model, itemsize: int) -> int:
    """Bytes of the weights one decoding step reads: the decoder layers' and the output
    projection's (the target embedding when tied), each once; the encoder runs once per
    sentence."""
    layers = [*model.decoder_layers, model.output_projection or model.target_embedding]
    return itemsize * sum(int(np.prod(weight.shape)) for layer in layers
                          for weight in layer.weights)


def profiles(translate, ids: np.ndarray, args) -> dict:
    """`op_time_by_part` of one sentence and of a batch of 32."""
    import tensorflow as tf

    sys.path.insert(0, str(ROOT / "benchmarks"))
    from decoding_speed import op_time_by_part

    return {label: op_time_by_part(lambda rows=rows: translate(source_ids=tf.constant(ids[:rows])),
                                   args.source_tokens + args.extra_length)
            for label, rows in (("profile_batch_1", 1), ("profile_batch_32", 32))}


def theirs(folder: Path, workdir: Path, pieces: list[list[str]], args) -> dict:
    import ctranslate2
    from ctranslate2.converters import OpusMTConverter

    converted = OpusMTConverter(str(folder)).convert(str(workdir / "ct2"), force=True)
    limit = args.source_tokens + args.extra_length
    supported = ctranslate2.get_supported_compute_types("cpu")
    results = {}
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

        results[f"ctranslate2_{compute_type}"] = timings(translate, pieces)
    return results


def timings(translate, inputs) -> dict:
    """Milliseconds per sentence one at a time (median, after one warm-up) and sentences per
    second in batches of 32, with the output length seen."""
    lengths = {len(row) for row in translate(inputs[:2])}
    single = []
    for number in range(len(inputs)):
        started = time.perf_counter()
        translate(inputs[number:number + 1])
        single.append(time.perf_counter() - started)
    translate(inputs[:32])
    started = time.perf_counter()
    for start in range(0, len(inputs), 32):
        translate(inputs[start:start + 32])
    batched = time.perf_counter() - started
    return {"batch1_ms_per_sentence": 1000 * statistics.median(single),
            "batch32_sentences_per_second": len(inputs) / batched,
            "output_lengths": sorted(lengths)}


def main(argv=None) -> None:
    args = parse_args(argv)
    workdir = Path(args.workdir or tempfile.mkdtemp(prefix="imported_speed-"))
    folder = opus_mt_folder(workdir, args.spm_vocab_size)
    pieces = sources(folder, args.sentences, args.source_tokens)
    results = {**theirs(folder, workdir, pieces, args), **ours(folder, workdir, pieces, args)}
    reference = results["ctranslate2_float32"]
    reference["step_weight_bytes"] = results["savedmodel_graph"]["step_weight_bytes"]
    steps = args.source_tokens + args.extra_length
    for name, result in results.items():
        if "step_weight_bytes" in result:
            result["batch1_weight_gb_per_second"] = (
                result["step_weight_bytes"] * steps / result["batch1_ms_per_sentence"] / 1e6)
        result["batch1_latency_vs_ctranslate2"] = (result["batch1_ms_per_sentence"]
                                                   / reference["batch1_ms_per_sentence"])
        result["batch32_throughput_vs_ctranslate2"] = (
            result["batch32_sentences_per_second"] / reference["batch32_sentences_per_second"])
    print(json.dumps({"sentences": len(pieces), "threads": args.threads, **results}))


if __name__ == "__main__":
    main()
