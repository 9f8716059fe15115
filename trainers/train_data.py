"""`kt-train`'s data: the corpora, the run's vocabulary, the token storage and the step
budget."""
from __future__ import annotations

import argparse
import math
import sys
import time
from typing import Optional

from keras_transformer.config import TransformerConfig
from keras_transformer.data import (SubwordTokenizer, load_tfds, read_parallel,
                                    write_demo_corpus)
from keras_transformer.data.batch_plan import BatchPlan
from keras_transformer.data.prepare import (ParallelSource, check_segmentation, combined_source,
                                            prepared, sample_sentences, text_file_source,
                                            tfds_source)
from keras_transformer.data.token_storage import TokenStorage
from keras_transformer.data.tokenizer import MODEL_FILENAME
from keras_transformer.training.run_dir import RunDir


def load_corpora(args: argparse.Namespace,
                 run: RunDir) -> tuple[Optional[ParallelSource], dict[str, tuple[list, list]]]:
    """The training pairs as a stream (None with `--prepared`), and split -> (sources,
    targets) of the dev and test splits the options name (test is optional)."""
    if args.tfds:
        names = dict(zip(("train", "dev", "test"), args.tfds_splits.split(",")))
        corpora = {split: load_tfds(args.tfds, names[split], args.source_lang,
                                    args.target_lang, data_dir=args.tfds_data_dir)
                   for split in ("dev", "test")}
        return tfds_source(args.tfds, names["train"], args.source_lang, args.target_lang,
                           args.tfds_data_dir), corpora
    if args.dev_src:
        corpora = {split: read_parallel(getattr(args, f"{split}_src"),
                                        getattr(args, f"{split}_tgt"))
                   for split in ("dev", "test") if getattr(args, f"{split}_src")}
        return (None if args.prepared else combined_source(
            [text_file_source(source, target)
             for source, target in zip(args.train_src, args.train_tgt)]), corpora)
    paths = write_demo_corpus(run.root / "demo_corpus", seed=args.seed)
    return text_file_source(*paths["train"]), {split: read_parallel(*paths[split])
                                                for split in ("dev", "test")}


def load_or_train_tokenizer(run: RunDir, config: TransformerConfig,
                            source: Optional[ParallelSource], args: argparse.Namespace
                            ) -> SubwordTokenizer:
    """The run's shared vocabulary: reloaded on restart; else `--prepared`'s, or learned from a
    seeded sample of `--vocab-sentences` training sentences."""
    if (run.vocab / MODEL_FILENAME).is_file():
        tokenizer, where = SubwordTokenizer.load(run.vocab), f"vocab: {run.vocab}"
    elif source is None:
        tokenizer = SubwordTokenizer.load(args.prepared)
        where = (f"--prepared: {args.prepared} (kt-prepare's default preset is base; give "
                 "kt-train the --preset and --set it was prepared with)")
    else:
        sample = sample_sentences(source, args.vocab_sentences, args.seed)
        tokenizer = SubwordTokenizer.train(sample, config.vocab_size, run.vocab,
                                           seed=args.seed)
        where = f"vocab: {run.vocab}"
    if tokenizer.vocab_size != config.vocab_size:
        raise ValueError(f"{where} has a vocabulary of {tokenizer.vocab_size} pieces but the "
                         f"recipe (--preset {args.preset}) says vocab_size={config.vocab_size}")
    if not (run.vocab / MODEL_FILENAME).is_file():
        tokenizer.save(run.vocab)
    return tokenizer


def training_storage(run: RunDir, source: Optional[ParallelSource], tokenizer: SubwordTokenizer,
                     args: argparse.Namespace) -> TokenStorage:
    """The training pairs as token storage: `--prepared`'s (refused if of another
    vocabulary), else prepared into the run directory once and reused by its restarts."""
    training = args.recipe.training
    if source is None:
        storage = TokenStorage.open(args.prepared)
        storage.check_vocabulary(tokenizer.model_proto, f"the run's {run.vocab / MODEL_FILENAME}")
        check_segmentation(storage, training.subword_dropout, training.subword_samples)
        return storage
    started = time.monotonic()
    storage, reused = prepared(source, run.root / "prepared", tokenizer, seed=args.seed,
                               subword_dropout=training.subword_dropout,
                               samples=training.subword_samples)
    print(f"kt-train: {'reusing' if reused else 'prepared'} {storage.pairs:,} training pairs in "
          f"{len(storage.shards)} shard(s) in {storage.directory}"
          + ("" if reused else f" ({time.monotonic() - started:.0f} s)"), file=sys.stderr)
    return storage


def step_budget(args: argparse.Namespace, plan: BatchPlan, replicas: int) -> Optional[int]:
    """Total steps: `--steps`, or `--epochs` times the steps of one pass over the data (its
    per-replica batches over the replicas, counted from the storage's manifest), rounded up to
    a multiple of `--steps-per-execution`."""
    if args.epochs is None:
        return args.steps
    steps = max(1, math.ceil(args.epochs * plan.batches_per_epoch / replicas))
    return math.ceil(steps / args.steps_per_execution) * args.steps_per_execution
