"""`kt-prepare`: tokenizes a training corpus once into sharded token storage for `kt-train`. Its
manual: docs/data.md, "Prepare once: token storage for corpora of any size".
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Optional, Sequence

from trainers.arguments import prepare_parser
from keras_transformer.training.inputs import counted_source, learn_vocabulary
from trainers.common import preset_recipe
from keras_transformer.data.prepare import (check_pairs, combined_source,
                                            describe_left_out, left_out, prepare,
                                            text_file_source, tfds_source)
from keras_transformer.data.sentencepiece_pair import load_tokenizer
from keras_transformer.training.progress import CountProgress


def parse_args(argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
    """The command line's options, checked (`argv`: default `sys.argv[1:]`)."""
    parser = prepare_parser()
    args = parser.parse_args(argv)
    if len(args.train_src or []) != len(args.train_tgt or []):
        parser.error("--train-src and --train-tgt: give both, one of each per corpus")
    if bool(args.tfds) == bool(args.train_src):
        parser.error("give --train-src/--train-tgt or --tfds (one of them)")
    for name in ("vocab_sentences", "shard_pairs", "threads"):
        value = getattr(args, name)
        if value is not None and value <= 0:
            parser.error(f"--{name.replace('_', '-')}: must be positive, got {value}")
    try:
        args.recipe = preset_recipe(args.preset, args.config, args.overrides)
    except ValueError as error:
        parser.error(str(error))
    return args


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Runs the command line; returns its exit status (2 on a user error, 1 on a failed
    write such as a full disk: no manifest is left, so nothing takes the directory for
    prepared data)."""
    args = parse_args(argv)
    started = time.monotonic()
    try:
        source = (tfds_source(args.tfds, args.tfds_split, args.source_lang, args.target_lang,
                              data_dir=args.tfds_data_dir) if args.tfds
                  else combined_source([text_file_source(source, target) for source, target
                                        in zip(args.train_src, args.train_tgt)]))
        check_pairs(source, "--tfds" if args.tfds else "--train-src/--train-tgt")
        if args.vocab:
            tokenizer = load_tokenizer(args.vocab)
        else:
            tokenizer = learn_vocabulary("kt-prepare", source,
                                         vocab_size=args.recipe.architecture.vocab_size,
                                         sentences=args.vocab_sentences,
                                         directory=args.output_dir, seed=args.seed)
        training = args.recipe.training
        progress = CountProgress("kt-prepare", None, "pairs", doing="tokenizing")
        storage = prepare(counted_source(source, progress), args.output_dir, tokenizer,
                          shard_pairs=args.shard_pairs, seed=args.seed, threads=args.threads,
                          subword_dropout=training.subword_dropout,
                          samples=training.subword_samples,
                          max_length=args.recipe.architecture.max_length)
    except (ValueError, FileNotFoundError) as error:
        print(f"kt-prepare: error: {error}", file=sys.stderr)
        return 2
    except OSError as error:
        print(f"kt-prepare: error: {error.filename or args.output_dir}: "
              f"{error.strerror or error}; the directory holds no manifest: nothing will take "
              "it for prepared data", file=sys.stderr)
        return 1
    for entry in left_out(storage.manifest, args.recipe.architecture.max_length):
        print(f"kt-prepare: warning: {describe_left_out(entry)}", file=sys.stderr)
    summary = {"directory": str(storage.directory), "shards": len(storage.shards),
               "vocab_size": storage.vocab_size, "pairs": storage.manifest["pairs"],
               **({"corpora": [corpus["pairs"] for corpus in storage.manifest["corpora"]]}
                  if "corpora" in storage.manifest else {}),
               "seconds": round(time.monotonic() - started, 1)}
    print(json.dumps(summary, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
