"""A run directory: `config.json` (the `Recipe`), `vocab/`, `checkpoints/`, `backup/`,
`tensorboard/`, and the run's result: as in the paper (6.1), the last checkpoints averaged and
whichever of the average and the final weights scores better on dev (`result.json`).

A directory belongs to one configuration: restarting it with another one is refused rather
than mixing two runs' weights, optimizer state and logs.
"""
from __future__ import annotations

import contextlib
import json
import os
import tempfile
from pathlib import Path
from typing import Any, Callable, ContextManager, Optional

import keras

from keras_transformer.data.atomic_files import write_atomic
from keras_transformer.config import Recipe
from keras_transformer.data.languages import RunLanguages
from keras_transformer.training.checkpoints import (average_weights, checkpoints_to_average,
                                                    list_checkpoints, load_weights_file,
                                                    save_weights_atomic)

CONFIG_FILE = "config.json"
RUN_FILE = "run.json"
# which weights a finished run chose (`keep_better_of_average_and_final`)
RESULT_FILE = "result.json"
TEST_FILE = "test.json"  # the figures of kt-train's final test pass
LEFT_OUT_FILE = "left_out.json"  # the training pairs not trained on (`prepare.left_out`)
IMPORT_FILE = "import.json"  # where an imported model came from (`importing.run_directory`)
LANGUAGES_FILE = "languages.json"  # a model of several target languages (`RunLanguages`)


