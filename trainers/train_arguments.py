"""`kt-train`'s options (the grammar: `trainers.arguments.train_parser`): their
cross-checks, and the settings of the library's training run they give (`TrainCommand`)."""
from __future__ import annotations

import argparse
import os
import sys
from typing import NamedTuple, Optional, Sequence

from keras_transformer.config import PLACEMENTS, Recipe
from keras_transformer.data.languages import LanguagePair, RunLanguages
from keras_transformer.training.run_dir import RunDir
from keras_transformer.training.settings import RunOptions, TrainingData
from trainers.arguments import train_parser
from trainers.common import preset_recipe, recipe_overrides


class TrainCommand(NamedTuple):
    """A `kt-train` command line as the training run's settings (`training.run.Training`):
    the recipe, the data, the run's options, the run directory (`--output-dir`) and how the
    recipe was given."""

    recipe: Recipe
    data: TrainingData
    options: RunOptions
    output_dir: str
    recipe_origin: str


class PairFlags(NamedTuple):
    """`trainers.arguments.add_pair_arguments`' options as given: the (name, source file,
    target file) of each `--pair`, `--dev-pair` and `--test-pair`, `--pair-temperature`,
    `--language-token`, and the data flags given besides them (`--train-src`, `--tfds`, ...)."""

    pair: list[list[str]]
    dev_pair: list[list[str]]
    test_pair: list[list[str]]
    pair_temperature: Optional[float]
    language_token: Optional[str]
    others: list[str]


def pair_settings(parser: argparse.ArgumentParser, flags: PairFlags, init_from: Optional[str]
                  ) -> dict:
    """Checks the pair options `flags` (exiting through `parser.error` naming the flag) and
    returns `TrainingData`'s fields of them: `language_pairs` (the `LanguagePair` of each
    `--pair`, in order), `pair_files` (pair name -> split -> [source file, target file]) and,
    with pairs, `pair_temperature` and `language_token`, resolved."""
    language_pairs, pair_files = [], {}
    if not flags.pair and many_to_many_languages(init_from) is not None:
        parser.error(f"--init-from: {init_from!r} translates between many languages, each "
                     "sentence pair asked for by both its languages: give the new pairs with "
                     "--pair SRC-TGT TRAIN.SRC TRAIN.TGT and --dev-pair (the model's codes, "
                     "e.g. eng_Latn-fra_Latn)")
    if not flags.pair:
        for flag in ("dev_pair", "test_pair", "pair_temperature", "language_token"):
            if getattr(flags, flag) not in (None, []):
                parser.error(f"--{flag.replace('_', '-')}: only with --pair")
        return {}
    many_to_many = many_to_many_languages(init_from)
    if init_from and many_to_many is None:
        parser.error("--pair: with --init-from only of a model of many languages that reads "
                     "both (an imported NLLB-200 or M2M-100 model); fine-tune another on one "
                     "pair's --train-src/--train-tgt, --dev-src/--dev-tgt")
    if many_to_many is not None and flags.language_token not in (None, "target"):
        parser.error(f"--language-token: {init_from!r} reads its languages' tokens where "
                     "it was trained (the target language's first in the target)")
    if flags.others:
        parser.error(f"--pair: cannot be combined with {', '.join(flags.others)} (give each "
                     "pair's files with --pair, --dev-pair and --test-pair)")
    for flag, split in (("pair", "train"), ("dev_pair", "dev"), ("test_pair", "test")):
        for name, source, target in getattr(flags, flag):
            option = f"--{flag.replace('_', '-')} {name}"
            try:
                pair = LanguagePair.parse(name)
            except ValueError as error:
                parser.error(f"{option}: {error}")
            if many_to_many is not None:
                pair = model_pair(parser, option, pair, many_to_many)
                name = pair.name
            if split == "train":
                if name in pair_files:
                    parser.error(f"{option}: given twice")
                language_pairs.append(pair)
                pair_files[name] = {}
            elif name not in pair_files:
                parser.error(f"{option}: no --pair {name} to evaluate")
            elif split in pair_files[name]:
                parser.error(f"{option}: given twice")
            pair_files[name][split] = [source, target]
    missing = [name for name, files in pair_files.items() if "dev" not in files]
    if missing:
        parser.error(f"--dev-pair: missing for {', '.join(missing)} (each pair is scored on "
                     "its own dev set)")
    temperature = 1.0 if flags.pair_temperature is None else flags.pair_temperature
    if not temperature > 0:
        parser.error(f"--pair-temperature: must be positive, got {temperature}")
    return {"language_pairs": tuple(language_pairs), "pair_files": pair_files,
            "pair_temperature": temperature,
            "language_token": flags.language_token or PLACEMENTS[0]}


