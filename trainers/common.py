"""Command-line pieces shared by the trainers: the recipe, search settings and run directory."""
from __future__ import annotations

import argparse
import dataclasses
import itertools
import json
import os
from pathlib import Path
from typing import Any, Iterator, Optional

import keras_transformer  # noqa: F401  (selects the TensorFlow backend before keras loads)
from keras_transformer import fast
from keras_transformer.config import PRESETS, Recipe, SearchSettings
from keras_transformer.data.languages import RunLanguages
from keras_transformer.data.prepare import ParallelSource, sample_sentences
from keras_transformer.data.sentencepiece_pair import load_tokenizer, vocabulary_pieces
from keras_transformer.data.tokenizer import SubwordTokenizer
from keras_transformer.model import Transformer
from keras_transformer.serving.ctranslate2_export import is_ctranslate2_model
from keras_transformer.serving.text_translation import chosen_language, chosen_source_language
from keras_transformer.training.loaded_run import chosen_model, load_run
from keras_transformer.training.progress import CountProgress, stage
from keras_transformer.training.run_dir import RunDir


# kt-train's and kt-prepare's: storage prepared with the defaults trains with the defaults.
DEFAULT_PRESET = "tiny"


def command_description(docstring: str) -> str:
    """A command's `--help` description: the first paragraph of its module's `docstring`, its
    lines joined (a summary may take more than one line)."""
    return " ".join(docstring.strip().split("\n\n")[0].split())


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


def add_recipe_arguments(parser: argparse.ArgumentParser) -> None:
    """`--preset` (default `DEFAULT_PRESET`), `--config FILE.json` and repeated `--set
    key=value` (applied in that order)."""
    parser.add_argument("--preset", default=DEFAULT_PRESET, choices=sorted(PRESETS),
                        help=f"named recipe: architecture, training and search settings "
                             f"(default: {DEFAULT_PRESET})")
    parser.add_argument("--config", metavar="FILE.json",
                        help="JSON object of recipe fields overriding the preset")
    parser.add_argument("--set", dest="overrides", action="append", default=[],
                        metavar="KEY=VALUE", help="override one recipe field (repeatable)")


def recipe_from_args(args: argparse.Namespace) -> Recipe:
    """The preset, then the `--config` file's fields, then each `--set`."""
    try:
        return Recipe.preset(args.preset, **recipe_overrides(args))
    except (TypeError, ValueError) as error:
        raise ValueError(f"config: {error}") from None


def recipe_overrides(args: argparse.Namespace) -> dict[str, Any]:
    """The recipe fields `--config` and then each `--set` give, typed."""
    values: dict[str, Any] = {}
    if args.config:
        path = Path(args.config)
        try:
            loaded = json.loads(path.read_text(encoding="utf-8"))
            values.update({key: typed_value(key, value, f"--config {args.config!r}")
                           for key, value in loaded.items()})
        except OSError as error:
            raise ValueError(f"--config: cannot read {args.config!r}: {error.strerror}") from None
        except (json.JSONDecodeError, AttributeError) as error:
            raise ValueError(f"--config: {args.config!r} is not a JSON object ({error})") from None
    for item in args.overrides:
        key, separator, text = item.partition("=")
        if not separator or not key:
            raise ValueError(f"--set: expected KEY=VALUE, got {item!r}")
        values[key.strip()] = typed_value(key.strip(), parse_value(text), f"--set {item!r}")
    return values


def parse_value(text: str) -> Any:
    """`--set` values: JSON scalars (`0.1`, `4`, `true`, `null`), else the plain string."""
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


def typed_value(field: str, value: Any, source: str) -> Any:
    """`value` checked against the type of the recipe field's default (ints widen to float)."""
    try:
        default = Recipe.field_default(field)
    except KeyError:
        return value  # unknown fields are reported by Recipe.from_dict
    if default is None or value is None:
        return value
    expected = type(default)
    if expected is float and type(value) is int:
        return float(value)
    if type(value) is not expected:
        raise ValueError(f"{source}: {field} must be a {expected.__name__}, got {value!r}")
    return value


def set_up_kernels(recorded: Optional[str] = None, requested: Optional[str] = None) -> str:
    """Selects the kernel set a command that loads a model (to decode, score, export or plot
    it) builds it under, and returns it: `requested` (default `$KT_KERNELS`, else auto); for
    auto, the set the run `recorded`, else the reference set. Nothing is measured: the kernel
    sets differ in training only, and a search runs the references under either
    (`hooks.references`)."""
    requested = fast.selection.validate(
        requested or os.environ.get(fast.selection.ENVIRONMENT_VARIABLE, "auto"))
    if requested != "auto":
        return fast.set_kernels(requested)
    return fast.set_kernels(recorded if recorded in fast.KERNEL_SETS else fast.REFERENCE)


