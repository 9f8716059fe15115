"""A training run's data (`settings.TrainingData`): the corpora, the run's vocabulary, the
token storage and the step budget; with several language pairs (`--pair`), each pair's storage
and the plan that draws batches over them (`PairSampling`), recorded in the run's
`languages.json`."""
from __future__ import annotations

import dataclasses
import itertools
import math
import os
import sys
import time
from pathlib import Path
from typing import Iterator, NamedTuple, Optional

from keras_transformer.config import DEFAULT_STEPS, Recipe
from keras_transformer.data import (load_tfds, read_parallel,
                                    write_demo_corpus)
from keras_transformer.data.batch_plan import BatchPlan
from keras_transformer.data.languages import (LanguagePair, RunLanguages, language_token_ids,
                                              reserved_tokens, sample_language_sentences,
                                              target_languages)
from keras_transformer.data.pair_sampling import PairSampling
from keras_transformer.data.prepare import (ParallelSource, check_alignments, check_pairs,
                                            check_segmentation, combined_source,
                                            describe_left_out, left_out, prepared,
                                            sample_sentences, text_file_source, tfds_source)
from keras_transformer.data.sentencepiece_pair import Tokenizer, has_tokenizer, load_tokenizer
from keras_transformer.data.token_storage import TokenStorage
from keras_transformer.data.tokenizer import SubwordTokenizer
from keras_transformer.training.progress import CountProgress, stage
from keras_transformer.parsing.evaluate import read_gold_trees
from keras_transformer.training.run_dir import LANGUAGES_FILE, LEFT_OUT_FILE, RunDir
from keras_transformer.training.settings import RunOptions, TrainingData


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


class DataChoice(NamedTuple):
    """What a run's inputs are read with: the `recipe`, the `data`, the run's `options` (its
    seed, `init_from`) and how the recipe was given (`recipe_origin`, e.g. `--preset tiny`,
    named when the vocabulary's size differs from the recipe's)."""

    recipe: Recipe
    data: TrainingData
    options: RunOptions
    recipe_origin: str = ""


def run_inputs(choice: DataChoice, run: RunDir) -> RunInputs:
    """Reads and checks every input of a start, writing nothing (the demo corpus excepted,
    which `load_corpora` writes into the run directory): whatever a start can be refused for
    is found before its first write. The vocabulary is learned here when the run has none
    yet; `keep_vocabulary` saves it."""
    data = choice.data
    if data.language_pairs:
        return pair_inputs(choice, run)
    source, corpora = load_corpora(data, choice.options.seed, run)
    if source is not None:
        check_pairs(source, "--tfds" if data.tfds else "--train-src/--train-tgt")
        check_alignments(source)
    gold_trees = (read_gold_trees(data.test_tree, corpora["test"][0], data.test_src)
                  if data.test_tree else None)
    tokenizer = load_or_train_tokenizer(run, choice, source)
    storage = None
    if source is None:
        storage = TokenStorage.open(data.prepared)
        storage.check_vocabulary(tokenizer.serialized, f"the run's vocabulary {run.vocab}")
        training = choice.recipe.training
        check_segmentation(storage, training.subword_dropout, training.subword_samples)
    return RunInputs(source, corpora, gold_trees, tokenizer, storage)


def pair_inputs(choice: DataChoice, run: RunDir) -> RunInputs:
    """`run_inputs` of several language pairs: each pair's training corpus, checked, its dev
    and test sets, and the run's vocabulary (learned here for a new run) with a token for
    each target language."""
    data, init_from = choice.data, choice.options.init_from
    source = combined_source([text_file_source(*data.pair_files[pair.name]["train"])
                              for pair in data.language_pairs])
    check_pairs(source, "--pair")
    sets = {split: {name: read_parallel(*files[split]) for name, files in data.pair_files.items()
                    if split in files} for split in ("dev", "test")}
    tokenizer = load_or_train_tokenizer(run, choice, source)
    many_to_many = RunDir(init_from).languages() if init_from else None
    if many_to_many is not None:  # a model of many languages (NLLB-200), fine-tuned on pairs
        languages = dataclasses.replace(many_to_many, temperature=data.pair_temperature)
    else:
        languages = RunLanguages.trained(data.language_token, language_token_ids(
            tokenizer, target_languages(data.language_pairs),
            f"the run's vocabulary {run.vocab}"), data.pair_temperature, [])
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