def many_to_many_languages(path: Optional[str]) -> Optional[RunLanguages]:
    """The languages of the `--init-from` run `path` when its model reads both a source and a
    target language (`RunLanguages.source_language_token`: an imported NLLB-200 or M2M-100
    model), which `--pair` fine-tunes on pairs of its languages; else None."""
    if not path or not RunDir(path).config_path.is_file():
        return None
    languages = RunDir(path).languages()
    return languages if languages is not None and languages.source_language_token else None


def model_pair(parser: argparse.ArgumentParser, option: str, pair: LanguagePair,
               languages: RunLanguages) -> LanguagePair:
    """`pair` in the model's codes (`languages`): each language its code, or the one code an
    alias names (`eng` for `eng_Latn`, as `--source-language` takes it); exits through
    `parser.error` naming `option` when a language names none of the model's, or several."""
    codes = []
    for language in (pair.source, pair.target):
        try:
            code = languages.code(language)
        except ValueError as error:
            parser.error(f"{option}: {error}")
        if code not in languages.token_ids:
            parser.error(f"{option}: {language!r} is not a language of the model "
                         f"({', '.join(sorted(languages.token_ids))})")
        codes.append(code)
    return LanguagePair(*codes)


def parse_args(argv: Optional[Sequence[str]] = None) -> TrainCommand:
    """Parses and cross-checks the options (every error names its flag) into the training
    run's settings."""
    parser = train_parser()
    args = parser.parse_args(argv)
    check_init_from(parser, args.init_from)  # a path that is no run first, before its rules
    pairs = pair_settings(parser, PairFlags(
        args.pair, args.dev_pair, args.test_pair, args.pair_temperature, args.language_token,
        [flag for flag, given in (
            ("--train-src", args.train_src), ("--train-tgt", args.train_tgt),
            ("--dev-src", args.dev_src), ("--dev-tgt", args.dev_tgt),
            ("--test-src", args.test_src), ("--test-tgt", args.test_tgt), ("--tfds", args.tfds),
            ("--prepared", args.prepared), ("--task parsing", args.task == "parsing"))
         if given]), args.init_from)
    given = vars(args)
    data = TrainingData(train_src=tuple(args.train_src or ()),
                        train_tgt=tuple(args.train_tgt or ()),
                        alignments=tuple(args.alignments or ()), **pairs,
                        **{name: given[name] for name in DATA_FLAGS})
    check_data(parser, data, args.task)
    options = RunOptions(export=not args.no_export, **{name: given[name] for name in RUN_FLAGS})
    check_run_options(parser, options)
    try:
        recipe = (fine_tuning_recipe(args.init_from, args.config, args.overrides, argv)
                  if args.init_from else preset_recipe(args.preset, args.config, args.overrides))
    except (ValueError, FileNotFoundError) as error:
        parser.error(str(error))
    return TrainCommand(recipe, data, options, args.output_dir, f"--preset {args.preset}")


