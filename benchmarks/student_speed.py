"""One sentence at a time through trained runs' exports: the teacher-to-student comparison of
decoding time (e.g. the `multi30k` recipe's 4+4 layers against a student with a deep encoder and
a one-layer decoder), every run exported the same way and timed in one process.

    python benchmarks/student_speed.py runs/student1 runs/student_deep1 \
        --src data/m30k_tok/test_2016_flickr.en --beam-size 5 [--xla] \
        [--ctranslate2 float32,int8] [--sentences 1000] [--serving-default-only]

Each run's default weights (`RunDir.default_weights`) are exported as a float32 SavedModel with
its recipe's search settings and `--beam-size` (with `--xla`, the XLA-compiled search; with
`--serving-default-only`, a SavedModel of the one signature timed, a rehearsal's: the same
search, without the six others an export traces, saves and loads), and, for each
`--ctranslate2` quantization, as a CTranslate2 model run through the library's own
functions (`CTranslate2Search`: the rules `kt-translate` applies). Every sentence is
translated once by every export as a warm-up (XLA compiles once per padded width), then timed
alone (batch 1), the exports taking turns sentence by sentence (the order rotated) so that a
drift of the machine's speed falls on all of them alike. Prints, per export, the median, mean
and 90th percentile seconds per sentence and the median's ratio to the first run's (same kind).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Callable

import numpy as np
import tensorflow as tf

from keras_transformer.config import SearchSettings
from keras_transformer.serving.ctranslate2_export import CTranslate2Search, export_ctranslate2
from keras_transformer.data.text_files import read_lines
from keras_transformer.decoding.translator import TranslationModule
from keras_transformer.precision import serving_copy
from keras_transformer.serving.export import export_translator
from keras_transformer.training.run_dir import RunDir
from trainers.common import load_run_model

Translate = Callable[[str], object]


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("runs", nargs="+", help="kt-train run directories (the first: the "
                        "reference of the ratios)")
    parser.add_argument("--src", required=True, help="source sentences, one a line")
    parser.add_argument("--sentences", type=int, default=1000, help="at most this many")
    parser.add_argument("--beam-size", type=int, default=5)
    parser.add_argument("--xla", action="store_true", help="XLA-compiled SavedModel searches")
    parser.add_argument("--ctranslate2", default="",
                        help="comma-separated CTranslate2 quantizations to time too")
    parser.add_argument("--serving-default-only", action="store_true",
                        help="SavedModels of the signature timed alone, not whole exports: the "
                        "same search, seconds less per run (a rehearsal's)")
    return parser.parse_args(argv)


def serving_default_export(model, tokenizer, directory: Path, settings: SearchSettings,
                           jit_compile: bool) -> str:
    """A SavedModel in `directory` whose one signature, `serving_default`, is the one an export
    of `export_translator` has (the `TranslationModule` of a float32 copy of `model` with `settings`
    and `jit_compile`), without the other six and the export's records; returns its path."""
    translator = TranslationModule(serving_copy(model, "float32"), tokenizer, settings,
                            jit_compile=jit_compile)
    # the weights and the tokenizer the signature reads, not the translator: saving that traces
    # each of its signatures
    module = tf.Module()
    module.model, module.tokenizer = translator.model, tokenizer
    tf.saved_model.save(module, os.fspath(directory),
                        signatures={"serving_default": translator.translate},
                        options=tf.saved_model.SaveOptions(experimental_custom_gradients=False))
    return os.fspath(directory)


def exports(args: argparse.Namespace, workdir: Path) -> dict[str, Translate]:
    """Name -> a function translating one sentence, for every run and export kind."""
    functions: dict[str, Translate] = {}
    for run_dir in args.runs:
        model, tokenizer = load_run_model(run_dir)
        settings = SearchSettings.of(RunDir(run_dir).load_recipe().search,
                                     beam_size=args.beam_size)
        name = Path(run_dir).name
        if args.serving_default_only:
            path = serving_default_export(model, tokenizer, workdir / name, settings, args.xla)
        else:
            path = export_translator(model, tokenizer, name, workdir, settings,
                                     jit_compile=args.xla)
        signature = tf.saved_model.load(path).signatures["serving_default"]
        functions[f"{name} SavedModel{' XLA' if args.xla else ''}"] = (
            lambda text, signature=signature: signature(text=tf.constant([text]))
            ["translation"].numpy())
        for quantization in filter(None, args.ctranslate2.split(",")):
            directory = export_ctranslate2(model, tokenizer, workdir / f"{name}-{quantization}",
                                           quantization, settings)
            translate_text = CTranslate2Search(directory).translate_text
            functions[f"{name} CTranslate2 {quantization}"] = (
                lambda text, translate_text=translate_text:
                translate_text(tf.constant([text]))["translation"].numpy())
    return functions


def time_sentences(functions: dict[str, Translate], sentences: list[str]) -> dict[str, list]:
    """Seconds per sentence for every function, after a warm-up pass over every sentence."""
    for function in functions.values():
        for sentence in sentences:
            function(sentence)
    names = list(functions)
    seconds: dict[str, list] = {name: [] for name in names}
    for index, sentence in enumerate(sentences):
        for name in names[index % len(names):] + names[:index % len(names)]:
            start = time.perf_counter()
            functions[name](sentence)
            seconds[name].append(time.perf_counter() - start)
    return seconds


def main(argv=None) -> None:
    args = parse_args(argv)
    sentences = read_lines(args.src)[:args.sentences]
    with tempfile.TemporaryDirectory() as workdir:
        seconds = time_sentences(exports(args, Path(workdir)), sentences)
    reference = {}
    print(f"| export | median s | mean s | p90 s | median / {Path(args.runs[0]).name}'s |")
    print("|---|---:|---:|---:|---:|")
    summary = {}
    for name, values in seconds.items():
        kind = name.split(" ", 1)[1]
        median = statistics.median(values)
        reference.setdefault(kind, median)
        summary[name] = {"median": median, "mean": statistics.fmean(values),
                         "p90": float(np.percentile(values, 90)),
                         "ratio": median / reference[kind]}
        row = summary[name]
        print(f"| {name} | {row['median']:.4f} | {row['mean']:.4f} | {row['p90']:.4f} | "
              f"{row['ratio']:.2f}x |")
    print(json.dumps({"sentences": len(sentences), "beam_size": args.beam_size,
                      "xla": args.xla, "exports": summary}))


if __name__ == "__main__":
    main()
