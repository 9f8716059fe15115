"""Hooks: the seams where the opt-in fast path replaces a computation of the core.

A core function decorated with `@replaceable` is the plain reference and runs as written unless
a replacement is installed under its name. Only `keras_transformer.fast` installs any (its
`set_implementation("fast")`); the core never imports it, so without it every hook runs its
reference.

    @replaceable
    def linear(rows, kernel, bias=None, relu=False):
        ...plain TensorFlow...

The hooks are computations only: `linear` (layers/dense.py), `layer_norm` and `dropout`
(layers/residual.py), `smoothed_cross_entropy` (losses.py), `log_normalizer` and
`predicted_ids` (metrics.py) and `adam` (optimization.py); each reference's docstring says what
its replacement must compute. A search runs the references whichever hooks are installed
(`references`: it is never differentiated, and an export then holds the same ops whatever set
made it). Installations are read when a layer is traced: install before building and running a
model.
"""
from __future__ import annotations

import contextlib
import functools
from collections.abc import Iterator, Mapping
from typing import Callable, TypeVar

Function = TypeVar("Function", bound=Callable)

REFERENCES: dict[str, Callable] = {}
_installed: dict[str, Callable] = {}


def replaceable(reference: Function) -> Function:
    """Makes `reference` a hook named after it: calls run the installed replacement, if any."""
    name = reference.__name__
    if name in REFERENCES:
        raise ValueError(f"hook {name!r} is defined twice")
    REFERENCES[name] = reference

    @functools.wraps(reference)
    def dispatch(*args, **kwargs):
        return _installed.get(name, reference)(*args, **kwargs)

    dispatch.reference = reference
    return dispatch  # type: ignore[return-value]


def install(replacements: Mapping[str, Callable]) -> None:
    """Replaces the hooks named in `replacements` (every other hook runs its reference)."""
    unknown = sorted(set(replacements) - set(REFERENCES))
    if unknown:
        raise ValueError(f"no hook named {', '.join(unknown)}; the hooks are "
                         f"{', '.join(sorted(REFERENCES))}")
    _installed.clear()
    _installed.update(replacements)


def installed() -> dict[str, Callable]:
    """The replacements in force, by hook name."""
    return dict(_installed)


@contextlib.contextmanager
def references() -> Iterator[None]:
    """Every hook runs its reference inside (the replacements in force restored after)."""
    saved = dict(_installed)
    _installed.clear()
    try:
        yield
    finally:
        _installed.update(saved)