def run_model(run_dir: str, weights: Optional[str] = None) -> Transformer:
    """The model of a run directory holding `weights` (`--weights`; default: the run's
    choice, `RunDir.default_weights`), built under the kernel set the run trained with
    (`set_up_kernels`)."""
    _set_up_run_kernels(run_dir, weights)
    return chosen_model(run_dir, weights)[0]


def _set_up_run_kernels(run_dir: str, weights: Optional[str]) -> None:
    """Checks that `weights` (`--weights`) exists, then selects the kernel set the run
    trained with (`set_up_kernels`), before its model is built."""
    if weights and not Path(weights).is_file():
        raise FileNotFoundError(f"--weights: no such file {weights!r}")
    run = RunDir(run_dir)
    set_up_kernels(run.recorded_options().get("kernels"))


def add_weights_argument(parser: argparse.ArgumentParser, run_directory_only: bool) -> None:
    """`--weights FILE`, with its default (`RunDir.default_weights`) in its help;
    `run_directory_only`: the command also takes exports, which have no weights to choose."""
    parser.add_argument("--weights", metavar="FILE",
                        help=("with a run directory: " if run_directory_only else "")
                        + "a .weights.h5 file (default: the weights the run's result.json "
                        "chose, the better on dev of the averaged and the final ones; without "
                        "one, the averaged weights, else the final weights, else the newest "
                        "checkpoint)")


def load_run_model(run_dir: str, weights: Optional[str] = None
                   ) -> tuple[Transformer, SubwordTokenizer]:
    """`run_model` and the run's tokenizer (`kt.load_run`)."""
    _set_up_run_kernels(run_dir, weights)
    loaded = load_run(run_dir, weights)
    return loaded.model, loaded.tokenizer


def add_target_language_argument(parser: argparse.ArgumentParser) -> None:
    """`--target-language LANG`: what a model of several target languages translates into;
    `--source-language LANG`: what a model that reads it (NLLB-200, M2M-100) translates from."""
    parser.add_argument("--target-language", metavar="LANG",
                        help="the language to translate into (e.g. de): required by a model "
                             "trained on several language pairs (kt-train --pair) and its "
                             "exports; a run imported from a multi-target OPUS-MT model, and "
                             "its exports, take it as its >>LANG<< token (e.g. fra), first in "
                             "each line in place of a line's own, or go without it (each line "
                             "as it is); an imported NLLB-200 or M2M-100 model takes its "
                             "codes (eng_Latn, or en) or an unambiguous ISO 639-3 code (eng); "
                             "refused by other models")
    parser.add_argument("--source-language", metavar="LANG",
                        help="the language translated from: required by an imported NLLB-200 "
                             "or M2M-100 model and its exports (e.g. eng_Latn, or eng; en for "
                             "M2M-100), refused by other models")


def add_tfds_language_arguments(parser: argparse.ArgumentParser) -> None:
    """`--tfds-source-language` and `--tfds-target-language` (on `parser` or one of its
    argument groups): the tensorflow-datasets features translated from and into, parsed as
    `source_lang` and `target_lang` (`load_tfds`'s names, and the keys a run's `run.json`
    records); `--source-lang`/`--target-lang`, their earlier spelling, are still read."""
    for side, default in (("source", "en"), ("target", "de")):
        parser.add_argument(f"--tfds-{side}-language", dest=f"{side}_lang", default=default,
                            metavar="LANG",
                            help=f"tensorflow-datasets {side} language (default: {default})")
        parser.add_argument(f"--{side}-lang", dest=f"{side}_lang", default=argparse.SUPPRESS,
                            help=argparse.SUPPRESS)


def run_target_language(run_dir: str, language: Optional[str],
                        source_language: Optional[str] = None
                        ) -> tuple[Optional[RunLanguages], Optional[str], Optional[str]]:
    """The run directory's target languages (`RunDir.languages`: of a run of several pairs,
    or of a model imported from a multi-target Marian, NLLB-200 or M2M-100 model; None for a
    model of one), `language` (`--target-language`) checked against them (`chosen_language`:
    "" for an imported model's optional language left out) and `source_language`
    (`--source-language`, `chosen_source_language`: None for a model that reads none)."""
    languages = RunDir(run_dir).languages()
    return (languages, chosen_language(languages, language, repr(run_dir)),
            chosen_source_language(languages, source_language, repr(run_dir)))


