"""Training: a run from Python (`Training`, `train`: the recipe, `TrainingData`, `RunOptions`
in, a run directory out), and its parts: distribution strategy, run directories, checkpoints,
callbacks. The names below are imported when first used (their modules import TensorFlow)."""
from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {"RunOptions": "settings", "TrainingData": "settings", "Training": "run",
            "TrainingError": "run", "train": "run"}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    """`name` of `_EXPORTS`, from its module."""
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{_EXPORTS[name]}"), name)