def check_data(parser: argparse.ArgumentParser, data: TrainingData, task: str) -> None:
    """Checks the data options `data` of a run of `--task` `task` against each other,
    exiting through `parser.error` naming the flag."""
    local = {"train-src": data.train_src, "train-tgt": data.train_tgt,
             **{f"{split}-{side}": getattr(data, f"{split}_{side}")
                for split in ("dev", "test") for side in ("src", "tgt")}}
    if data.tfds and any(local.values()):
        parser.error("--tfds: cannot be combined with local files (--train-src, ...)")
    if data.prepared:
        if data.tfds or local["train-src"] or not local["dev-src"]:
            parser.error("--prepared: replaces --train-src/--train-tgt and --tfds; give "
                         "--dev-src/--dev-tgt (and optionally --test-src/--test-tgt)")
        local["train-src"] = local["train-tgt"] = data.prepared
    for split in ("train", "dev", "test"):
        if bool(local[f"{split}-src"]) != bool(local[f"{split}-tgt"]):
            parser.error(f"--{split}-src and --{split}-tgt: give both or neither")
    if data.train_src and len(data.train_src) != len(data.train_tgt):
        parser.error(f"--train-src and --train-tgt: {len(data.train_src)} source file(s) for "
                     f"{len(data.train_tgt)} target file(s) (one of each per corpus)")
    if any(local.values()) and not (local["train-src"] and local["dev-src"]):
        parser.error("--train-src/--dev-src: local data needs at least train and dev files")
    if data.alignments:
        if data.prepared or data.tfds or data.language_pairs or not data.train_src:
            parser.error("--alignments: only with --train-src/--train-tgt (the word "
                         "alignments of their lines)")
        if len(data.alignments) != len(data.train_src):
            parser.error(f"--alignments: {len(data.alignments)} file(s) for "
                         f"{len(data.train_src)} --train-src corpora (one per corpus)")
    if task == "parsing":
        if data.tfds or not local["train-src"]:
            parser.error("--task parsing: needs local files (--train-src ... from "
                         "prepare_parsing), not --tfds or the demo corpus")
        if bool(data.test_tree) != bool(local["test-src"]):
            parser.error("--task parsing: --test-tree and --test-src go together (the gold "
                         "trees of the test sentences)")
    elif data.test_tree:
        parser.error("--test-tree: only with --task parsing")
    if data.test_tree and not os.path.isfile(data.test_tree):
        parser.error(f"--test-tree: no such file {data.test_tree!r}")
    if data.vocab_sentences <= 0:
        parser.error(f"--vocab-sentences: must be positive, got {data.vocab_sentences}")
    if len(data.tfds_splits.split(",")) != 3:
        parser.error("--tfds-splits: expected three comma-separated names train,dev,test")


def check_run_options(parser: argparse.ArgumentParser, options: RunOptions) -> None:
    """Checks the run's `options` (each positive or non-negative, the step counts multiples of
    `--steps-per-execution`, LoRA's with `--init-from`), exiting through `parser.error`
    naming the flag."""
    if options.steps is not None and options.epochs is not None:
        parser.error("--steps and --epochs: give one, not both")
    for name in ("steps", "epochs", "max_minutes", "eval_every", "eval_sentences",
                 "eval_beam_size", "backup_every", "eval_every_minutes", "backup_every_minutes",
                 "checkpoint_every_steps", "checkpoint_every_minutes", "keep_checkpoints",
                 "test_beam_size", "alignment_weight"):
        value = getattr(options, name)
        if value is not None and value <= 0:
            parser.error(f"--{name.replace('_', '-')}: must be positive, got {value}")
    for name in ("cpu_replicas", "attention_sentences", "progress_seconds", "log_every_steps"):
        if getattr(options, name) < 0:
            parser.error(f"--{name.replace('_', '-')}: must be non-negative")
    if options.steps_per_execution < 1:
        parser.error("--steps-per-execution: must be positive")
    for name in ("steps", "eval_every", "backup_every"):
        value = getattr(options, name)
        if value is not None and value % options.steps_per_execution:
            parser.error(f"--{name.replace('_', '-')}: {value} is not a multiple of "
                         f"--steps-per-execution {options.steps_per_execution}")
    if options.cpu_replicas and os.environ.get("TF_CONFIG"):
        parser.error("--cpu-replicas: cannot be combined with TF_CONFIG (multi-worker)")
    check_lora_arguments(parser, options.lora_rank, options.lora_alpha, options.init_from)


# The flags whose values are `TrainingData`'s and `RunOptions`' fields of the same names.
DATA_FLAGS = ("dev_src", "dev_tgt", "test_src", "test_tgt", "test_tree", "prepared", "tfds",
              "tfds_splits", "tfds_data_dir", "source_lang", "target_lang", "vocab_sentences")
