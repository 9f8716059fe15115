"""Which kernel set runs: `fast` (the speed tricks) or `reference` (their plain twins).

The choice is global, like Keras's dtype policy, and read when a layer is traced: set it before
building and running a model. `KT_KERNELS` (fast, reference or auto) gives the default;
`set_kernels` and `kernels_scope` change it in code. "auto" is resolved by a measured probe
(`keras_transformer.probes`), never by looking at device names or CPU flags.
"""
from __future__ import annotations

import concurrent.futures
import contextlib
import os
from collections.abc import Iterator

import tensorflow as tf

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
    """The kernel set in force: the last `set_kernels`, else `KT_KERNELS` (default auto),
    resolving auto by the probe at its default sizes on first use. When that first use comes
    while a function is traced, the probe runs in a thread of its own, which executes eagerly
    (`tf.init_scope` would pause the gradient tapes the probe needs)."""
    if _active is None:
        name = validate(os.environ.get(ENVIRONMENT_VARIABLE, "auto"), ENVIRONMENT_VARIABLE)
        if tf.executing_eagerly():
            set_kernels(name)
        else:
            with concurrent.futures.ThreadPoolExecutor(1) as executor:
                executor.submit(set_kernels, name).result()
    return _active


def set_kernels(name: str, **probe_sizes) -> str:
    """Selects the kernel set `name` (fast, reference, or auto: the faster of the two measured
    on this machine at `probe_sizes`, see `probes.choose_kernels`) and returns it."""
    global _active
    if validate(name) == "auto":
        from keras_transformer.probes import choose_kernels
        name = choose_kernels(**probe_sizes).choice
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
