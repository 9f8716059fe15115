"""A random model of NLLB-200-distilled-600M's shape (12 + 12 layers, d_model 1024, FFN 4096, 16
heads, a vocabulary of 256,206 ids) imported by `kt-import`: the import's peak memory against the
model's float32 size, then our SavedModel exports (XLA, and XLA with a vocabulary shortlist) against
CTranslate2 float32 and int8 of the same import (`kt-export --format ctranslate2`'s code, which
converts as CTranslate2's own transformers converter does: tests and benchmarks/m2m_100_parity.py)
and the batched LiteRT int8 export (`kt-export --format litert --quantization int8`'s code; its
conversion's time, its size on disk and its load time printed, or why it could not be written),
beam 4, one sentence at a time and in one batch of `--sentences` (16); and where one decoding step's
time goes (`decoding_speed.op_time_by_part`: the output projection's share) with and without the
shortlist; then each system's memory: the peak resident set of a process of its own that loads it
and translates the batch once (`--memory-of NAME` is that process).

    python benchmarks/nllb_speed.py [--sentences 16] [--rounds 2] [--threads 2]
        [--workdir DIR]

The folder is `tests/m2m_100_models.py`'s NLLB layout at that shape (its SentencePiece model is
tiny: the rows past its pieces name no token, the vocabulary's size and the output projection
are the released model's). Every sentence is `--source-tokens` pieces (the source language's
code, pieces, `</s>`) translated into fra_Latn (its code forced first), up to `--extra-length`
tokens past the source (random weights rarely end a sentence early: the output lengths are
printed). Systems take turns (`imported_speed.interleaved_timings`). Prints one JSON line.
"""
from __future__ import annotations

import argparse
import gc
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
SHAPE = dict(style="nllb", encoder_layers=12, decoder_layers=12, d_model=1024, heads=16,
             ffn_dim=4096, max_positions=1024, vocab_size=256_206)
SOURCE, TARGET = "eng_Latn", "fra_Latn"
SYSTEMS = ("savedmodel_xla", "savedmodel_xla_shortlist", "ctranslate2_float32",
           "ctranslate2_int8", "litert_int8")


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sentences", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=2, help="passes over the sentences in "
                        "one batch (of all of them, at most 32)")
    parser.add_argument("--source-tokens", type=int, default=12)
    parser.add_argument("--extra-length", type=int, default=12)
    parser.add_argument("--shortlist-size", type=int, default=2048,
                        help="frequent ids of the shortlist (plus 16 candidates per source id)")
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--workdir", help="default: a temporary directory")
    parser.add_argument("--memory-of", choices=SYSTEMS,
                        help="only load this system (its exports written) and translate the "
                        "batch once; print the process's peak resident set")
    return parser.parse_args(argv)


def imported_run(workdir: Path) -> tuple[Path, dict]:
    """The folder written and imported by a `kt-import` process: the run, and the import's
    peak resident memory against the weights' float32 bytes."""
    sys.path.insert(0, str(ROOT / "tests"))
    from m2m_100_models import write_m2m_100_folder

    folder = workdir / "hf"
    if not (folder / "model.safetensors").is_file():
        write_m2m_100_folder(folder, **SHAPE)
    run = workdir / "run"
    if not run.exists():
        subprocess.run([sys.executable, "-m", "trainers", "import_model", str(folder),
                        "--output-dir", str(run)], check=True, cwd=ROOT)
    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024
    float32 = (folder / "model.safetensors").stat().st_size
    return run, {"import_peak_rss_gb": round(peak / 1e9, 2),
                 "weights_float32_gb": round(float32 / 1e9, 2),
                 "import_peak_vs_float32": round(peak / float32, 2)}