def load_corpora(data: TrainingData, seed: int,
                 run: RunDir) -> tuple[Optional[ParallelSource], dict[str, tuple[list, list]]]:
    """The training pairs as a stream (None with `--prepared`), and split -> (sources,
    targets) of the dev and test splits `data` names (test is optional); with none, the demo
    corpus of `seed`."""
    if data.tfds:
        names = data.tfds_split_names()
        corpora = {split: load_tfds(data.tfds, names[split], data.source_lang,
                                    data.target_lang, data_dir=data.tfds_data_dir)
                   for split in ("dev", "test")}
        return tfds_source(data.tfds, names["train"], data.source_lang, data.target_lang,
                           data_dir=data.tfds_data_dir), corpora
    if data.dev_src:
        corpora = {split: read_parallel(getattr(data, f"{split}_src"),
                                        getattr(data, f"{split}_tgt"))
                   for split in ("dev", "test") if getattr(data, f"{split}_src")}
        alignments = data.alignments or (None,) * len(data.train_src)
        return (None if data.prepared else combined_source(
            [text_file_source(*files)
             for files in zip(data.train_src, data.train_tgt, alignments)]), corpora)
    paths = write_demo_corpus(run.root / "demo_corpus", seed=seed)
    return text_file_source(*paths["train"]), {split: read_parallel(*paths[split])
                                                for split in ("dev", "test")}


def load_or_train_tokenizer(run: RunDir, choice: DataChoice,
                            source: Optional[ParallelSource]) -> Tokenizer:
    """The run's tokenizer: reloaded on restart; else `--init-from`'s run's, `--prepared`'s,
    or a shared vocabulary learned from a seeded sample of `vocab_sentences` training
    sentences (not saved: `keep_vocabulary`)."""
    data, seed, init_from = choice.data, choice.options.seed, choice.options.init_from
    config = choice.recipe.architecture
    if has_tokenizer(run.vocab):
        tokenizer, where = load_tokenizer(run.vocab), f"vocab: {run.vocab}"
    elif init_from:
        vocab = RunDir(init_from).vocab
        tokenizer, where = load_tokenizer(vocab), f"--init-from: {vocab}"
    elif data.language_pairs:
        tokenizer = learn_pair_vocabulary(list(data.language_pairs), source, config.vocab_size,
                                          data.vocab_sentences, seed)
        where = f"vocab: {run.vocab}"
    elif source is None:
        tokenizer = load_tokenizer(data.prepared)
        where = (f"--prepared: {data.prepared} (give kt-train the --preset and --set it was "
                 "prepared with)")
    else:
        tokenizer = learn_vocabulary("kt-train", source, vocab_size=config.vocab_size,
                                     sentences=data.vocab_sentences, directory=None, seed=seed)
        where = f"vocab: {run.vocab}"
    if tokenizer.vocab_size != config.vocab_size:
        origin = f" ({choice.recipe_origin})" if choice.recipe_origin else ""
        raise ValueError(f"{where} has a vocabulary of {tokenizer.vocab_size} pieces but the "
                         f"recipe{origin} says vocab_size={config.vocab_size}")
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


def training_storage(run: RunDir, inputs: RunInputs, recipe: Recipe, seed: int
                     ) -> TokenStorage:
    """The training pairs as token storage: `--prepared`'s (checked by `run_inputs`), else
    prepared into the run directory once (with `recipe`'s segmentation and `seed`) and reused
    by its restarts."""
    if inputs.storage is not None:
        return inputs.storage
    return stored(inputs.source, run.root / "prepared", inputs.tokenizer, recipe, seed)


def stored(source: ParallelSource, directory: Path, tokenizer: Tokenizer, recipe: Recipe,
           seed: int, prefixes: tuple[list[int], list[int]] = ([], [])) -> TokenStorage:
    """`source` as token storage in `directory`, prepared once (`prepared`: with `recipe`'s
    segmentation, `seed` and `prefixes`) and reused by the run's restarts; its progress and
    its outcome printed."""
    training = recipe.training
    started = time.monotonic()
    progress = CountProgress("kt-train", None, "pairs",
                             doing="tokenizing the training pairs")
    storage, reused = prepared(counted_source(source, progress), directory,
                               tokenizer, seed=seed,
                               subword_dropout=training.subword_dropout,
                               samples=training.subword_samples,
                               max_length=recipe.architecture.max_length,
                               prefixes=prefixes)
    print(f"kt-train: {'reusing' if reused else 'prepared'} {storage.pairs:,} training pairs in "
          f"{len(storage.shards)} shard(s) in {storage.directory}"
          + ("" if reused else f" ({time.monotonic() - started:.0f} s)"), file=sys.stderr)
    return storage


