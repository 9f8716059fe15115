"""Backups a killed run resumes from: the whole training state at a step, written so that a
crash or a full disk mid-write never costs more than the interval since the previous backup.

A backup is `backup/step-<N>.weights.h5` (model and optimizer variables, the optimizer's step
counter included) and `backup/step-<N>.json`, written after it (the commit mark): the step (the
batches trained, which locate the data), the optimizer's update count (fewer when float16 loss
scaling skipped steps), the dropout seed generators' states and the weights file's SHA-256. Both are
written to temporary files and renamed; the newest two are kept. Restoring tries, newest first,
every backup, then Keras's `BackupAndRestore` files of runs written by earlier versions, then the
run's checkpoints; a file that is unreadable, garbled (checksum) or holds non-finite weights is
named in a warning and the next one is tried. What comes back exactly: weights, optimizer state,
step, dropout seeds and (through the step) the position in the data; a checkpoint lacks the seeds,
so dropout masks after resuming from one differ from an uninterrupted run's.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional

import keras
import numpy as np

from keras_transformer.training.checkpoints import (files_by_step, list_checkpoints,
                                                    load_weights_file, save_weights_atomic)
from keras_transformer.data.atomic_files import write_atomic

KEEP = 2
_BACKUP = re.compile(r"^step-(\d+)\.json$")
_LEGACY = ("latest.weights.h5", "latest.weights.h5.bkp")  # Keras BackupAndRestore's files


@dataclass(frozen=True)
class Restored:
    """Where a run resumes: the global step and the file it came from (None: a new run);
    `exact` is False when the dropout seeds could not be restored (a checkpoint)."""

    step: int
    source: Optional[Path]
    exact: bool


class BackupError(RuntimeError):
    """Backups or checkpoints exist but none of them can be restored."""


def seed_states(model: keras.Model) -> list[keras.Variable]:
    """The model's variables that are not weights: its dropout seed generators' states."""
    weights = {id(variable) for variable in model.weights}
    return [variable for variable in model.variables if id(variable) not in weights]


def write_backup(model: keras.Model, directory: str | os.PathLike, step: int) -> Path:
    """Writes the backup of `step` (weights, then the JSON commit mark) and deletes all but the
    newest `KEEP`; an OSError (e.g. a full disk) leaves every earlier backup as it was."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    weights = save_weights_atomic(model, directory / f"step-{step:08d}.weights.h5")
    mark = {"step": step, "iterations": int(keras.ops.convert_to_numpy(
                model.optimizer.iterations)), "sha256": file_sha256(weights),
            "seeds": [np.asarray(variable.numpy()).tolist() for variable in seed_states(model)]}
    write_atomic(directory / f"step-{step:08d}.json", json.dumps(mark))
    for old in list_backups(directory)[:-KEEP]:
        old.with_suffix(".weights.h5").unlink(missing_ok=True)
        old.unlink(missing_ok=True)
    return weights


def list_backups(directory: str | os.PathLike) -> list[Path]:
    """The backups' JSON marks in `directory`, oldest first."""
    return files_by_step(directory, _BACKUP)


def newest_step(backup_dir: str | os.PathLike, checkpoint_dir: str | os.PathLike) -> int:
    """The newest step a backup or checkpoint file name claims (0 when there is none); what
    workers agree on before restoring (`strategy.smallest_across_workers`)."""
    steps = [_step_of(path) for path in list_backups(backup_dir) + list_checkpoints(checkpoint_dir)]
    return max(steps, default=0)


