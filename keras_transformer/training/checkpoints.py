"""Weight checkpoints `ckpt-<step>.weights.h5`: atomic writes, retention, averaging.

A checkpoint is written to a hidden temporary file and renamed into place, so a crash
mid-write never leaves the newest checkpoint unreadable.
"""
from __future__ import annotations

import os
import re
import tempfile
from pathlib import Path
from typing import Optional

import keras
import numpy as np

from keras_transformer.data.atomic_files import sync_directory

_CHECKPOINT = re.compile(r"^ckpt-(\d+)\.weights\.h5$")


def checkpoint_path(directory: str | os.PathLike, step: int) -> Path:
    """Where the checkpoint of `step` goes in `directory` (step-sortable names)."""
    return Path(directory) / f"ckpt-{step:08d}.weights.h5"


def files_by_step(directory: str | os.PathLike, pattern: re.Pattern) -> list[Path]:
    """The files in `directory` whose names match `pattern` (group 1: the step), lowest step
    first; none when `directory` does not exist."""
    directory = Path(directory)
    if not directory.is_dir():
        return []
    found = [(int(match.group(1)), directory / name) for name in os.listdir(directory)
             if (match := pattern.match(name))]
    return [path for _, path in sorted(found)]


def list_checkpoints(directory: str | os.PathLike) -> list[Path]:
    """The checkpoints in `directory`, oldest (lowest step) first."""
    return files_by_step(directory, _CHECKPOINT)


def save_weights_atomic(model: keras.Model, path: str | os.PathLike) -> Path:
    """`model.save_weights` to a temporary file in the same directory, flushed to disk, then
    renamed (`atomic_files`: whole or not at all, even after a power loss)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=".tmp-", suffix=".weights.h5")
    os.close(handle)
    try:
        model.save_weights(temporary, overwrite=True)
        with open(temporary, "rb") as handle:
            os.fsync(handle.fileno())
        os.replace(temporary, path)
        sync_directory(path.parent)
    finally:
        if os.path.exists(temporary):
            os.remove(temporary)
    return path


def save_checkpoint(model: keras.Model, directory: str | os.PathLike, step: int,
                    keep: int) -> Path:
    """Writes `ckpt-<step>` and deletes all but the newest `keep` checkpoints."""
    path = save_weights_atomic(model, checkpoint_path(directory, step))
    for old in list_checkpoints(directory)[:-keep]:
        old.unlink(missing_ok=True)
    return path


def load_weights_file(model: keras.Model, path: str | os.PathLike) -> None:
    """`model.load_weights(path)` (the optimizer's state too when `model` is compiled);
    FileNotFoundError or ValueError naming `path` when it is missing or cannot be read as this
    model's weights (truncated, garbled, or another model's)."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"weights: no such file {str(path)!r}")
    try:
        model.load_weights(path)
    except Exception as error:  # noqa: BLE001 - h5py and Keras raise many kinds for a bad file
        reason = " ".join(str(error).split())[:200] or type(error).__name__
        raise ValueError(f"weights: cannot read {str(path)!r} ({reason}); the file may be "
                         "truncated or garbled, or belong to another model") from None


def checkpoints_to_average(checkpoints: list[Path], last: int) -> tuple[list[Path], str]:
    """The newest `last` of `checkpoints` (oldest first), fewer if fewer were kept, and a
    phrase for the console and `result.json`: which ones ("the newest 5 checkpoints", "4 of
    the newest 10 checkpoints asked (only 4 kept)"), or why none are chosen ("one checkpoint:
    nothing to average", "average_last 1: no averaging")."""
    if last < 2:
        return [], f"average_last {last}: no averaging"
    if len(checkpoints) < 2:
        return [], f"{'one' if checkpoints else 'no'} checkpoint: nothing to average"
    chosen = checkpoints[-last:]
    if len(chosen) < last:
        return chosen, (f"{len(chosen)} of the newest {last} checkpoints asked (only "
                        f"{len(chosen)} kept)")
    return chosen, f"the newest {last} checkpoints"


def average_weights(model: keras.Model, paths: list[Path],
                    checkpoint_model: Optional[keras.Model] = None) -> None:
    """Sets `model`'s weights to the element-wise mean of the checkpoints at `paths`, each read
    into `checkpoint_model` (default: `model`).

    Only the model's variables are averaged (not the optimizer's), as in section 6.1. A LoRA
    run's checkpoints (read into a `Transformer` with LoRA, its `checkpoint_model`) are
    averaged as the merged models (`merge_lora`) into the plain `model`: each projection's
    kernel is the mean of its effective kernels `W + (alpha / rank) A_i B_i` (W frozen, the
    same in each), not the product of the adapters' means.
    """
    if not paths:
        raise ValueError("average: no checkpoints given")
    checkpoint_model = checkpoint_model or model
    totals = None
    for path in paths:
        load_weights_file(checkpoint_model, path)
        held = (checkpoint_model.merge_lora() if getattr(checkpoint_model, "lora_rank", None)
                else checkpoint_model)
        weights = [np.asarray(w, dtype=np.float64) for w in held.get_weights()]
        totals = weights if totals is None else [t + w for t, w in zip(totals, weights)]
    model.set_weights([(total / len(paths)).astype(variable.dtype)
                       for total, variable in zip(totals, model.get_weights())])