def systems(run: Path, workdir: Path, args, names: tuple[str, ...] = SYSTEMS
            ) -> tuple[dict, dict, dict]:
    """Each export of `names` as a function of a batch of source ids (without language
    tokens), the step profiles of the XLA exports at batch 1 (when all are asked for), and the
    LiteRT export's conversion seconds, size and load seconds (or why it could not be
    written); the run's model is loaded only to write an export that is missing."""
    import ctranslate2
    import tensorflow as tf

    sys.path.insert(0, str(ROOT / "benchmarks"))
    from decoding_speed import op_time_by_part

    from keras_transformer.config import SearchSettings
    from keras_transformer.data.sentencepiece_pair import load_tokenizer
    from keras_transformer.decoding.shortlist import VocabularyShortlist
    from keras_transformer.serving.ctranslate2_export import export_ctranslate2
    from keras_transformer.serving.export import export_translator
    from keras_transformer.serving.litert_export import (LITERT_FILE, export_litert,
                                                         litert_functions)
    from keras_transformer.training.run_dir import RunDir
    from trainers.common import load_run_model

    tf.config.threading.set_intra_op_parallelism_threads(args.threads)
    languages = RunDir(run).languages()
    pieces = load_tokenizer(run / "vocab")._source_pieces
    settings = SearchSettings(beam_size=4, length_penalty=0.6,
                              max_decode_extra=args.extra_length)
    exports = ("savedmodel_xla", "savedmodel_xla_shortlist")
    missing = [name for name in exports if not (workdir / "exports" / name / "1").exists()] + [
        quantization for quantization in ("float32", "int8")
        if not (workdir / "exports" / f"ct2_{quantization}").exists()] + [
        name for name in ("litert_int8",) if name in names
        and not (workdir / "exports" / name).exists()
        and not (workdir / "exports" / f"{name}.failed").exists()]
    facts = {}
    if missing:
        model, tokenizer = load_run_model(str(run))
        size = model.config.vocab_size
        rng = np.random.default_rng(0)
        shortlist = VocabularyShortlist(
            np.arange(4, 4 + args.shortlist_size),
            rng.integers(4, size, (size, 16)), target_vocab_size=size)
        options = {"savedmodel_xla": {"jit_compile": True},
                   "savedmodel_xla_shortlist": {"jit_compile": True, "shortlist": shortlist}}
        for name in exports:
            if name in missing:
                export_translator(model, tokenizer, name, workdir / "exports", settings,
                                  languages=languages, warmup_max_width=16, **options[name])
        for quantization in ("float32", "int8"):
            if quantization in missing:
                export_ctranslate2(model, tokenizer, workdir / "exports" / f"ct2_{quantization}",
                                   quantization, settings, languages)
        if "litert_int8" in missing:
            started = time.perf_counter()
            try:
                export_litert(model, tokenizer, workdir / "exports" / "litert_int8", settings,
                              "int8", languages)
                facts["litert_int8_conversion_seconds"] = round(time.perf_counter() - started)
            except Exception as error:  # what does not fit, said in the results
                (workdir / "exports" / "litert_int8.failed").write_text(
                    f"{type(error).__name__}: {error}"[:2000])
        del model  # every system loads its own copy: one more would not fit beside them
        gc.collect()
    found, profiled = {}, {}
    for name in [name for name in exports if name in names]:
        signature = tf.saved_model.load(
            str(workdir / "exports" / name / "1")).signatures["translate_ids"]

        def translate(batch, signature=signature):
            rows = len(batch)
            return signature(source_ids=tf.constant(batch, tf.int32),
                             target_language=tf.fill([rows], TARGET),
                             source_language=tf.fill([rows], SOURCE))["nbest_ids"].numpy()[:, 0]

        found[name] = {"translate": translate}
        if names == SYSTEMS:
            profiled[name] = op_time_by_part(
                lambda translate=translate: translate(sentence_ids(args)[:1]),
                args.source_tokens + args.extra_length)
    source_code, target_code = (pieces[languages.token_ids[code]] for code in (SOURCE, TARGET))
    limit = args.source_tokens + args.extra_length
    for quantization in [quantization for quantization in ("float32", "int8")
                         if f"ctranslate2_{quantization}" in names]:
        directory = workdir / "exports" / f"ct2_{quantization}"
        translator = ctranslate2.Translator(str(directory), device="cpu",
                                            compute_type=quantization,
                                            intra_threads=args.threads)

        def translate(batch, translator=translator):
            outputs = translator.translate_batch(
                [[source_code, *(pieces[index] for index in row)] for row in batch],
                target_prefix=[[target_code]] * len(batch), beam_size=4,
                max_decoding_length=limit, length_penalty=0.6)
            return [output.hypotheses[0][1:] for output in outputs]

        found[f"ctranslate2_{quantization}"] = {"translate": translate}
    lite = workdir / "exports" / "litert_int8"
    if "litert_int8" in names and (lite / LITERT_FILE).is_file():
        started = time.perf_counter()
        _, translate_ids, _, _, _ = litert_functions(lite, args.threads, TARGET, SOURCE)
        facts["litert_int8_load_seconds"] = round(time.perf_counter() - started, 2)
        facts["litert_int8_size_gb"] = round(sum(
            path.stat().st_size for path in lite.rglob("*") if path.is_file()) / 1e9, 3)

        def translate(batch, translate_ids=translate_ids):
            return translate_ids(tf.ragged.constant(batch).to_tensor())["ids"].numpy()

        found["litert_int8"] = {"translate": translate}
    elif (workdir / "exports" / "litert_int8.failed").is_file():
        facts["litert_int8_failed"] = (workdir / "exports" / "litert_int8.failed").read_text()
    return found, profiled, facts


