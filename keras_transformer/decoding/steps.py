"""Next-token logits for a search: incremental (cached) or full recomputation (reference).

A search calls `steps(sequences, step, state) -> (logits, state)` with `sequences`
`[batch, beam, T + 1]` (BOS at position 0, the token at `step` being the newest) and
`logits` `[batch, beam, vocab]` (with `target_ids`, a shortlist's ids, `[batch, beam, n]` over
those ids), then `steps.reorder(state, origin)` once hypotheses have moved
(`origin[b, k]`: the beam that hypothesis `k` of sentence `b` extends).
"""
from __future__ import annotations

from typing import Any, Optional

import tensorflow as tf

from keras_transformer.model import Transformer, source_padding_mask


# The parts of `Transformer.init_decode_cache` that steps change.
LOOP_STATE = ("self", "ancestors")


class CachedSteps:
    """`model.decode_step` with the key/value cache: one position per step.

    Encoder keys/values are projected once per sentence and shared by its hypotheses; the
    self-attention caches stay where they were written: `reorder` gives each hypothesis the
    ancestors (cache rows of its positions) of the parent it extends.
    """

    def __init__(self, model: Transformer, source_ids: tf.Tensor, beam_size: int,
                 buffer_length: tf.Tensor, target_ids: Optional[tf.Tensor] = None):
        self.model = model
        self.beam_size = beam_size
        self.source_mask = source_padding_mask(source_ids)
        cache = model.init_decode_cache(model.encode(source_ids, training=False), beam_size,
                                        buffer_length)
        self.initial_state: Any = {name: cache.pop(name) for name in LOOP_STATE}
        self.fixed = cache  # The same for every step: encoder keys/values, output kernel.
        if target_ids is not None:  # Project onto the shortlist's ids only.
            cache["output_kernel"] = tf.gather(cache["output_kernel"], target_ids, axis=1)

    def __call__(self, sequences: tf.Tensor, step: tf.Tensor, state: Any):
        token_ids = tf.gather(sequences, step, axis=2)
        logits, cache = self.model.decode_step(token_ids, step,
                                               {**self.fixed, **state}, self.source_mask)
        return logits, {name: cache[name] for name in LOOP_STATE}

    def reorder(self, state: Any, origin: tf.Tensor) -> Any:
        batch = tf.shape(origin)[0]
        parents = tf.reshape(origin + tf.range(batch)[:, None] * self.beam_size, [-1])
        return {**state, "ancestors": tf.gather(state["ancestors"], parents)}


class RecomputeSteps:
    """Reference without cache: reruns the whole decoder (`model.decode`) on each prefix."""

    def __init__(self, model: Transformer, source_ids: tf.Tensor, beam_size: int,
                 buffer_length: tf.Tensor, target_ids: Optional[tf.Tensor] = None):
        del buffer_length  # Nothing is buffered.
        self.model = model
        self.target_ids = target_ids
        encoder_output = model.encode(source_ids, training=False)
        self.encoder_output = tf.repeat(encoder_output, beam_size, axis=0)
        self.source_mask = tf.repeat(source_padding_mask(source_ids), beam_size, axis=0)
        self.initial_state: Any = ()

    def __call__(self, sequences: tf.Tensor, step: tf.Tensor, state: Any):
        shape = tf.shape(sequences)
        prefix = tf.reshape(sequences[:, :, :step + 1], [shape[0] * shape[1], step + 1])
        logits = self.model.decode(prefix, self.encoder_output, self.source_mask,
                                   training=False)[:, -1]
        if self.target_ids is not None:
            logits = tf.gather(logits, self.target_ids, axis=-1)
        return tf.reshape(logits, [shape[0], shape[1], -1]), state

    def reorder(self, state: Any, origin: tf.Tensor) -> Any:
        del origin  # Prefixes are read from the reordered sequences themselves.
        return state


def make_steps(model: Transformer, source_ids: tf.Tensor, beam_size: int,
               buffer_length: tf.Tensor, use_cache: bool,
               target_ids: Optional[tf.Tensor] = None):
    """`CachedSteps` or, with `use_cache=False`, the `RecomputeSteps` reference; with
    `target_ids` (a shortlist's), logits over those ids only."""
    kind = CachedSteps if use_cache else RecomputeSteps
    return kind(model, source_ids, beam_size, buffer_length, target_ids)
