"""`kt-train`'s options (the grammar: `trainers.arguments.train_parser`): their
cross-checks, and the ones a restart must repeat."""
from __future__ import annotations

import argparse
import os
import sys
from typing import Optional, Sequence

from keras_transformer.config import PLACEMENTS, Recipe
from keras_transformer.data.languages import LanguagePair, RunLanguages
from keras_transformer.training.run_dir import RunDir
from trainers.arguments import DEFAULT_STEPS, train_parser
from trainers.common import recipe_from_args, recipe_overrides


def check_pair_arguments(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Checks `trainers.arguments.add_pair_arguments`' options (exiting through
    `parser.error` naming the flag) and sets `args.language_pairs` (the `LanguagePair` of each
    `--pair`, in order) and `args.pair_files` (pair name -> split -> (source file, target file))."""
    args.language_pairs, args.pair_files = [], {}
    if not args.pair and many_to_many_languages(args.init_from) is not None:
        parser.error(f"--init-from: {args.init_from!r} translates between many languages, each "
                     "sentence pair asked for by both its languages: give the new pairs with "
                     "--pair SRC-TGT TRAIN.SRC TRAIN.TGT and --dev-pair (the model's codes, "
                     "e.g. eng_Latn-fra_Latn)")
    if not args.pair:
        for flag in ("dev_pair", "test_pair", "pair_temperature", "language_token"):
            if getattr(args, flag) not in (None, []):
                parser.error(f"--{flag.replace('_', '-')}: only with --pair")
        return
    others = [flag for flag, given in (
        ("--train-src", args.train_src), ("--train-tgt", args.train_tgt),
        ("--dev-src", args.dev_src), ("--dev-tgt", args.dev_tgt), ("--test-src", args.test_src),
        ("--test-tgt", args.test_tgt), ("--tfds", args.tfds), ("--prepared", args.prepared),
        ("--task parsing", args.task == "parsing")) if given]
    many_to_many = many_to_many_languages(args.init_from)
    if args.init_from and many_to_many is None:
        parser.error("--pair: with --init-from only of a model of many languages that reads "
                     "both (an imported NLLB-200 or M2M-100 model); fine-tune another on one "
                     "pair's --train-src/--train-tgt, --dev-src/--dev-tgt")
    if many_to_many is not None and args.language_token not in (None, "target"):
        parser.error(f"--language-token: {args.init_from!r} reads its languages' tokens where "
                     "it was trained (the target language's first in the target)")
    if others:
        parser.error(f"--pair: cannot be combined with {', '.join(others)} (give each "
                     "pair's files with --pair, --dev-pair and --test-pair)")
    for flag, split in (("pair", "train"), ("dev_pair", "dev"), ("test_pair", "test")):
        for name, source, target in getattr(args, flag):
            option = f"--{flag.replace('_', '-')} {name}"
            try:
                pair = LanguagePair.parse(name)
            except ValueError as error:
                parser.error(f"{option}: {error}")
            if many_to_many is not None:
                pair = model_pair(parser, option, pair, many_to_many)
                name = pair.name
            if split == "train":
                if name in args.pair_files:
                    parser.error(f"{option}: given twice")
                args.language_pairs.append(pair)
                args.pair_files[name] = {}
            elif name not in args.pair_files:
                parser.error(f"{option}: no --pair {name} to evaluate")
            elif split in args.pair_files[name]:
                parser.error(f"{option}: given twice")
            args.pair_files[name][split] = [source, target]
    missing = [name for name, files in args.pair_files.items() if "dev" not in files]
    if missing:
        parser.error(f"--dev-pair: missing for {', '.join(missing)} (each pair is scored on "
                     "its own dev set)")
    if args.pair_temperature is None:
        args.pair_temperature = 1.0
    if not args.pair_temperature > 0:
        parser.error(f"--pair-temperature: must be positive, got {args.pair_temperature}")
    args.language_token = args.language_token or PLACEMENTS[0]


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


def parse_args(argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
    """Parses and cross-checks the options; every error names its flag."""
    parser = train_parser()
    args = parser.parse_args(argv)
    check_init_from(parser, args.init_from)  # a path that is no run first, before its rules
    check_pair_arguments(parser, args)
    local = {name: getattr(args, name.replace("-", "_")) for name in
             ("train-src", "train-tgt", "dev-src", "dev-tgt", "test-src", "test-tgt")}
    if args.tfds and any(local.values()):
        parser.error("--tfds: cannot be combined with local files (--train-src, ...)")
    if args.prepared:
        if args.tfds or local["train-src"] or not local["dev-src"]:
            parser.error("--prepared: replaces --train-src/--train-tgt and --tfds; give "
                         "--dev-src/--dev-tgt (and optionally --test-src/--test-tgt)")
        local["train-src"] = local["train-tgt"] = args.prepared
    for split in ("train", "dev", "test"):
        if bool(local[f"{split}-src"]) != bool(local[f"{split}-tgt"]):
            parser.error(f"--{split}-src and --{split}-tgt: give both or neither")
    if args.train_src and len(args.train_src) != len(args.train_tgt):
        parser.error(f"--train-src and --train-tgt: {len(args.train_src)} source file(s) for "
                     f"{len(args.train_tgt)} target file(s) (one of each per corpus)")
    if any(local.values()) and not (local["train-src"] and local["dev-src"]):
        parser.error("--train-src/--dev-src: local data needs at least train and dev files")
    if args.alignments:
        if args.prepared or args.tfds or args.language_pairs or not args.train_src:
            parser.error("--alignments: only with --train-src/--train-tgt (the word "
                         "alignments of their lines)")
        if len(args.alignments) != len(args.train_src):
            parser.error(f"--alignments: {len(args.alignments)} file(s) for "
                         f"{len(args.train_src)} --train-src corpora (one per corpus)")
    if args.alignment_weight <= 0:
        parser.error(f"--alignment-weight: must be positive, got {args.alignment_weight}")
    if args.task == "parsing":
        if args.tfds or not local["train-src"]:
            parser.error("--task parsing: needs local files (--train-src ... from "
                         "prepare_parsing), not --tfds or the demo corpus")
        if bool(args.test_tree) != bool(local["test-src"]):
            parser.error("--task parsing: --test-tree and --test-src go together (the gold "
                         "trees of the test sentences)")
    elif args.test_tree:
        parser.error("--test-tree: only with --task parsing")
    if args.test_tree and not os.path.isfile(args.test_tree):
        parser.error(f"--test-tree: no such file {args.test_tree!r}")
    if args.steps is not None and args.epochs is not None:
        parser.error("--steps and --epochs: give one, not both")
    positive = {"steps": args.steps, "epochs": args.epochs, "max_minutes": args.max_minutes,
                "eval_every": args.eval_every, "eval_sentences": args.eval_sentences,
                "eval_beam_size": args.eval_beam_size, "backup_every": args.backup_every,
                "eval_every_minutes": args.eval_every_minutes,
                "backup_every_minutes": args.backup_every_minutes,
                "checkpoint_every_steps": args.checkpoint_every_steps,
                "checkpoint_every_minutes": args.checkpoint_every_minutes,
                "keep_checkpoints": args.keep_checkpoints, "vocab_sentences": args.vocab_sentences,
                "test_beam_size": args.test_beam_size}
    for name, value in positive.items():
        if value is not None and value <= 0:
            parser.error(f"--{name.replace('_', '-')}: must be positive, got {value}")
    for name in ("cpu_replicas", "attention_sentences", "progress_seconds", "log_every_steps"):
        if getattr(args, name) < 0:
            parser.error(f"--{name.replace('_', '-')}: must be non-negative")
    if args.steps_per_execution < 1:
        parser.error("--steps-per-execution: must be positive")
    for name in ("steps", "eval_every", "backup_every"):
        value = getattr(args, name)
        if value is not None and value % args.steps_per_execution:
            parser.error(f"--{name.replace('_', '-')}: {value} is not a multiple of "
                         f"--steps-per-execution {args.steps_per_execution}")
    if args.cpu_replicas and os.environ.get("TF_CONFIG"):
        parser.error("--cpu-replicas: cannot be combined with TF_CONFIG (multi-worker)")
    if len(args.tfds_splits.split(",")) != 3:
        parser.error("--tfds-splits: expected three comma-separated names train,dev,test")
    if args.steps is None and args.epochs is None and args.max_minutes is None:
        args.steps = DEFAULT_STEPS
    check_lora_arguments(parser, args)
    try:
        args.recipe = (fine_tuning_recipe(args, argv) if args.init_from
                       else recipe_from_args(args))
    except (ValueError, FileNotFoundError) as error:
        parser.error(str(error))
    return args


def check_lora_arguments(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Checks `--lora-rank` and `--lora-alpha` (exiting through `parser.error` naming the
    flag) and resolves the alpha a run records: R when not given, so that a restart that
    spells out the default is the same run."""
    if args.lora_rank is None:
        if args.lora_alpha is not None:
            parser.error("--lora-alpha: only with --lora-rank")
        return
    if not args.init_from:
        parser.error("--lora-rank: only with --init-from RUN_DIR (LoRA fine-tunes a trained "
                     "model's weights)")
    if args.lora_rank < 1:
        parser.error(f"--lora-rank: must be positive, got {args.lora_rank}")
    if args.lora_alpha is None:
        args.lora_alpha = float(args.lora_rank)
    elif not args.lora_alpha > 0:
        parser.error(f"--lora-alpha: must be positive, got {args.lora_alpha}")


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