def sentence_ids(args) -> list[list[int]]:
    """`--sentences` rows of random piece ids: with the language code and EOS,
    `--source-tokens` each."""
    rng = np.random.default_rng(1)
    return rng.integers(4, 200, (args.sentences, args.source_tokens - 2)).tolist()


def main(argv=None) -> None:
    args = parse_args(argv)
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from imported_speed import interleaved_timings

    workdir = Path(args.workdir or tempfile.mkdtemp(prefix="nllb_speed-"))
    if args.memory_of:
        found, _, _ = systems(workdir / "run", workdir, args, (args.memory_of,))
        if args.memory_of not in found:
            print(json.dumps({"peak_rss_gb": None}))
            return
        found[args.memory_of]["translate"](sentence_ids(args))
        print(json.dumps({"peak_rss_gb": round(
            resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / 1e9, 2)}))
        return
    run, memory = imported_run(workdir)
    found, profiled, facts = systems(run, workdir, args)
    inputs = sentence_ids(args)
    results = interleaved_timings(found, inputs, args.rounds)
    reference = results["ctranslate2_float32"]
    for name, result in results.items():
        result["batch1_latency_vs_ctranslate2_float32"] = round(
            result["batch1_ms_per_sentence"] / reference["batch1_ms_per_sentence"], 3)
        result["batch32_throughput_vs_ctranslate2_float32"] = round(
            result["batch32_sentences_per_second"] / reference["batch32_sentences_per_second"], 3)
    del found
    gc.collect()
    for name in results:  # each in a process of its own, the exports written
        completed = subprocess.run(
            [sys.executable, __file__, "--workdir", str(workdir), "--memory-of", name,
             "--sentences", str(args.sentences), "--source-tokens", str(args.source_tokens),
             "--extra-length", str(args.extra_length), "--threads", str(args.threads)],
            check=True, capture_output=True, text=True, cwd=ROOT)
        results[name]["serving_peak_rss_gb"] = json.loads(
            completed.stdout.splitlines()[-1])["peak_rss_gb"]
    print(json.dumps({"threads": args.threads, "sentences_batch1": len(inputs),
                      **memory, **facts, **results, "profiles_batch1": profiled}))


if __name__ == "__main__":
    main()