def restore_latest(model: keras.Model, backup_dir: str | os.PathLike,
                   checkpoint_dir: str | os.PathLike,
                   warn: Callable[[str], None] = lambda text: print(text, file=sys.stderr),
                   at_most: Optional[int] = None) -> Restored:
    """Loads the newest restorable state (of a step <= `at_most`, when given; Keras's legacy
    backup files, whose step is only known once loaded, always qualify) into `model`
    (compiled and built) and returns where it came from; `Restored(0, None, True)` when there
    is nothing to restore. Raises BackupError naming every file tried when files exist but
    none can be restored."""
    backup_dir, tried = Path(backup_dir), []
    remove_partial_writes(backup_dir, checkpoint_dir)
    legacy = [(backup_dir / name, False) for name in _LEGACY if (backup_dir / name).is_file()]
    candidates = [(path, is_mark) for path, is_mark in
                  [(mark, True) for mark in reversed(list_backups(backup_dir))] + legacy
                  + [(path, False) for path in reversed(list_checkpoints(checkpoint_dir))]
                  if at_most is None or _step_of(path) <= at_most]
    if not candidates:
        return Restored(0, None, True)
    if not model.optimizer.built:
        model.optimizer.build(model.trainable_variables)
    state = list(model.variables) + list(model.optimizer.variables)
    initial = [variable.numpy() for variable in state]
    for path, is_mark in candidates:
        try:
            if is_mark:
                step, weights = _load_mark(model, path)
            else:
                weights = _load_weights(model, path)
                step = int(keras.ops.convert_to_numpy(model.optimizer.iterations))
            return Restored(step, weights, is_mark)
        except Exception as error:  # noqa: BLE001 - any failure to read a file means "try the next"
            reason = " ".join(str(error).split())[:200] or type(error).__name__
            tried.append(f"{path}: {reason}")
            warn(f"kt-train: warning: cannot restore {path} ({reason}); trying an older one")
            for variable, value in zip(state, initial):
                variable.assign(value)
    raise BackupError("no backup or checkpoint can be restored (" + "; ".join(tried) + "); "
                      "move them out of the run directory to start it again from step 0")


def _step_of(path: Path) -> int:
    """The step in a backup's or checkpoint's file name (`step-N.json`, `ckpt-N.weights.h5`);
    -1 for Keras's legacy backup files, whose step is only known once loaded."""
    digits = path.name.split("-")[-1].split(".")[0]
    return int(digits) if digits.isdigit() else -1


def _load_mark(model: keras.Model, mark_path: Path) -> tuple[int, Path]:
    """Restores the backup whose JSON mark is `mark_path`; returns its step and weights
    file."""
    mark = json.loads(mark_path.read_text(encoding="utf-8"))
    weights = mark_path.with_suffix(".weights.h5")
    if not weights.is_file():
        raise ValueError(f"{weights.name} is missing")
    if file_sha256(weights) != mark["sha256"]:
        raise ValueError(f"{weights.name} does not match its checksum (garbled or torn)")
    _load_weights(model, weights)
    states = seed_states(model)  # in the model's layer order, the same in every process
    if len(states) != len(mark["seeds"]):
        raise ValueError(f"{mark_path.name} holds {len(mark['seeds'])} seed states, the model "
                         f"has {len(states)}")
    for variable, value in zip(states, mark["seeds"]):
        variable.assign(np.asarray(value, dtype=variable.dtype))
    iterations = mark.get("iterations", mark["step"])  # marks before float16 skips counted
    if int(keras.ops.convert_to_numpy(model.optimizer.iterations)) != iterations:
        raise ValueError(f"{weights.name} holds another optimizer step than {iterations}")
    return mark["step"], weights


def _load_weights(model: keras.Model, path: Path) -> Path:
    """`load_weights_file` (optimizer state included), refusing non-finite weights."""
    load_weights_file(model, path)
    if not weights_are_finite(model):
        raise ValueError("its weights are not all finite (saved after the loss diverged?)")
    return path


def weights_are_finite(model: keras.Model) -> bool:
    """Whether every trainable weight of `model` is finite."""
    return all(np.all(np.isfinite(variable.numpy())) for variable in model.trainable_weights)


def remove_partial_writes(*directories: str | os.PathLike) -> None:
    """Deletes the temporary files a killed writer left in `directories` (`.tmp-*`)."""
    for directory in map(Path, directories):
        for leftover in directory.glob(".tmp-*") if directory.is_dir() else ():
            leftover.unlink(missing_ok=True)


def file_sha256(path: Path) -> str:
    """The SHA-256 of the file at `path`, read in blocks."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()