def add_ensemble_argument(parser: argparse.ArgumentParser) -> None:
    """`--ensemble RUN_DIR ...`: runs whose models decode together with the main one."""
    parser.add_argument("--ensemble", nargs="+", default=[], metavar="RUN_DIR",
                        help="further run directories (same vocabulary) whose models' "
                             "probabilities the search averages with the run's (their "
                             "default weights)")


def load_ensemble(run_dirs: list[str], tokenizer: SubwordTokenizer) -> list[Transformer]:
    """The models of `run_dirs` (`--ensemble`), each checked to share `tokenizer`'s source and
    target pieces (`vocabulary_pieces`; ValueError naming the run whose vocabulary differs)."""
    pieces = vocabulary_pieces(tokenizer)
    models = []
    for run_dir in run_dirs:
        own = load_tokenizer(RunDir(run_dir).vocab)  # checked before loading weights
        if vocabulary_pieces(own) != pieces:
            raise ValueError(f"--ensemble: {run_dir!r} has another vocabulary than the run's "
                             "(an ensemble needs the same source and target pieces)")
        models.append(run_model(run_dir))
    return models


# Each search setting's one command-line name, and the spelling earlier versions accepted.
_SEARCH_FLAGS = {"beam_size": ("--beam-size", None),
                 "length_penalty": ("--length-penalty", "--alpha"),
                 "max_decode_extra": ("--max-decode-extra", "--extra-length"),
                 "temperature": ("--temperature", None),
                 "top_k": ("--top-k", None),
                 "top_p": ("--top-p", None),
                 "sampling_seed": ("--seed", None)}
_SAMPLING_FIELDS = ("temperature", "top_k", "top_p")


def add_search_arguments(parser: argparse.ArgumentParser, what: str) -> None:
    """`--beam-size`, `--length-penalty` and `--max-decode-extra`, and sampling's
    `--temperature`, `--top-k`, `--top-p` and `--seed` (`SearchSettings`), each defaulting to
    the run's recipe's; `what` says what they apply to."""
    types = {"beam_size": int, "length_penalty": float, "max_decode_extra": int,
             "temperature": float, "top_k": int, "top_p": float, "sampling_seed": int}
    helps = {"beam_size": "beam size (1 = greedy)",
             "length_penalty": "length penalty alpha",
             "max_decode_extra": "output tokens allowed beyond the source length",
             "temperature": "sample instead of searching (as do --top-k and --top-p), from "
                            "the softmax at this temperature",
             "top_k": "sample among the K most likely tokens (0: all)",
             "top_p": "sample within the most likely tokens of this total probability",
             "sampling_seed": "sampling seed (the same seed gives a sentence the same "
                              "translation in any batch)"}
    for field, (flag, old_flag) in _SEARCH_FLAGS.items():
        parser.add_argument(flag, dest=field, type=types[field],
                            help=f"{helps[field]} {what} (default: the recipe's {field})")
        if old_flag:
            parser.add_argument(old_flag, dest=field, type=types[field], help=argparse.SUPPRESS)


def given_search_flags(args: argparse.Namespace) -> list[str]:
    """The search flags given on the command line."""
    return [flag for field, (flag, _) in _SEARCH_FLAGS.items()
            if getattr(args, field) is not None]


def is_run_directory(model: str) -> bool:
    """Whether `model` (a command's model argument) is a run directory, not an export."""
    return (Path(model) / "config.json").is_file() and not is_ctranslate2_model(model)


def check_export_flags(args: argparse.Namespace) -> None:
    """Refuses (ValueError naming them) the search flags, `--weights` and `--ensemble` with an
    export, whose weights and search are fixed."""
    given = given_search_flags(args) + [flag for flag, value in (
        ("--weights", args.weights), ("--ensemble", args.ensemble)) if value]
    if given:
        raise ValueError(f"{' and '.join(given)}: an export's weights and search settings are "
                         "fixed when it is written; export again (kt-export ... --beam-size K) "
                         "or translate from the run directory")


def search_settings(args: argparse.Namespace, defaults: SearchSettings) -> SearchSettings:
    """The `SearchSettings` of `add_search_arguments`' flags over `defaults` (any sampling flag
    turns sampling on); a bad value is a ValueError naming its flag."""
    sampling = any(getattr(args, field) is not None for field in _SAMPLING_FIELDS)
    if args.sampling_seed is not None and not (sampling or defaults.sampling):
        raise ValueError("--seed: only for sampling (give --temperature, --top-k or --top-p)")
    try:
        return SearchSettings.of(defaults, **{field: getattr(args, field)
                                              for field in _SEARCH_FLAGS},
                                 sampling=True if sampling else None)
    except ValueError as error:
        field, message = str(error).split(": ", 1)
        raise ValueError(f"{_SEARCH_FLAGS[field][0]}: {message}") from None
