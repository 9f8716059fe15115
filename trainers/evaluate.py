"""`kt-evaluate`: translates a test set with a trained run and scores it.

    kt-evaluate runs/multi30k --src test_2016_flickr.en.gz --ref test_2016_flickr.de.gz \
        --tokenized-ref tok/test_2016_flickr.lc.norm.tok.de --beam-size 5
    kt-evaluate runs/wmt14 --tfds wmt14_translate/de-en --split test

Reports detokenized, cased sacreBLEU and chrF with their signatures, writes the hypotheses
(one a line) and, with `--tokenized-ref`, the lowercased tokenized BLEU of published
Multi30k results. Weights: `--weights`, else the run's averaged, final or newest checkpoint.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Optional, Sequence

from trainers.common import load_run_model
from keras_transformer.data import load_tfds, read_lines, read_parallel
from keras_transformer.decoding.translator import Translator
from keras_transformer.evaluation import (corpus_scores, tokenized_lowercase_bleu,
                                          translate_corpus, write_lines)


def parse_args(argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="kt-evaluate", description=__doc__.split("\n")[0])
    parser.add_argument("run_dir", help="the directory kt-train wrote")
    parser.add_argument("--weights", help="a .weights.h5 file (default: see above)")
    parser.add_argument("--src", help="source sentences, one a line (plain or .gz)")
    parser.add_argument("--ref", help="reference translations, line-aligned with --src")
    parser.add_argument("--tfds", metavar="NAME", help="tensorflow-datasets builder instead")
    parser.add_argument("--split", default="test", help="tfds split (default: test)")
    parser.add_argument("--source-lang", default="en", help="tfds source language")
    parser.add_argument("--target-lang", default="de", help="tfds target language")
    parser.add_argument("--tfds-data-dir", help="tensorflow-datasets data directory")
    parser.add_argument("--tokenized-ref", help="lowercased tokenized references (Multi30k "
                        "tok/*.lc.norm.tok.de) for the tokenized BLEU")
    parser.add_argument("--beam-size", type=int, help="default: the config's beam_size")
    parser.add_argument("--alpha", type=float, help="default: the config's length_penalty")
    parser.add_argument("--batch-size", type=int, default=64, help="sentences per batch")
    parser.add_argument("--hypotheses", help="output file (default: <run_dir>/<src name>.hyp)")
    args = parser.parse_args(argv)
    if args.tfds and (args.src or args.ref):
        parser.error("--tfds: cannot be combined with --src/--ref")
    if not args.tfds and not (args.src and args.ref):
        parser.error("--src and --ref (or --tfds): the test set to translate is required")
    if args.beam_size is not None and args.beam_size < 1:
        parser.error(f"--beam-size: must be at least 1, got {args.beam_size}")
    if args.batch_size < 1:
        parser.error(f"--batch-size: must be at least 1, got {args.batch_size}")
    for name in ("src", "ref", "tokenized_ref", "weights"):
        path = getattr(args, name)
        if path and not os.path.isfile(path):
            parser.error(f"--{name.replace('_', '-')}: no such file {path!r}")
    if not os.path.isdir(args.run_dir):
        parser.error(f"run_dir: no such directory {args.run_dir!r}")
    return args


def test_set(args: argparse.Namespace) -> tuple[list[str], list[str], str]:
    """(sources, references, name) from local files or a tfds split."""
    if args.tfds:
        sources, references = load_tfds(args.tfds, args.split, args.source_lang,
                                        args.target_lang, data_dir=args.tfds_data_dir)
        return sources, references, f"{args.tfds.replace('/', '_')}.{args.split}"
    sources, references = read_lines(args.src), read_lines(args.ref)
    if len(sources) != len(references):
        read_parallel(args.src, args.ref)  # raises, naming both files and counts
    return sources, references, Path(args.src).name.removesuffix(".gz")


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = parse_args(argv)
    try:
        model, tokenizer = load_run_model(args.run_dir, args.weights)
        sources, references, name = test_set(args)
        translator = Translator(model, tokenizer, beam_size=args.beam_size, alpha=args.alpha)
        hypotheses = translate_corpus(translator, sources, args.batch_size)
        scores = corpus_scores(hypotheses, references)
        if args.tokenized_ref:
            scores.append(tokenized_lowercase_bleu(hypotheses, read_lines(args.tokenized_ref)))
    except (ValueError, FileNotFoundError) as error:
        print(f"kt-evaluate: error: {error}", file=sys.stderr)
        return 2
    output = args.hypotheses or os.path.join(args.run_dir, f"{name}.hyp")
    write_lines(output, hypotheses)
    for score in scores:
        print(score)
    print(json.dumps({"hypotheses": output, "sentences": len(sources),
                      **{score.name: round(score.value, 2) for score in scores},
                      "signatures": {score.name: score.signature for score in scores}}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