def pair_sampling(run: RunDir, inputs: RunInputs, choice: DataChoice,
                  batch_tokens: int) -> PairSampling:
    """The batches of several language pairs: each pair's corpus in its own storage
    (`prepared/SRC-TGT`) with its language tokens in every pair's ids where the run's
    languages put them (`RunLanguages.pair_prefixes`: `--language-token`, or the
    `--init-from` model's), each pair drawn at `--pair-temperature`; the shares are printed
    and recorded with the languages in the run's `languages.json` (`RunLanguages`)."""
    plans, prefixes = {}, {}
    corpora = inputs.source.parts or (inputs.source,)
    languages = inputs.pairs.languages
    recipe, data, seed = choice.recipe, choice.data, choice.options.seed
    for pair, corpus in zip(data.language_pairs, corpora):
        prefixes[pair.name] = languages.pair_prefixes(pair)
        storage = stored(corpus, run.root / "prepared" / pair.name, inputs.tokenizer, recipe,
                         seed, prefixes[pair.name])
        plans[pair.name] = BatchPlan(storage, batch_tokens, recipe.architecture.max_length,
                                     seed, word_dropout=recipe.training.word_dropout)
    sampling = PairSampling(plans, data.pair_temperature, seed, prefixes)
    pairs = [{"name": pair.name, "source": pair.source, "target": pair.target,
              "batches_per_epoch": plans[pair.name].batches_per_epoch,
              "pairs_per_epoch": plans[pair.name].pairs_per_epoch,
              "share": round(float(share), 6)}
             for pair, share in zip(data.language_pairs, sampling.shares)]
    run.write_json(LANGUAGES_FILE, dataclasses.replace(languages, pairs=pairs).to_dict())
    print("kt-train: pairs drawn at temperature "
          f"{data.pair_temperature:g}: " + ", ".join(
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


def step_budget(options: RunOptions, plan: BatchPlan | PairSampling,
                replicas: int) -> Optional[int]:
    """Total steps: `options.steps`, or `epochs` times the steps of one pass over the data (its
    per-replica batches over the replicas, counted from the storage's manifest), rounded up to
    a multiple of `steps_per_execution`; with neither, `DEFAULT_STEPS` unless `max_minutes`
    limits the run (None: no step limit)."""
    if options.epochs is None:
        return (options.steps if options.steps is not None
                else None if options.max_minutes is not None else DEFAULT_STEPS)
    steps = max(1, math.ceil(options.epochs * plan.batches_per_epoch / replicas))
    return math.ceil(steps / options.steps_per_execution) * options.steps_per_execution


def counted_source(source: ParallelSource, progress: CountProgress) -> ParallelSource:
    """`source` with each pair its corpora stream counted by `progress` as it is read, and its
    `count()` setting `progress.total` (preparing counts the pairs first: no extra pass). The
    description is the same, so storage prepared from it is the same."""
    def count() -> int:
        progress.total = source.count()
        return progress.total

    def counted(corpus: ParallelSource) -> ParallelSource:
        def pairs() -> Iterator[tuple[str, str]]:
            for pair in corpus.pairs():
                progress.advance(1)
                yield pair
        return dataclasses.replace(corpus, pairs=pairs)

    if not source.parts:
        return dataclasses.replace(counted(source), count=count)
    parts = tuple(counted(corpus) for corpus in source.parts)
    return dataclasses.replace(source, count=count, parts=parts, pairs=lambda: (
        itertools.chain.from_iterable(corpus.pairs() for corpus in parts)))


def learn_vocabulary(command: str, source: ParallelSource, vocab_size: int, sentences: int,
                     directory: str | os.PathLike, seed: int) -> SubwordTokenizer:
    """A `vocab_size`-piece shared vocabulary learned from a seeded sample of `sentences`
    sentences of `source` (`sample_sentences`) into `directory`, as a `stage` of `command`
    (its start and end printed)."""
    with stage(command, f"learning a vocabulary of {vocab_size:,} pieces from up to "
                        f"{sentences:,} sentences"):
        return SubwordTokenizer.train(sample_sentences(source, sentences, seed), vocab_size,
                                      directory, seed=seed)
