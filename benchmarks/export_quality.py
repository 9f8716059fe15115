"""Translation quality and speed of each export variant of a trained run, through the exported
SavedModel itself (what TF Serving runs), against the float32 export.

    python benchmarks/export_quality.py RUN_DIR --src test.en --ref test.de \
        [--tokenized-ref test.lc.tok.de] [--dtypes float32,bfloat16] [--beam-size 5] \
        [--shortlists 1000,20 500,10]

For each dtype: `export_translator` with the run's default weights and recipe's search settings
(flags override them), load the SavedModel, translate the test set in length-sorted batches
(`keras_transformer.evaluation.translate_corpus`), and report sacreBLEU, chrF, the tokenized
lowercased BLEU when `--tokenized-ref` is given, the wall clock, and how many lines equal the
first variant's. `--shortlists` adds, for each dtype, an export with each vocabulary shortlist
(`kt-export --shortlist`, learned from the run's training files).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time

import tensorflow as tf

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class ExportedTranslator:
    """A loaded export's `serving_default`, shaped like `TranslationModule.translate`."""

    def __init__(self, path: str):
        self.signature = tf.saved_model.load(path).signatures["serving_default"]

    def translate(self, texts) -> dict:
        return self.signature(text=tf.constant(list(texts), tf.string))


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("run_dir")
    parser.add_argument("--src", required=True, help="test sources, one a line (plain or .gz)")
    parser.add_argument("--ref", required=True, help="test references, line-aligned")
    parser.add_argument("--tokenized-ref", help="lowercased tokenized references (Multi30k tok/)")
    parser.add_argument("--dtypes", default="float32,bfloat16")
    parser.add_argument("--shortlists", nargs="*", default=[], metavar="FREQUENT,PER_SOURCE")
    parser.add_argument("--beam-size", type=int)
    parser.add_argument("--batch-size", type=int, default=64)
    return parser.parse_args(argv)


def main(argv=None) -> None:
    args = parse_args(argv)
    sys.path.insert(0, REPO_ROOT)
    from keras_transformer.data import read_lines, read_parallel
    from keras_transformer.evaluation import (corpus_scores, tokenized_lowercase_bleu,
                                              translate_corpus)
    from keras_transformer.serving.export import export_translator
    from keras_transformer.config import SearchSettings
    from keras_transformer.training.run_dir import RunDir
    from trainers.common import load_run_model
    from trainers.export import learn_shortlist

    sources, references = read_parallel(args.src, args.ref)
    tokenized = read_lines(args.tokenized_ref) if args.tokenized_ref else None
    model, tokenizer = load_run_model(args.run_dir)
    settings = SearchSettings.of(RunDir(args.run_dir).load_recipe().search, args.beam_size)
    shortlists = {sizes: learn_shortlist(sizes, None, args.run_dir, tokenizer)
                  for sizes in [None, *args.shortlists]}
    rows, baseline = [], None
    with tempfile.TemporaryDirectory() as workdir:
        for dtype, sizes in [(dtype, sizes) for dtype in args.dtypes.split(",")
                             for sizes in shortlists]:
            path = export_translator(model, tokenizer, "variant", workdir, settings, dtype,
                                     shortlists[sizes])
            translator = ExportedTranslator(path)
            translate_corpus(translator, sources[:args.batch_size], args.batch_size)  # warm-up
            start = time.perf_counter()
            hypotheses = translate_corpus(translator, sources, args.batch_size)
            seconds = time.perf_counter() - start
            scores = corpus_scores(hypotheses, references)
            if tokenized is not None:
                scores.append(tokenized_lowercase_bleu(hypotheses, tokenized))
            baseline = baseline or hypotheses
            rows.append({"variant": dtype + (f" + shortlist {sizes}" if sizes else ""),
                         "seconds": round(seconds, 1),
                         "sentences_per_second": round(len(sources) / seconds, 1),
                         "same_as_first": sum(a == b for a, b in zip(hypotheses, baseline)),
                         **{score.name: round(score.value, 2) for score in scores},
                         "signatures": {score.name: score.signature for score in scores}})
    print(json.dumps({"run_dir": args.run_dir, "search": vars(settings),
                      "sentences": len(sources), "rows": rows}, indent=2))
    for row in rows:
        print(f"{row['variant']:>30}: BLEU {row['BLEU']:.2f}, chrF {row['CHRF']:.2f}"
              + (f", tokenized {row['tokenized lowercase BLEU']:.2f}" if tokenized else "")
              + f"; {row['sentences_per_second']} sentences/s; "
              f"{row['same_as_first']}/{len(sources)} lines equal to {rows[0]['variant']}'s")


if __name__ == "__main__":
    main()
