"""The kernel interface: every speed trick of the package, each beside its plain twin.

Layers, the model, the loss and the optimizer call the functions below; which implementation
runs is the active kernel set (`selection`): `reference` (plain public Keras/TensorFlow ops,
autodiff, the padded layout: what a reader learns the model from) or `fast` (custom gradients,
raw ops, packed tokens, a fused optimizer update), chosen with `KT_KERNELS`, `set_kernels` or
`kt-train --kernels`. Every fast kernel is tested against its twin in value and gradient
(tests/test_kernels.py), and the suite passes with either set. Module by module:
`matmul`, `normalization`, `random_masks`, `layouts`, `decode_cache`, `optimizers`,
`statistics`, `cross_entropy`, each holding `fast...` beside `reference...`.

| kernel | reference | fast |
| --- | --- | --- |
| `linear` | matmul + bias + ReLU, autodiff | float32 gradients in oneDNN's faster layouts |
| `layer_norm` | the formula, autodiff | closed-form backward pass |
| `dropout` | `keras.random.dropout` | 16-bit masks, drawn off the critical path |
| `token_layout` | padded `[batch, len, ...]` | real tokens only, packed `[N, ...]` |
| `decode_buffer`, `extend_cache` | buffer reordered whole each step | never reordered, written in place |
| `adam` | `keras.optimizers.Adam` | `FusedAdam` (one `ResourceApplyAdam` per variable) |
| `logit_statistics` | computed per caller | shared within a traced step |
| `smoothed_cross_entropy(_through_factors)` | autodiff | written-out gradient, through `hidden @ kernel` |
"""
from __future__ import annotations

from typing import Optional

import keras
import tensorflow as tf

from keras_transformer import compat
from keras_transformer.kernels import (cross_entropy as _cross_entropy,
                                       decode_cache as _decode_cache, layouts as _layouts,
                                       matmul as _matmul, normalization as _normalization,
                                       optimizers as _optimizers, random_masks as _random_masks,
                                       statistics as _statistics)
from keras_transformer.kernels.statistics import LogitStatistics
from keras_transformer.kernels.selection import (CHOICES, FAST, KERNEL_SETS, REFERENCE, active,
                                                 kernels_scope, set_kernels)
from keras_transformer.kernels.layouts import PADDED, PaddedLayout, TokenLayout
from keras_transformer.logit_factors import LogitFactors

__all__ = ["CHOICES", "FAST", "KERNEL_SETS", "LogitStatistics", "PADDED", "PaddedLayout",
           "REFERENCE", "TokenLayout", "active", "adam", "decode_buffer", "dropout",
           "extend_cache", "kernels_scope", "layer_norm", "linear", "logit_statistics",
           "packs_tokens", "set_kernels", "smoothed_cross_entropy",
           "smoothed_cross_entropy_through_factors", "token_cross_entropy", "token_layout"]


def _chosen(module, name: str = ""):
    """`module`'s implementation `fast{name}` or `reference{name}` of the active set."""
    return getattr(module, active() + name)


def linear(rows: tf.Tensor, kernel: tf.Tensor, bias: Optional[tf.Tensor] = None,
           relu: bool = False) -> tf.Tensor:
    """`rows @ kernel (+ bias)`, then ReLU if `relu`, on 2-D `rows`."""
    return _chosen(_matmul)(rows, kernel, bias, relu)


def layer_norm(x: tf.Tensor, gamma: tf.Tensor, beta: tf.Tensor, epsilon: float) -> tf.Tensor:
    """`(x - mean) / sqrt(var + epsilon) * gamma + beta` over the last axis, in float32,
    returned in `x`'s dtype."""
    return _chosen(_normalization)(x, gamma, beta, epsilon)


def dropout(inputs: tf.Tensor, rate: float, seed_generator: keras.random.SeedGenerator,
            shape: Optional[tf.Tensor] = None) -> tf.Tensor:
    """Training-time dropout of `inputs` at `rate` > 0. `shape`: `inputs`' shape, given by a
    tensor known before `inputs` (lets a fast kernel draw the mask early)."""
    return _chosen(_random_masks)(inputs, rate, seed_generator, shape)


def token_layout(ids: tf.Tensor):
    """The layout the position-wise sub-layers of a training batch `ids` run in: packed real
    tokens (`TokenLayout`) with fast kernels, except under XLA (static shapes), else
    `PADDED`."""
    return _layouts.fast(ids) if packs_tokens() else _layouts.reference(ids)


def packs_tokens() -> bool:
    """Whether training steps skip padding (fast kernels, not under XLA)."""
    return active() == FAST and not compat.in_xla_context()


def decode_buffer(shape: tf.Tensor, dtype) -> tf.Tensor:
    """An empty key/value cache for incremental decoding of `shape`
    `[rows, heads, max_len, dim]` (laid out as the kernel set needs), written by
    `extend_cache`."""
    return _chosen(_decode_cache, "_buffer")(shape, dtype)


def extend_cache(buffer: tf.Tensor, ancestors: tf.Tensor, update: tf.Tensor,
                 step) -> tuple[tf.Tensor, tf.Tensor]:
    """`(buffer, visible)`: `buffer` with `update` `[rows, 1, heads, dim]` written as position
    `step` of each row, and what each row attends to, `[rows, heads, length, dim]`: its
    positions `0 .. step`, position `j` from row `ancestors[row, j]`, then (if `length` >
    `step + 1`) positions the attention must mask."""
    return _chosen(_decode_cache, "_extend_cache")(buffer, ancestors, update, step)


def adam(**adam_arguments) -> keras.optimizers.Adam:
    """An Adam optimizer with `keras.optimizers.Adam`'s arguments, slots and checkpoints."""
    return _chosen(_optimizers)(**adam_arguments)


def logit_statistics(logits: tf.Tensor) -> LogitStatistics:
    """Softmax, logsumexp and argmax of float32 `logits` `[..., vocab]`."""
    return _chosen(_statistics)(logits)


def smoothed_cross_entropy(y_true: tf.Tensor, logits: tf.Tensor,
                           label_smoothing: float) -> tf.Tensor:
    """Per-token label-smoothed cross-entropy of int32 labels and float32 logits."""
    return _chosen(_cross_entropy)(y_true, logits, label_smoothing)


def smoothed_cross_entropy_through_factors(y_true: tf.Tensor, factors: LogitFactors,
                                           label_smoothing: float) -> tf.Tensor:
    """`smoothed_cross_entropy` of `factors.logits`, differentiated through the factors."""
    return _chosen(_cross_entropy, "_through_factors")(y_true, factors, label_smoothing)


def token_cross_entropy(y_true: tf.Tensor, logits: tf.Tensor) -> tf.Tensor:
    """Per-token `-log p_y` (unsmoothed; for metrics, no gradient defined)."""
    return _cross_entropy.token_cross_entropy(y_true, logits, logit_statistics(logits))

