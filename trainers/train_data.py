"""`kt-train`'s data: the corpora, the run's vocabulary, the token storage and the step
budget; with several language pairs (`--pair`), each pair's storage and the plan that draws
batches over them (`PairSampling`), recorded in the run's `languages.json`."""
from __future__ import annotations

import argparse
import dataclasses
import math
import sys
import time
from pathlib import Path
from typing import NamedTuple, Optional

from keras_transformer.config import TransformerConfig
from keras_transformer.data import (load_tfds, read_parallel,
                                    write_demo_corpus)
from keras_transformer.data.batch_plan import BatchPlan
from keras_transformer.data.languages import (LanguagePair, RunLanguages, language_token_ids,
                                              reserved_tokens, sample_language_sentences,
                                              target_languages)
from keras_transformer.data.pair_sampling import PairSampling
from keras_transformer.data.prepare import (ParallelSource, check_alignments, check_pairs,
                                            check_segmentation,
                                            combined_source, describe_left_out, left_out,
                                            prepared, text_file_source, tfds_source)
from keras_transformer.data.sentencepiece_pair import Tokenizer, has_tokenizer, load_tokenizer
from keras_transformer.data.token_storage import TokenStorage
from keras_transformer.data.tokenizer import SubwordTokenizer
from keras_transformer.training.progress import CountProgress, stage
from keras_transformer.parsing.evaluate import read_gold_trees
from keras_transformer.training.run_dir import LANGUAGES_FILE, LEFT_OUT_FILE, RunDir
from trainers.common import counted_source, learn_vocabulary
from trainers.train_arguments import tfds_split_names


class PairInputs(NamedTuple):
    """What a start of several language pairs reads besides the training pairs: pair name ->
    (sources, targets) of its dev set and of its test set (the pairs given one), and the
    run's languages before its pairs are recorded: each language's token in the run's
    vocabulary, where it goes (`RunLanguages.pair_prefixes`)."""

    dev: dict[str, tuple[list, list]]
    test: dict[str, tuple[list, list]]
    languages: RunLanguages


class RunInputs(NamedTuple):
    """What a start reads: the training pairs as a stream (None with `--prepared`), split ->
    (sources, targets) of dev and test (test optional), the gold trees of the test sources
    (`--test-tree`, else None), the run's vocabulary, and `--prepared`'s storage, checked.
    With `--pair`: `source` holds each pair's corpus (in `--pair` order), `corpora` is empty
    and `pairs` holds the rest."""

    source: Optional[ParallelSource]
    corpora: dict[str, tuple[list, list]]
    gold_trees: Optional[list]
    tokenizer: Tokenizer
    storage: Optional[TokenStorage]
    pairs: Optional[PairInputs] = None


def run_inputs(args: argparse.Namespace, run: RunDir) -> RunInputs:
    """Reads and checks every input of a start, writing nothing (the demo corpus excepted,
    which `load_corpora` writes into the run directory): whatever a start can be refused for
    is found before its first write. The vocabulary is learned here when the run has none
    yet; `keep_vocabulary` saves it."""
    if args.language_pairs:
        return pair_inputs(args, run)
    source, corpora = load_corpora(args, run)
    if source is not None:
        check_pairs(source, "--tfds" if args.tfds else "--train-src/--train-tgt")
        check_alignments(source)
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


def pair_inputs(args: argparse.Namespace, run: RunDir) -> RunInputs:
    """`run_inputs` of several language pairs: each pair's training corpus, checked, its dev
    and test sets, and the run's vocabulary (learned here for a new run) with a token for
    each target language."""
    source = combined_source([text_file_source(*args.pair_files[pair.name]["train"])
                              for pair in args.language_pairs])
    check_pairs(source, "--pair")
    sets = {split: {name: read_parallel(*files[split]) for name, files in args.pair_files.items()
                    if split in files} for split in ("dev", "test")}
    tokenizer = load_or_train_tokenizer(run, args.recipe.architecture, source, args)
    many_to_many = RunDir(args.init_from).languages() if args.init_from else None
    if many_to_many is not None:  # a model of many languages (NLLB-200), fine-tuned on pairs
        languages = dataclasses.replace(many_to_many, temperature=args.pair_temperature)
    else:
        languages = RunLanguages.trained(args.language_token, language_token_ids(
            tokenizer, target_languages(args.language_pairs),
            f"the run's vocabulary {run.vocab}"), args.pair_temperature, [])
    return RunInputs(source, {}, None, tokenizer, None,
                     PairInputs(sets["dev"], sets["test"], languages))


