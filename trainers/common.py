"""Command-line pieces shared by the trainers: the recipe, search settings and run directory."""
from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Optional

import keras_transformer  # noqa: F401  (selects the TensorFlow backend before keras loads)
from keras_transformer import fast
from keras_transformer.config import Recipe, SearchSettings
from keras_transformer.data.languages import RunLanguages, chosen_languages
from keras_transformer.data.sentencepiece_pair import load_tokenizer, vocabulary_pieces
from keras_transformer.data.tokenizer import SubwordTokenizer
from keras_transformer.model import Transformer
from keras_transformer.serving.ctranslate2_export import is_ctranslate2_model
from keras_transformer.training.loaded_run import chosen_model, load_run
from keras_transformer.training.run_dir import RunDir
from trainers.arguments import SEARCH_FLAGS


def preset_recipe(preset: str, config: Optional[str], overrides: list[str]) -> Recipe:
    """The `--preset` `preset`, then the `--config` file `config`'s fields, then each `--set`
    of `overrides`."""
    try:
        return Recipe.preset(preset, **recipe_overrides(config, overrides))
    except (TypeError, ValueError) as error:
        raise ValueError(f"config: {error}") from None


def recipe_overrides(config: Optional[str], overrides: list[str]) -> dict[str, Any]:
    """The recipe fields the `--config` file `config` and then each `--set` of `overrides`
    give, typed."""
    values: dict[str, Any] = {}
    if config:
        path = Path(config)
        try:
            # "utf-8-sig": a byte-order mark (as Windows editors write one) is no JSON
            loaded = json.loads(path.read_text(encoding="utf-8-sig"))
            values.update({key: typed_value(key, value, f"--config {config!r}")
                           for key, value in loaded.items()})
        except OSError as error:
            raise ValueError(f"--config: cannot read {config!r}: {error.strerror}") from None
        except (json.JSONDecodeError, AttributeError) as error:
            raise ValueError(f"--config: {config!r} is not a JSON object ({error})") from None
    for item in overrides:
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


def set_up_implementation(recorded: Optional[str] = None, requested: Optional[str] = None) -> str:
    """Selects the implementation a command that loads a model (to decode, score, export or plot
    it) builds it under, and returns it: `requested` (default `$KT_KERNELS`, else auto); for
    auto, the set the run `recorded`, else the reference set. Nothing is measured: the kernel
    sets differ in training only, and a search runs the references under either
    (`hooks.references`)."""
    requested = fast.selection.validate(
        requested or os.environ.get(fast.selection.IMPLEMENTATION_VARIABLE, "auto"))
    if requested != "auto":
        return fast.set_implementation(requested)
    return fast.set_implementation(recorded if recorded in fast.IMPLEMENTATIONS else fast.REFERENCE)


def run_model(run_dir: str, weights: Optional[str] = None) -> Transformer:
    """The model of a run directory holding `weights` (`--weights`; default: the run's
    choice, `RunDir.default_weights`), built under the implementation the run trained with
    (`set_up_implementation`)."""
    _set_up_run_kernels(run_dir, weights)
    return chosen_model(run_dir, weights)[0]


def _set_up_run_kernels(run_dir: str, weights: Optional[str]) -> None:
    """Checks that `weights` (`--weights`) exists, then selects the implementation the run
    trained with (`set_up_implementation`), before its model is built."""
    if weights and not Path(weights).is_file():
        raise FileNotFoundError(f"--weights: no such file {weights!r}")
    run = RunDir(run_dir)
    set_up_implementation(run.recorded_options().get("kernels"))


def load_run_model(run_dir: str, weights: Optional[str] = None
                   ) -> tuple[Transformer, SubwordTokenizer]:
    """`run_model` and the run's tokenizer (`kt.load_run`)."""
    _set_up_run_kernels(run_dir, weights)
    loaded = load_run(run_dir, weights)
    return loaded.model, loaded.tokenizer


def run_target_language(run_dir: str, language: Optional[str],
                        source_language: Optional[str] = None
                        ) -> tuple[Optional[RunLanguages], Optional[str], Optional[str]]:
    """The run directory's target languages (`RunDir.languages`: of a run of several pairs,
    or of a model imported from a multi-target Marian, NLLB-200 or M2M-100 model; None for a
    model of one), `language` (`--target-language`) and `source_language`
    (`--source-language`) checked against them (`chosen_languages`: "" for an imported
    model's optional language left out, None for a model that reads no source language)."""
    languages = RunDir(run_dir).languages()
    asked = chosen_languages(languages, language, source_language, repr(run_dir))
    return languages, asked.target, asked.source


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


_SAMPLING_FIELDS = ("temperature", "top_k", "top_p")


def is_run_directory(model: str) -> bool:
    """Whether `model` (a command's model argument) is a run directory, not an export."""
    return (Path(model) / "config.json").is_file() and not is_ctranslate2_model(model)


@dataclass(frozen=True)
class ModelFlags:
    """A translating command's model options as given: `model` (a run directory or an
    export), `weights` (`--weights`), `ensemble` (`--ensemble`'s run directories), `search`
    (the search flags given, `arguments.given_search_flags`), `target_language` and
    `source_language` (`--target-language`, `--source-language`) and `threads` (an export's,
    `--threads`)."""

    model: str
    weights: Optional[str]
    ensemble: list[str]
    search: dict[str, Any]
    target_language: Optional[str]
    source_language: Optional[str]
    threads: int


def check_export_flags(flags: ModelFlags) -> None:
    """Refuses (ValueError naming them) the search flags, `--weights` and `--ensemble` among
    `flags` with an export, whose weights and search are fixed."""
    given = [SEARCH_FLAGS[field][0] for field in flags.search] + [flag for flag, value in (
        ("--weights", flags.weights), ("--ensemble", flags.ensemble)) if value]
    if given:
        raise ValueError(f"{' and '.join(given)}: an export's weights and search settings are "
                         "fixed when it is written; export again (kt-export ... --beam-size K) "
                         "or translate from the run directory")


def search_settings(given: Mapping[str, Any], defaults: SearchSettings) -> SearchSettings:
    """The `SearchSettings` of the search flags `given` (`arguments.given_search_flags`) over
    `defaults` (any sampling flag turns sampling on); a bad value is a ValueError naming its
    flag."""
    sampling = any(field in given for field in _SAMPLING_FIELDS)
    if "sampling_seed" in given and not (sampling or defaults.sampling):
        raise ValueError("--seed: only for sampling (give --temperature, --top-k or --top-p)")
    try:
        return SearchSettings.of(defaults, **given, sampling=True if sampling else None)
    except ValueError as error:
        field, message = str(error).split(": ", 1)
        raise ValueError(f"{SEARCH_FLAGS[field][0]}: {message}") from None
