"""The loop every search runs: one `tf.while_loop` over output positions that stops when every
sentence is done; a search strategy (greedy, beam) supplies the step."""
from __future__ import annotations

from typing import Any, Callable

import tensorflow as tf


def search_loop(advance: Callable[[tf.Tensor, Any, tf.Tensor], tuple[Any, tf.Tensor]],
                carried: Any, done: tf.Tensor, buffer_length: tf.Tensor) -> Any:
    """Runs `advance(step, carried, done) -> (carried, done)` for step = 0, 1, ... while a
    sentence (`done`: `[batch]` bool) is not done, at most `buffer_length` times, and returns
    the last `carried` (a structure of tensors whose shapes never change)."""

    def body(step, carried, done):
        new_carried, new_done = advance(step, carried, done)
        return step + 1, keep_shapes(new_carried, carried), keep_shapes(new_done, done)

    def not_done(step, carried, done):
        return tf.logical_and(step < buffer_length, tf.logical_not(tf.reduce_all(done)))

    _, carried, _ = tf.while_loop(not_done, body, (tf.constant(0), carried, done),
                                  maximum_iterations=buffer_length)
    return carried


def keep_shapes(new: Any, old: Any) -> Any:
    """`new` loop variables with the static shapes of `old` (their shapes never change, but
    gathers lose static sizes, e.g. a known batch of 0)."""

    def restore(new_tensor: tf.Tensor, old_tensor: tf.Tensor) -> tf.Tensor:
        new_tensor.set_shape(old_tensor.shape)
        return new_tensor

    return tf.nest.map_structure(restore, new, old)
