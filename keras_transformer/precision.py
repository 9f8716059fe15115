"""Mixed precision: choosing the Keras dtype policy, and the copies an export serves.

Under `mixed_bfloat16` and `mixed_float16` layers compute in 16 bits while variables stay
float32; the Transformer casts its logits to float32 and its attention softmax runs in float32.
For `mixed_float16`, Keras 3 `Model.compile` wraps the optimizer in a `LossScaleOptimizer`
itself (`auto_scale_loss=True`, keyed on the model's dtype policy), so nothing else is needed.
"""
from __future__ import annotations

import contextlib
from collections.abc import Iterator

import keras

from keras_transformer.config import PRECISION_CHOICES, PRECISION_POLICIES, SERVING_DTYPES
from keras_transformer.model import Transformer


def resolve_precision(name: str) -> str:
    """`name` when it is a policy in `PRECISION_POLICIES`, else a ValueError naming the
    choices ("auto" is resolved where a run is set up: a run's set-up measures it with
    `training.probes.choose_precision`; a model alone never does)."""
    if name == "auto":
        raise ValueError("precision: 'auto' is chosen by a run's set-up "
                         "(keras_transformer.training.probes.choose_precision); give a policy "
                         f"here, one of {', '.join(PRECISION_POLICIES)}")
    if name not in PRECISION_POLICIES:
        raise ValueError(f"precision: {name!r} is not one of {', '.join(PRECISION_CHOICES)}")
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
    policy = resolve_precision(name)
    with _policy_scope(policy):
        yield policy


@contextlib.contextmanager
def _policy_scope(policy: str) -> Iterator[None]:
    previous = keras.config.dtype_policy()
    try:
        keras.config.set_dtype_policy(policy)
        yield
    finally:
        keras.config.set_dtype_policy(previous)


def serving_copy(model: Transformer, dtype: str = "float32") -> Transformer:
    """A new `Transformer` with `model`'s weights, free of optimizer state, whatever the global
    policy: stored and computed in float32 (portable), or in bfloat16 (weights rounded once;
    layer norm, attention softmax and logits still in float32 as under `mixed_bfloat16`, so
    it computes what a `mixed_bfloat16` model does without casting its weights every step).
    """
    if dtype not in SERVING_DTYPES:
        raise ValueError(f"dtype: {dtype!r} is not one of {', '.join(SERVING_DTYPES)}")
    with _policy_scope(dtype):
        copy = Transformer(model.config)
    copy.set_weights(model.get_weights())
    return copy
