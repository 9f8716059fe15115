"""Which kernel set runs: `fast` (the speed tricks) or `reference` (the core's plain code).

The choice is global, like Keras's dtype policy, and read when a layer is traced: set it before
building and running a model. `set_kernels("fast")` installs this subpackage's twins of the
core's kernel hooks (`keras_transformer.hooks`), `set_kernels("reference")` removes them.
Decoding does not depend on the choice: its step is the core's, whichever set is in force.
`KT_KERNELS` (fast or reference) gives the default of `active()`. A model never measures:
"auto", the command lines' default, is resolved where a run is set up, by timing both sets on
the machine (`keras_transformer.training.probes.choose_kernels`), never from device names or
CPU flags.
"""
from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator

from keras_transformer import hooks
from keras_transformer.config import (FAST, KERNEL_CHOICES, KERNEL_SETS, KERNELS_VARIABLE,
                                      REFERENCE)
from keras_transformer.fast import kernels, loss, optimizers

_active: str | None = None


def validate(name: str, source: str = "kernels") -> str:
    """`name` if it is one of `KERNEL_CHOICES`, else a ValueError naming `source` and the
    choices."""
    if name not in KERNEL_CHOICES:
        raise ValueError(f"{source}: {name!r} is not one of {', '.join(KERNEL_CHOICES)}")
    return name


def active() -> str:
    """The kernel set in force: the last `set_kernels`, else `KT_KERNELS` when it names a set
    (installed now), else the reference set (also for `KT_KERNELS=auto`, which only a run's
    set-up resolves)."""
    if _active is None:
        name = validate(os.environ.get(KERNELS_VARIABLE, REFERENCE), KERNELS_VARIABLE)
        set_kernels(REFERENCE if name == "auto" else name)
    return _active


def set_kernels(name: str) -> str:
    """Selects the kernel set `name` (fast or reference), installs its hooks, returns it."""
    global _active
    if validate(name) not in KERNEL_SETS:
        raise ValueError(f"kernels: {name!r} is chosen by a run's set-up "
                         "(keras_transformer.training.probes.choose_kernels); give fast or "
                         "reference")
    hooks.install(fast_hooks() if name == FAST else {})
    _active = name
    return name


@contextlib.contextmanager
def kernels_scope(name: str) -> Iterator[str]:
    """`set_kernels(name)` for the block (yielding the set), then the previous set."""
    global _active
    previous = _active
    try:
        yield set_kernels(name)
    finally:
        hooks.install(fast_hooks() if previous == FAST else {})
        _active = previous


def fast_hooks() -> dict:
    """The fast twin of every kernel hook, by hook name."""
    return {"linear": kernels.linear, "layer_norm": kernels.layer_norm,
            "dropout": kernels.dropout, "smoothed_cross_entropy": loss.smoothed_cross_entropy,
            "log_normalizer": loss.log_normalizer, "predicted_ids": loss.predicted_ids,
            "adam": optimizers.FusedAdam}

