"""Mixed precision: choosing the Keras dtype policy, and float32 copies for export.

Under `mixed_bfloat16` and `mixed_float16` layers compute in 16 bits while variables stay
float32; the Transformer casts its logits to float32 and its attention softmax runs in float32.
For `mixed_float16`, Keras 3 `Model.compile` wraps the optimizer in a `LossScaleOptimizer`
itself (`auto_scale_loss=True`, keyed on the model's dtype policy), so nothing else is needed.
"""
from __future__ import annotations

import contextlib
from collections.abc import Iterator

import keras

from keras_transformer.model import Transformer
from keras_transformer.probes import choose_precision

POLICIES = ("float32", "mixed_bfloat16", "mixed_float16")
CHOICES = ("auto", *POLICIES)


def resolve_precision(name: str, **probe_sizes) -> str:
    """`name` when it is a policy in `POLICIES`; for "auto", the policy that
    `probes.choose_precision(**probe_sizes)` measures fastest on this machine."""
    if name == "auto":
        return choose_precision(**probe_sizes).choice
    if name not in POLICIES:
        raise ValueError(f"precision: {name!r} is not one of {', '.join(CHOICES)}")
    return name


def set_precision(name: str) -> str:
    """Sets the Keras global dtype policy to `resolve_precision(name)` and returns it.

    Layers take the global policy when they are constructed: set it before building a model.
    """
    policy = resolve_precision(name)
    keras.config.set_dtype_policy(policy)
    return policy


@contextlib.contextmanager
def precision_scope(name: str) -> Iterator[str]:
    """`set_precision(name)` for the block (yielding the policy), then the previous policy."""
    previous = keras.config.dtype_policy()
    try:
        yield set_precision(name)
    finally:
        keras.config.set_dtype_policy(previous)


def float32_copy(model: Transformer) -> Transformer:
    """A new `Transformer` with `model`'s weights (float32 under every policy) computing in
    float32, whatever the global policy: a portable export, free of optimizer state."""
    with precision_scope("float32"):
        copy = Transformer(model.config)
    copy.set_weights(model.get_weights())
    return copy