class RunDir:
    """Paths of one training run."""

    def __init__(self, root: str | os.PathLike):
        self.root = Path(root)

    @property
    def config_path(self) -> Path:
        return self.root / CONFIG_FILE

    @property
    def vocab(self) -> Path:
        return self.root / "vocab"

    @property
    def checkpoints(self) -> Path:
        return self.root / "checkpoints"

    @property
    def backup(self) -> Path:
        return self.root / "backup"

    @property
    def tensorboard(self) -> Path:
        return self.root / "tensorboard"

    @property
    def final_weights(self) -> Path:
        return self.root / "model.weights.h5"

    @property
    def averaged_weights(self) -> Path:
        return self.root / "averaged.weights.h5"

    def default_weights(self) -> Path:
        """The weights evaluation and export use unless told otherwise: the run's result as
        `result.json` records it (the better on dev of the averaged and the final weights),
        else the averaged weights if any, else the final weights, else the newest checkpoint."""
        return self.chosen_weights()[0]

    def chosen_weights(self) -> tuple[Path, str]:
        """`default_weights` and why they were chosen (a phrase naming the rule that chose
        them)."""
        results = self.recorded_results()
        recorded = results.get("weights")
        if recorded and (self.root / recorded).is_file():
            if recorded == self.averaged_weights.name and "averaged" in results.get(
                    "dev_bleu", {}) and results["dev_bleu"]["averaged"] is None:
                return self.root / recorded, f"{RESULT_FILE}: the averaged weights, averaged " \
                    "again after the run (not scored on dev)"
            return self.root / recorded, f"{RESULT_FILE}: the better on dev of the averaged " \
                "and the final weights"
        for candidate, why in ((self.averaged_weights, "the averaged weights"),
                               (self.final_weights, "the final weights")):
            if candidate.is_file():
                return candidate, f"{why} (no {RESULT_FILE} naming the run's result)"
        checkpoints = list_checkpoints(self.checkpoints)
        if not checkpoints:
            raise FileNotFoundError(f"run directory: no weights in {str(self.root)!r}")
        return checkpoints[-1], "the newest checkpoint (no final or averaged weights)"

    def recorded_results(self) -> dict[str, Any]:
        """What a finished run recorded: `result.json` (the weights chosen, their dev BLEU)
        with, under "test", `test.json` (the final test pass's figures); {} for a run that
        wrote neither."""
        result = _read_json(self.root / RESULT_FILE) or {}
        test = _read_json(self.root / TEST_FILE)
        return {**result, "test": test} if test is not None else result

    def provenance(self, weights: str | os.PathLike | None = None) -> dict[str, Any]:
        """The facts of this run an export of it records (`keras_transformer.serving.provenance`):
        its path, the weights used (`weights` if given, else `chosen_weights`) and why, its
        recorded results and the training precision, and for a model imported from elsewhere
        (`import.json`) its format, origin and the files read with their SHA-256 digests."""
        if weights:
            chosen, why = Path(weights), "given (--weights)"
        else:
            chosen, why = self.chosen_weights()
        results = self.recorded_results()
        record = {"run_dir": os.path.abspath(self.root), "weights": os.path.abspath(chosen),
                  "weights_reason": why, "dev_bleu": results.get("dev_bleu"),
                  "averaged_checkpoints": results.get("averaged"), "test": results.get("test"),
                  "training_precision": self.recorded_options().get("precision")}
        imported = _read_json(self.root / IMPORT_FILE)
        if imported is not None:
            record["imported_from"] = {key: imported.get(key)
                                       for key in ("format", "origin", "files")}
            if imported.get("licence"):  # what the model card states (NLLB-200: non-commercial)
                record["imported_from"]["licence"] = imported["licence"]
        return record

    def check_writable(self) -> None:
        """Proves a file can be written in the directory or, while it does not exist, in its
        nearest existing parent (which it will be created in); creates nothing."""
        existing = next(path for path in (self.root, *self.root.parents) if path.exists())
        try:
            with tempfile.NamedTemporaryFile(dir=existing):
                pass
        except OSError as error:
            raise ValueError(f"--output-dir: cannot write to {str(self.root)!r}: "
                             f"{error.strerror or error}") from None

    def claim(self, recipe: Recipe, run_options: dict[str, Any]) -> bool:
        """`check_claim`, then for a new run writes `config.json` and `run.json` (creating the
        directory); returns whether the directory already held this run (a restart)."""
        resumed = self.check_claim(recipe, run_options)
        if not resumed:
            self.root.mkdir(parents=True, exist_ok=True)
            for name, value in ((CONFIG_FILE, recipe.to_dict()), (RUN_FILE, run_options)):
                write_atomic(self.root / name, json.dumps(value, indent=2, sort_keys=True))
        return resumed

    def check_claim(self, recipe: Recipe, run_options: dict[str, Any]) -> bool:
        """Checks `recipe` and `run_options` against an earlier start's `config.json` and
        `run.json`, writing nothing. Returns True when the directory holds this run (a
        restart), False when it holds none; raises ValueError naming the differing fields
        when it holds another one."""
        self.check_writable()
        wanted = {CONFIG_FILE: recipe.to_dict(), RUN_FILE: run_options}
        existing = {name: _read_json(self.root / name) for name in wanted}
        if all(value is None for value in existing.values()):
            return False
        for name, value in wanted.items():
            differences = _differences(existing[name] or {}, value)
            if differences:
                raise ValueError(
                    f"--output-dir: {str(self.root)!r} holds a run with a different "
                    f"{name} ({'; '.join(differences)}); use a new --output-dir or the "
                    "original options")
        return True

    def languages(self) -> Optional[RunLanguages]:
        """The target languages of a run of several language pairs, or of a model imported
        from a multi-target one (`LANGUAGES_FILE`: the token placement, each target
        language's token, a trained run's pairs' shares), None for a model of one."""
        record = _read_json(self.root / LANGUAGES_FILE)
        return None if record is None else RunLanguages.from_dict(record)

    def recorded_options(self) -> dict[str, Any]:
        """The run options an earlier start recorded (`claim`), or {} for a new run."""
        return _read_json(self.root / RUN_FILE) or {}

    def write_json(self, name: str, value: Any) -> None:
        """Writes `value` as `name` in the run directory, atomically."""
        self.root.mkdir(parents=True, exist_ok=True)
        write_atomic(self.root / name, json.dumps(value, indent=2, sort_keys=True))

    def load_recipe(self) -> Recipe:
        """The run's recipe (`config.json`, as written by this or an earlier version)."""
        if not self.config_path.is_file():
            raise FileNotFoundError(f"run directory: no {CONFIG_FILE} in {str(self.root)!r}")
        return Recipe.from_saved(_read_json(self.config_path))