def fine_tuning_recipe(args: argparse.Namespace, argv: Optional[Sequence[str]]) -> Recipe:
    """`--init-from`'s recipe for fine-tuning (`Recipe.for_fine_tuning`) with `--config` and
    `--set`; a `--preset`, `--vocab-sentences` or `--prepared` (another vocabulary) is
    refused, as is a field that would change the model."""
    given = {word.split("=", 1)[0] for word in (sys.argv[1:] if argv is None else argv)}
    refused = sorted(given & {"--preset", "--vocab-sentences", "--prepared"})
    if refused:
        raise ValueError(f"--init-from: cannot be combined with {', '.join(refused)} (the "
                         "run's architecture and vocabulary are kept)")
    source = RunDir(args.init_from).load_recipe()
    try:
        return source.for_fine_tuning(**recipe_overrides(args))
    except ValueError as error:
        raise ValueError(f"--init-from {args.init_from}: --set/--config {error}") from None


def tfds_split_names(args: argparse.Namespace) -> dict[str, str]:
    """`--tfds-splits` as split ("train", "dev", "test") -> the dataset's split name."""
    return dict(zip(("train", "dev", "test"), args.tfds_splits.split(",")))


def run_options(args: argparse.Namespace) -> dict:
    """The options a restart must repeat: data, vocabulary, seed and the LoRA adapters' rank
    and alpha (not the step budget); `train` adds the resolved precision and kernel set
    (backups do not restore across loss scaling). Options that apply only to `--tfds` data (its
    languages and splits) are recorded for such runs only."""
    names = ("prepared", "dev_src", "dev_tgt", "tfds", "vocab_sentences", "seed", "init_from",
             "lora_rank", "lora_alpha")
    if args.tfds:
        names += ("source_lang", "target_lang", "tfds_splits")
    # One training corpus is recorded as a path, as before several could be given.
    corpora = {name: files[0] if files and len(files) == 1 else files
               for name, files in (("train_src", args.train_src), ("train_tgt", args.train_tgt))}
    # Several language pairs as a list: their order is the order of the shares drawn.
    pairs = ({"pairs": [{"name": name, **files} for name, files in args.pair_files.items()],
              "pair_temperature": args.pair_temperature,
              "language_token": args.language_token} if args.language_pairs else {})
    # Guided alignment, recorded for such runs only.
    guided = ({"alignments": args.alignments, "alignment_weight": args.alignment_weight}
              if args.alignments else {})
    return {**corpora, **{name: getattr(args, name) for name in names}, **pairs, **guided}
