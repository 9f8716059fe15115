"""Which kernel set runs: `fast` (the speed tricks) or `reference` (their plain twins).

The choice is global, like Keras's dtype policy, and read when a layer is traced: set it before
building and running a model. `KT_KERNELS` (fast or reference) gives the default, else the
reference set; `set_kernels` and `kernels_scope` change it in code. The library never measures:
"auto", the command lines' default, is resolved where a run is set up, by timing both sets on
the machine (`keras_transformer.probes.choose_kernels`), never from device names or CPU flags.
"""
from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator

FAST = "fast"
REFERENCE = "reference"
KERNEL_SETS = (FAST, REFERENCE)
CHOICES = ("auto", *KERNEL_SETS)
ENVIRONMENT_VARIABLE = "KT_KERNELS"

_active: str | None = None


def validate(name: str, source: str = "kernels") -> str:
    """`name` if it is one of `CHOICES`, else a ValueError naming `source` and the choices."""
    if name not in CHOICES:
        raise ValueError(f"{source}: {name!r} is not one of {', '.join(CHOICES)}")
    return name


def active() -> str:
    """The kernel set in force: the last `set_kernels`, else `KT_KERNELS` when it names a set,
    else the reference set (also for `KT_KERNELS=auto`, which only a run's set-up resolves)."""
    if _active is None:
        name = validate(os.environ.get(ENVIRONMENT_VARIABLE, REFERENCE), ENVIRONMENT_VARIABLE)
        set_kernels(REFERENCE if name == "auto" else name)
    return _active


def set_kernels(name: str) -> str:
    """Selects the kernel set `name` (fast or reference) and returns it."""
    global _active
    if validate(name) not in KERNEL_SETS:
        raise ValueError(f"kernels: {name!r} is chosen by a run's set-up "
                         "(keras_transformer.probes.choose_kernels); give fast or reference")
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
        _active = previous
