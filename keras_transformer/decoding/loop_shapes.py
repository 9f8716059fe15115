"""Static shapes across `tf.while_loop` iterations."""
from typing import Any

import tensorflow as tf


def keep_shapes(new: Any, old: Any) -> Any:
    """`new` loop variables with the static shapes of `old` (their shapes never change, but
    gathers lose static sizes, e.g. a known batch of 0)."""

    def restore(new_tensor: tf.Tensor, old_tensor: tf.Tensor) -> tf.Tensor:
        new_tensor.set_shape(old_tensor.shape)
        return new_tensor

    return tf.nest.map_structure(restore, new, old)