def learn_pair_vocabulary(pairs: list[LanguagePair], source: ParallelSource, vocab_size: int,
                          sentences: int, seed: int) -> SubwordTokenizer:
    """A `vocab_size`-piece vocabulary shared by the languages of `pairs` (`source`: their
    corpora, in the same order), learned from the same number of sentences of each language
    (`sample_language_sentences`: up to `sentences` in all, and no more of a language than
    the one with the fewest lines has), with a token reserved per target language."""
    corpora = source.parts or (source,)
    sides = [(language, corpus, side) for pair, corpus in zip(pairs, corpora)
             for side, language in enumerate((pair.source, pair.target))]
    languages = sorted({language for language, _, _ in sides})
    fewest = min(sum(corpus.count() for name, corpus, _ in sides if name == language)
                 for language in languages)
    each = max(1, min(sentences // len(languages), fewest))
    reserved = reserved_tokens(pairs)
    with stage("kt-train", f"learning a vocabulary of {vocab_size:,} pieces from {each:,} "
                           f"sentences of each of {', '.join(languages)}, with "
                           f"{', '.join(reserved)}"):
        return SubwordTokenizer.train(sample_language_sentences(sides, each * len(languages),
                                                                seed),
                                      vocab_size, None, seed=seed, reserved=reserved)


def load_corpora(args: argparse.Namespace,
                 run: RunDir) -> tuple[Optional[ParallelSource], dict[str, tuple[list, list]]]:
    """The training pairs as a stream (None with `--prepared`), and split -> (sources,
    targets) of the dev and test splits the options name (test is optional)."""
    if args.tfds:
        names = tfds_split_names(args)
        corpora = {split: load_tfds(args.tfds, names[split], args.source_lang,
                                    args.target_lang, data_dir=args.tfds_data_dir)
                   for split in ("dev", "test")}
        return tfds_source(args.tfds, names["train"], args.source_lang, args.target_lang,
                           data_dir=args.tfds_data_dir), corpora
    if args.dev_src:
        corpora = {split: read_parallel(getattr(args, f"{split}_src"),
                                        getattr(args, f"{split}_tgt"))
                   for split in ("dev", "test") if getattr(args, f"{split}_src")}
        alignments = args.alignments or [None] * len(args.train_src)
        return (None if args.prepared else combined_source(
            [text_file_source(*files)
             for files in zip(args.train_src, args.train_tgt, alignments)]), corpora)
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
    elif args.language_pairs:
        tokenizer = learn_pair_vocabulary(args.language_pairs, source, config.vocab_size,
                                          args.vocab_sentences, args.seed)
        where = f"vocab: {run.vocab}"
    elif source is None:
        tokenizer = load_tokenizer(args.prepared)
        where = (f"--prepared: {args.prepared} (give kt-train the --preset and --set it was "
                 "prepared with)")
    else:
        tokenizer = learn_vocabulary("kt-train", source, vocab_size=config.vocab_size,
                                     sentences=args.vocab_sentences, directory=None,
                                     seed=args.seed)
        where = f"vocab: {run.vocab}"
    if tokenizer.vocab_size != config.vocab_size:
        raise ValueError(f"{where} has a vocabulary of {tokenizer.vocab_size} pieces but the "
                         f"recipe (--preset {args.preset}) says vocab_size={config.vocab_size}")
    return tokenizer


def keep_vocabulary(run: RunDir, tokenizer: Tokenizer) -> None:
    """Saves `tokenizer` as the run's vocabulary, unless the run has one."""
    if not has_tokenizer(run.vocab):
        tokenizer.save(run.vocab)


def keep_languages(run: RunDir, init_from: Optional[str]) -> None:
    """The `--init-from` run's target languages as the new run's, unless it has its own: those
    of an imported multi-target model, whose tokens are optional (its texts may carry their own:
    fine-tuned on plain pairs, it still takes `--target-language`); a run whose tokens are
    required is refused before (`train_arguments.check_init_from`)."""
    if init_from and not (run.root / LANGUAGES_FILE).is_file():
        languages = RunDir(init_from).languages()
        if languages is not None:
            run.write_json(LANGUAGES_FILE, languages.to_dict())


def training_storage(run: RunDir, inputs: RunInputs, args: argparse.Namespace) -> TokenStorage:
    """The training pairs as token storage: `--prepared`'s (checked by `run_inputs`), else
    prepared into the run directory once and reused by its restarts."""
    if inputs.storage is not None:
        return inputs.storage
    return stored(inputs.source, run.root / "prepared", inputs.tokenizer, args)


def stored(source: ParallelSource, directory: Path, tokenizer: Tokenizer,
           args: argparse.Namespace,
           prefixes: tuple[list[int], list[int]] = ([], [])) -> TokenStorage:
    """`source` as token storage in `directory`, prepared once (`prepared`: with the recipe's
    segmentation and `prefixes`) and reused by the run's restarts; its progress and its
    outcome printed."""
    training = args.recipe.training
    started = time.monotonic()
    progress = CountProgress("kt-train", None, "pairs",
                             doing="tokenizing the training pairs")
    storage, reused = prepared(counted_source(source, progress), directory,
                               tokenizer, seed=args.seed,
                               subword_dropout=training.subword_dropout,
                               samples=training.subword_samples,
                               max_length=args.recipe.architecture.max_length,
                               prefixes=prefixes)
    print(f"kt-train: {'reusing' if reused else 'prepared'} {storage.pairs:,} training pairs in "
          f"{len(storage.shards)} shard(s) in {storage.directory}"
          + ("" if reused else f" ({time.monotonic() - started:.0f} s)"), file=sys.stderr)
    return storage


def pair_sampling(run: RunDir, inputs: RunInputs, args: argparse.Namespace,
                  batch_tokens: int) -> PairSampling:
    """The batches of several language pairs: each pair's corpus in its own storage
    (`prepared/SRC-TGT`) with its language tokens in every pair's ids where the run's
    languages put them (`RunLanguages.pair_prefixes`: `--language-token`, or the
    `--init-from` model's), each pair drawn at `--pair-temperature`; the shares are printed
    and recorded with the languages in the run's `languages.json` (`RunLanguages`)."""
    plans, prefixes = {}, {}
    corpora = inputs.source.parts or (inputs.source,)
    languages = inputs.pairs.languages
    for pair, corpus in zip(args.language_pairs, corpora):
        prefixes[pair.name] = languages.pair_prefixes(pair)
        storage = stored(corpus, run.root / "prepared" / pair.name, inputs.tokenizer, args,
                         prefixes[pair.name])
        plans[pair.name] = BatchPlan(storage, batch_tokens, args.recipe.architecture.max_length,
                                     args.seed, word_dropout=args.recipe.training.word_dropout)
    sampling = PairSampling(plans, args.pair_temperature, args.seed, prefixes)
    pairs = [{"name": pair.name, "source": pair.source, "target": pair.target,
              "batches_per_epoch": plans[pair.name].batches_per_epoch,
              "pairs_per_epoch": plans[pair.name].pairs_per_epoch,
              "share": round(float(share), 6)}
             for pair, share in zip(args.language_pairs, sampling.shares)]
    run.write_json(LANGUAGES_FILE, dataclasses.replace(languages, pairs=pairs).to_dict())
    print("kt-train: pairs drawn at temperature "
          f"{args.pair_temperature:g}: " + ", ".join(
              f"{name} {100 * share:.1f}%" for name, share in zip(sampling.names,
                                                                  sampling.shares))
          + f" of the batches; target-language token first in the {languages.placement}"
          + (", source-language token first in the source"
             if languages.source_language_token else ""), file=sys.stderr)
    return sampling


def report_left_out(run: RunDir, plan: BatchPlan | PairSampling) -> None:
    """Prints the training pairs the run does not train on (`prepare.left_out`: per corpus
    and reason, the count and the first line numbers; per language pair's storage for a
    `PairSampling`) and keeps them in the run directory's `LEFT_OUT_FILE`."""
    plans = plan.plans.values() if isinstance(plan, PairSampling) else [plan]
    entries = [entry for one in plans
               for entry in left_out(one.storage.manifest, one.max_length, one.pairs_per_epoch)]
    for entry in entries:
        print(f"kt-train: warning: {describe_left_out(entry)}", file=sys.stderr)
    run.write_json(LEFT_OUT_FILE, entries)


def step_budget(args: argparse.Namespace, plan: BatchPlan | PairSampling,
                replicas: int) -> Optional[int]:
    """Total steps: `--steps`, or `--epochs` times the steps of one pass over the data (its
    per-replica batches over the replicas, counted from the storage's manifest), rounded up to
    a multiple of `--steps-per-execution`."""
    if args.epochs is None:
        return args.steps
    steps = max(1, math.ceil(args.epochs * plan.batches_per_epoch / replicas))
    return math.ceil(steps / args.steps_per_execution) * args.steps_per_execution
