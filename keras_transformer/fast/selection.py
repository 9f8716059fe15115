"""Which implementation runs: `fast` (the speed tricks) or `reference` (the core's plain code).

The choice is global, like Keras's dtype policy, and read when a layer is traced: set it before
building and running a model. `set_implementation("fast")` installs this subpackage's twins of the
core's hooks (`keras_transformer.hooks`), `set_implementation("reference")` removes them.
Decoding does not depend on the choice: its step is the core's, whichever set is in force.
`KT_KERNELS` (fast or reference) gives the default of `active()`. A model never measures:
"auto", the command lines' default, is resolved where a run is set up, by timing both sets on
the machine (`keras_transformer.training.probes.choose_implementation`), never from device names or
CPU flags.
"""
from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator

from keras_transformer import hooks
from keras_transformer.config import (FAST, IMPLEMENTATION_CHOICES, IMPLEMENTATION_VARIABLE,
                                      IMPLEMENTATIONS, REFERENCE)
from keras_transformer.fast import loss, optimizers, twins

_active: str | None = None


def validate(name: str, source: str = "kernels") -> str:
    """`name` if it is one of `IMPLEMENTATION_CHOICES`, else a ValueError naming `source` and the
    choices."""
    if name not in IMPLEMENTATION_CHOICES:
        raise ValueError(f"{source}: {name!r} is not one of {', '.join(IMPLEMENTATION_CHOICES)}")
    return name


def active() -> str:
    """The implementation in force: the last `set_implementation`, else `KT_KERNELS` when it
    names one (installed now), else the reference (also for `KT_KERNELS=auto`, which only a
    run's set-up resolves)."""
    if _active is None:
        name = validate(os.environ.get(IMPLEMENTATION_VARIABLE, REFERENCE), IMPLEMENTATION_VARIABLE)
        set_implementation(REFERENCE if name == "auto" else name)
    return _active


def set_implementation(name: str) -> str:
    """Selects the implementation `name` (fast or reference), installs its hooks, returns it."""
    global _active
    if validate(name) not in IMPLEMENTATIONS:
        raise ValueError(f"kernels: {name!r} is chosen by a run's set-up "
                         "(keras_transformer.training.probes.choose_implementation); give fast or "
                         "reference")
    hooks.install(fast_hooks() if name == FAST else {})
    _active = name
    return name


@contextlib.contextmanager
def implementation_scope(name: str) -> Iterator[str]:
    """`set_implementation(name)` for the block (yielding the set), then the previous set."""
    global _active
    previous = _active
    try:
        yield set_implementation(name)
    finally:
        hooks.install(fast_hooks() if previous == FAST else {})
        _active = previous


def fast_hooks() -> dict:
    """The fast twin of every hook, by hook name."""
    return {"linear": twins.linear, "layer_norm": twins.layer_norm,
            "dropout": twins.dropout, "smoothed_cross_entropy": loss.smoothed_cross_entropy,
            "log_normalizer": loss.log_normalizer, "predicted_ids": loss.predicted_ids,
            "adam": optimizers.FusedAdam}

