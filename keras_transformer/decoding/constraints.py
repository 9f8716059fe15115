"""What a decoder may output: per-sentence length limits, the ids it may never emit, and a
target prefix it must start with."""
from __future__ import annotations

from typing import Optional

import tensorflow as tf

from keras_transformer.search_settings import SearchSettings
from keras_transformer.vocab_ids import BOS_ID, PAD_ID


def prepare_search(source_ids, settings: SearchSettings, max_length: int,
                   prefix_ids: Optional[tf.Tensor] = None):
    """Returns `(source_ids, batch, limits, buffer_length)` for a search with `settings`.

    `limits` is `output_limits`, `buffer_length` is `output_buffer_length`; with `prefix_ids`
    both leave room for the prefix and at least one token after it (within `max_length`).
    """
    source_ids = tf.cast(source_ids, tf.int32)
    limits = output_limits(source_ids, settings.max_decode_extra, max_length)
    buffer_length = output_buffer_length(source_ids, settings.max_decode_extra, max_length)
    if prefix_ids is not None:
        prefix_lengths = tf.reduce_sum(tf.cast(tf.not_equal(prefix_ids, PAD_ID), tf.int32), 1)
        limits = tf.minimum(tf.maximum(limits, prefix_lengths + 1), max_length)
        buffer_length = tf.minimum(tf.maximum(buffer_length, tf.shape(prefix_ids)[1] + 1),
                                   max_length)
    return source_ids, tf.shape(source_ids)[0], limits, buffer_length


def output_limits(source_ids: tf.Tensor, max_decode_extra: int, max_length: int) -> tf.Tensor:
    """`[batch]` int32: at most `source length + max_decode_extra` output tokens (EOS included),
    capped at `max_length` and at least 1. Source length counts non-padding ids."""
    source_lengths = tf.reduce_sum(tf.cast(tf.not_equal(source_ids, PAD_ID), tf.int32), axis=1)
    return tf.clip_by_value(source_lengths + max_decode_extra, 1, max_length)


def output_buffer_length(source_ids: tf.Tensor, max_decode_extra: int, max_length: int) -> tf.Tensor:
    """Scalar int32 bound on every `output_limits` entry, derived from the padded source
    shape only (so that it is a compile-time constant under XLA)."""
    return tf.clip_by_value(tf.shape(source_ids)[1] + max_decode_extra, 1, max_length)


def scored_ids(logits: tf.Tensor, target_ids: Optional[tf.Tensor]) -> tf.Tensor:
    """The target id each entry of `logits`' last axis scores: `target_ids` (a shortlist's,
    see `decoding.shortlist`), or with None the whole vocabulary, `range(vocab)`."""
    return tf.range(tf.shape(logits)[-1]) if target_ids is None else target_ids


def emitted_ids(indices: tf.Tensor, target_ids: Optional[tf.Tensor]) -> tf.Tensor:
    """The target ids of `indices` into the scored axis (see `scored_ids`)."""
    return indices if target_ids is None else tf.gather(target_ids, indices)


def allowed_log_probs(logits: tf.Tensor, target_ids: Optional[tf.Tensor] = None) -> tf.Tensor:
    """Log-softmax over the last axis with PAD and BOS set to -inf (never generated).

    Over the full vocabulary (`target_ids` None) the log-probability of an emitted token is
    exactly the model's (the one teacher forcing gives); over a shortlist, it is renormalized.
    """
    log_probs = tf.nn.log_softmax(tf.cast(logits, tf.float32), axis=-1)
    banned = tf.reduce_any(tf.equal(scored_ids(logits, target_ids)[:, None],
                                    tf.constant([[PAD_ID, BOS_ID]])), axis=1)
    return tf.where(banned, tf.constant(-float("inf"), tf.float32), log_probs)


def force_prefix(log_probs: tf.Tensor, prefix_ids: Optional[tf.Tensor],
                 step: tf.Tensor, target_ids: Optional[tf.Tensor] = None) -> tf.Tensor:
    """`log_probs` `[batch, beam, vocab]` with every id but the prefix's at `step` set to -inf
    in sentences whose prefix is that long (the prefix token keeps the model's log-prob).

    `prefix_ids`: `[batch, P]` int32 target ids the output must start with, right-padded with
    PAD (a sentence with no prefix is all PAD); None leaves `log_probs` as they are.
    `target_ids`: the ids `log_probs` score (see `scored_ids`).
    """
    if prefix_ids is None:
        return log_probs
    prefix_ids = tf.cast(prefix_ids, tf.int32)
    padded = tf.pad(prefix_ids, [[0, 0], [0, 1]], constant_values=PAD_ID)
    forced = tf.gather(padded, tf.minimum(step, tf.shape(prefix_ids)[1]), axis=1)[:, None, None]
    others = tf.not_equal(scored_ids(log_probs, target_ids), forced)
    return tf.where(others & tf.not_equal(forced, PAD_ID), -float("inf"), log_probs)


def prefix_tensor(prefix_ids) -> Optional[tf.Tensor]:
    """`prefix_ids` as an int32 tensor (None stays None: no prefix, no extra work per step)."""
    return None if prefix_ids is None else tf.convert_to_tensor(prefix_ids, tf.int32)
