"""`kt-train`'s data: the corpora, the run's vocabulary, the token storage and the step
budget."""
from __future__ import annotations

import argparse
import math
import sys
import time
from typing import NamedTuple, Optional

from keras_transformer.config import TransformerConfig
from keras_transformer.data import (load_tfds, read_parallel,
                                    write_demo_corpus)
from keras_transformer.data.batch_plan import BatchPlan
from keras_transformer.data.prepare import (ParallelSource, check_pairs, check_segmentation,
                                            combined_source, describe_left_out, left_out,
                                            prepared, text_file_source, tfds_source)
from keras_transformer.data.sentencepiece_pair import Tokenizer, has_tokenizer, load_tokenizer
from keras_transformer.data.token_storage import TokenStorage
from keras_transformer.training.progress import CountProgress
from keras_transformer.parsing.evaluate import read_gold_trees
from keras_transformer.training.run_dir import LEFT_OUT_FILE, RunDir
from trainers.common import counted_source, learn_vocabulary


class RunInputs(NamedTuple):
    """What a start reads: the training pairs as a stream (None with `--prepared`), split ->
    (sources, targets) of dev and test (test optional), the gold trees of the test sources
    (`--test-tree`, else None), the run's vocabulary, and `--prepared`'s storage, checked."""

    source: Optional[ParallelSource]
    corpora: dict[str, tuple[list, list]]
    gold_trees: Optional[list]
    tokenizer: Tokenizer
    storage: Optional[TokenStorage]


def run_inputs(args: argparse.Namespace, run: RunDir) -> RunInputs:
    """Reads and checks every input of a start, writing nothing (the demo corpus excepted,
    which `load_corpora` writes into the run directory): whatever a start can be refused for
    is found before its first write. The vocabulary is learned here when the run has none
    yet; `keep_vocabulary` saves it."""
    source, corpora = load_corpora(args, run)
    if source is not None:
        check_pairs(source, "--tfds" if args.tfds else "--train-src/--train-tgt")
    gold_trees = (read_gold_trees(args.test_tree, corpora["test"][0], args.test_src)
                  if args.test_tree else None)
    tokenizer = load_or_train_tokenizer(run, args.recipe.architecture, source, args)
    storage = None
    if source is None:
        storage = TokenStorage.open(args.prepared)
        storage.check_vocabulary(tokenizer.serialized, f"the run's vocabulary {run.vocab}")
        training = args.recipe.training
        check_segmentation(storage, training.subword_dropout, training.subword_samples)
    return RunInputs(source, corpora, gold_trees, tokenizer, storage)


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
                            ) -> Tokenizer:
    """The run's tokenizer: reloaded on restart; else `--init-from`'s run's, `--prepared`'s,
    or a shared vocabulary learned from a seeded sample of `--vocab-sentences` training
    sentences (not saved: `keep_vocabulary`)."""
    if has_tokenizer(run.vocab):
        tokenizer, where = load_tokenizer(run.vocab), f"vocab: {run.vocab}"
    elif args.init_from:
        vocab = RunDir(args.init_from).vocab
        tokenizer, where = load_tokenizer(vocab), f"--init-from: {vocab}"
    elif source is None:
        tokenizer = load_tokenizer(args.prepared)
        where = (f"--prepared: {args.prepared} (give kt-train the --preset and --set it was "
                 "prepared with)")
    else:
        tokenizer = learn_vocabulary("kt-train", source, config.vocab_size,
                                     args.vocab_sentences, None, args.seed)
        where = f"vocab: {run.vocab}"
    if tokenizer.vocab_size != config.vocab_size:
        raise ValueError(f"{where} has a vocabulary of {tokenizer.vocab_size} pieces but the "
                         f"recipe (--preset {args.preset}) says vocab_size={config.vocab_size}")
    return tokenizer


def keep_vocabulary(run: RunDir, tokenizer: Tokenizer) -> None:
    """Saves `tokenizer` as the run's vocabulary, unless the run has one."""
    if not has_tokenizer(run.vocab):
        tokenizer.save(run.vocab)


def training_storage(run: RunDir, inputs: RunInputs, args: argparse.Namespace) -> TokenStorage:
    """The training pairs as token storage: `--prepared`'s (checked by `run_inputs`), else
    prepared into the run directory once and reused by its restarts."""
    if inputs.storage is not None:
        return inputs.storage
    training = args.recipe.training
    started = time.monotonic()
    progress = CountProgress("kt-train", None, "pairs",
                             doing="tokenizing the training pairs")
    storage, reused = prepared(counted_source(inputs.source, progress), run.root / "prepared",
                               inputs.tokenizer, seed=args.seed,
                               subword_dropout=training.subword_dropout,
                               samples=training.subword_samples,
                               max_length=args.recipe.architecture.max_length)
    print(f"kt-train: {'reusing' if reused else 'prepared'} {storage.pairs:,} training pairs in "
          f"{len(storage.shards)} shard(s) in {storage.directory}"
          + ("" if reused else f" ({time.monotonic() - started:.0f} s)"), file=sys.stderr)
    return storage


def report_left_out(run: RunDir, plan: BatchPlan) -> None:
    """Prints the training pairs the run does not train on (`prepare.left_out`: per corpus
    and reason, the count and the first line numbers) and keeps them in the run directory's
    `LEFT_OUT_FILE`."""
    entries = left_out(plan.storage.manifest, plan.max_length, plan.pairs_per_epoch)
    for entry in entries:
        print(f"kt-train: warning: {describe_left_out(entry)}", file=sys.stderr)
    run.write_json(LEFT_OUT_FILE, entries)


def step_budget(args: argparse.Namespace, plan: BatchPlan, replicas: int) -> Optional[int]:
    """Total steps: `--steps`, or `--epochs` times the steps of one pass over the data (its
    per-replica batches over the replicas, counted from the storage's manifest), rounded up to
    a multiple of `--steps-per-execution`."""
    if args.epochs is None:
        return args.steps
    steps = max(1, math.ceil(args.epochs * plan.batches_per_epoch / replicas))
    return math.ceil(steps / args.steps_per_execution) * args.steps_per_execution