RUN_FLAGS = ("seed", "precision", "kernels", "cpu_replicas", "jit_compile",
             "steps_per_execution", "init_from", "lora_rank", "lora_alpha", "steps", "epochs",
             "max_minutes", "eval_every", "eval_every_minutes", "eval_sentences",
             "eval_beam_size", "attention_sentences", "backup_every", "backup_every_minutes",
             "checkpoint_every_steps", "checkpoint_every_minutes", "keep_checkpoints",
             "log_every_steps", "progress_seconds", "log_batches", "test_beam_size",
             "export_name", "export_dir", "alignment_weight")


def check_lora_arguments(parser: argparse.ArgumentParser, rank: Optional[int],
                         alpha: Optional[float], init_from: Optional[str]) -> None:
    """Checks `--lora-rank` `rank` and `--lora-alpha` `alpha` (with `--init-from`
    `init_from`), exiting through `parser.error` naming the flag."""
    if rank is None:
        if alpha is not None:
            parser.error("--lora-alpha: only with --lora-rank")
        return
    if not init_from:
        parser.error("--lora-rank: only with --init-from RUN_DIR (LoRA fine-tunes a trained "
                     "model's weights)")
    if rank < 1:
        parser.error(f"--lora-rank: must be positive, got {rank}")
    if alpha is not None and not alpha > 0:
        parser.error(f"--lora-alpha: must be positive, got {alpha}")


def check_init_from(parser: argparse.ArgumentParser, path: Optional[str]) -> None:
    """Checks `--init-from` `path` (exiting through `parser.error` naming the flag): a run
    directory (kt-train's or kt-import's: `config.json` and `vocab/`), not a released model's
    folder (pointed to `kt-import`), and not a model whose target-language tokens are required
    (a run of several pairs: fine-tuned on one pair's files, the others' would be lost)."""
    if not path:
        return
    if not os.path.exists(path):
        parser.error(f"--init-from: {path!r} does not exist")
    run = RunDir(path)
    if not (run.config_path.is_file() and run.vocab.is_dir()):
        released = any(os.path.isfile(os.path.join(path, name)) for name in RELEASE_FILES)
        parser.error(f"--init-from: {path!r} is not a run directory (no config.json and vocab/"
                     " of kt-train or kt-import)" + (
                         f"; it holds a released model: import it first (kt-import {path} "
                         "--output-dir runs/NAME), then --init-from runs/NAME" if released
                         else ""))
    languages = run.languages()
    if languages is not None and not (languages.optional or languages.source_language_token):
        parser.error(f"--init-from: {path!r} translates into several languages "
                     f"({', '.join(sorted(languages.token_ids))}), each asked for by its token; "
                     "fine-tuning it on --train-src/--train-tgt would keep none: fine-tuning a "
                     "model of several languages is not supported yet")


# A Marian release's or a Hugging Face folder's files (`kt-import` reads them).
RELEASE_FILES = ("decoder.yml", "model.safetensors", "model.safetensors.index.json",
                 "pytorch_model.bin")


def fine_tuning_recipe(init_from: str, config: Optional[str], overrides: list[str],
                       argv: Optional[Sequence[str]]) -> Recipe:
    """`--init-from` `init_from`'s recipe for fine-tuning (`Recipe.for_fine_tuning`) with
    `--config` `config` and the `--set` `overrides`; a `--preset`, `--vocab-sentences` or
    `--prepared` (another vocabulary) in `argv` is refused, as is a field that would change
    the model."""
    given = {word.split("=", 1)[0] for word in (sys.argv[1:] if argv is None else argv)}
    refused = sorted(given & {"--preset", "--vocab-sentences", "--prepared"})
    if refused:
        raise ValueError(f"--init-from: cannot be combined with {', '.join(refused)} (the "
                         "run's architecture and vocabulary are kept)")
    source = RunDir(init_from).load_recipe()
    try:
        return source.for_fine_tuning(**recipe_overrides(config, overrides))
    except ValueError as error:
        raise ValueError(f"--init-from {init_from}: --set/--config {error}") from None