def _read_json(path: Path) -> Any:
    if not path.is_file():
        return None
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as error:
        raise ValueError(f"{path}: not valid JSON ({error})") from None


def _differences(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """Fields whose values differ; a field one side does not record (an older run had not yet,
    or this version records it only where it applies) is not a difference, so run
    directories of earlier versions can still be resumed."""
    return [f"{key}: {old[key]!r} -> {new[key]!r}" for key in sorted(set(old) & set(new))
            if old[key] != new[key]]


def record_average(run: RunDir, averaged: list[Path], averaging: str,
                   average_last: int) -> Optional[dict]:
    """Brings a finished run's `result.json` in line with `run.averaged_weights` written again
    after the run (by `kt-average-checkpoints`) from the checkpoints `averaged`: it names them
    (with `averaging`, the phrase of `checkpoints_to_average`, and `average_last`, the count
    asked for), and records their dev BLEU as not known (null) instead of the earlier
    average's; the weights it chose stay its result. Returns the result written, or None for
    a run without one (nothing is written)."""
    result = _read_json(run.root / RESULT_FILE)
    if result is None:
        return None
    result.update(averaged=[path.name for path in averaged], averaging=averaging,
                  average_last=average_last)
    result["dev_bleu"] = {**result.get("dev_bleu", {}), "averaged": None}
    run.write_json(RESULT_FILE, result)
    return result


def keep_better_of_average_and_final(
        model: keras.Model, run: RunDir, average_last: int,
        dev_bleu: Callable[[], float | dict[str, float]],
        stage: Callable[[str], ContextManager[None]] = lambda what: contextlib.nullcontext(),
        checkpoint_model: Optional[keras.Model] = None) -> dict:
    """Leaves `model` holding the run's result and returns what `result.json` records.

    `model` holds the final weights (already saved as `run.final_weights`); `dev_bleu()` scores
    whatever `model` holds: a BLEU figure, or one per language pair (pair name -> BLEU), whose
    mean is then the figure that decides and `dev_bleu_pairs` records each pair's. With
    `average_last` >= 2 and at least two checkpoints, the newest `average_last` of them (fewer
    if fewer were kept, listed as `averaged`) are averaged into `run.averaged_weights`, and the
    average is the result only if its dev BLEU is higher; `averaging` says what was averaged,
    or why nothing was (`checkpoints_to_average`). Each step runs inside `stage(what it does)`
    (e.g. `progress.stage`, which prints its start and end). The checkpoints are read into
    `checkpoint_model` (default: `model`): a LoRA run's trained model, whose checkpoints hold
    the adapters, while `model` is its merged, plain model (`checkpoints.average_weights`).
    """
    pairs: dict[str, dict[str, float]] = {}

    def scored(kind: str) -> float:
        found = dev_bleu()
        if not isinstance(found, dict):
            return round(found, 2)
        for name, value in found.items():
            pairs.setdefault(name, {})[kind] = round(value, 2)
        return round(sum(found.values()) / len(found), 2)

    with stage("dev BLEU of the final weights"):
        scores = {"final": scored("final")}
    averaged, averaging = checkpoints_to_average(list_checkpoints(run.checkpoints), average_last)
    chosen = run.final_weights
    if averaged:
        with stage(f"averaging {averaging}"):
            average_weights(model, averaged, checkpoint_model)
            save_weights_atomic(model, run.averaged_weights)
        with stage("dev BLEU of the averaged weights"):
            scores["averaged"] = scored("averaged")
        if scores["averaged"] > scores["final"]:
            chosen = run.averaged_weights
        else:
            load_weights_file(model, run.final_weights)
    result = {"weights": chosen.name, "dev_bleu": scores,
              "averaged": [path.name for path in averaged], "averaging": averaging,
              "average_last": average_last, **({"dev_bleu_pairs": pairs} if pairs else {})}
    run.write_json(RESULT_FILE, result)
    return {**result, "weights": os.fspath(chosen)}
