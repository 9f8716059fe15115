"""Mixed precision: choosing the Keras dtype policy, and float32 copies for export.

Under `mixed_bfloat16` and `mixed_float16` layers compute in 16 bits while variables stay
float32; the Transformer casts its logits to float32 and its attention softmax runs in float32.
For `mixed_float16`, Keras 3 `Model.compile` wraps the optimizer in a `LossScaleOptimizer`
itself (`auto_scale_loss=True`, keyed on the model's dtype policy), so nothing else is needed.
"""
from __future__ import annotations

import contextlib
from collections.abc import Collection, Iterator, Sequence

import keras
import tensorflow as tf

from keras_transformer.model import Transformer

POLICIES = ("float32", "mixed_bfloat16", "mixed_float16")
CHOICES = ("auto", *POLICIES)
CPU_BF16_FLAGS = frozenset({"avx512_bf16", "amx_bf16"})


def auto_precision(gpu_capabilities: Sequence[tuple[int, ...]], cpu_flags: Collection[str]) -> str:
    """The fastest correct policy for these devices: with GPUs, bfloat16 when all are Ampere
    (compute capability 8.0) or newer, else float16 (with loss scaling); on CPU, bfloat16 when
    the CPU has native bf16 instructions, else float32."""
    if gpu_capabilities:
        return ("mixed_bfloat16" if all(cc >= (8, 0) for cc in gpu_capabilities)
                else "mixed_float16")
    return "mixed_bfloat16" if CPU_BF16_FLAGS & set(cpu_flags) else "float32"


def local_gpu_capabilities() -> list[tuple[int, ...]]:
    """Compute capability of every visible GPU ((0, 0) when TensorFlow does not report one)."""
    return [tuple(tf.config.experimental.get_device_details(gpu).get("compute_capability",
                                                                     (0, 0)))
            for gpu in tf.config.list_physical_devices("GPU")]


def local_cpu_flags(cpuinfo: str = "/proc/cpuinfo") -> set[str]:
    """The CPU feature flags Linux lists in `cpuinfo` (empty elsewhere)."""
    try:
        with open(cpuinfo, encoding="utf-8") as handle:
            return {flag for line in handle if line.startswith("flags")
                    for flag in line.split(":", 1)[1].split()}
    except OSError:
        return set()


def resolve_precision(name: str) -> str:
    """`name` when it is a policy in `POLICIES`; for "auto", `auto_precision` of this machine."""
    if name == "auto":
        return auto_precision(local_gpu_capabilities(), local_cpu_flags())
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
