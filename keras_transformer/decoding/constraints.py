"""What a decoder may output: per-sentence length limits and the ids it may never emit."""
import tensorflow as tf

from keras_transformer.search_settings import SearchSettings
from keras_transformer.vocab_ids import BOS_ID, PAD_ID


def prepare_search(source_ids, settings: SearchSettings, max_length: int):
    """Returns `(source_ids, batch, limits, buffer_length)` for a search with `settings`.

    `limits` is `output_limits`, `buffer_length` is `output_buffer_length`.
    """
    source_ids = tf.cast(source_ids, tf.int32)
    return (source_ids, tf.shape(source_ids)[0],
            output_limits(source_ids, settings.max_decode_extra, max_length),
            output_buffer_length(source_ids, settings.max_decode_extra, max_length))


def output_limits(source_ids: tf.Tensor, max_decode_extra: int, max_length: int) -> tf.Tensor:
    """`[batch]` int32: at most `source length + max_decode_extra` output tokens (EOS included),
    capped at `max_length` and at least 1. Source length counts non-padding ids."""
    source_lengths = tf.reduce_sum(tf.cast(tf.not_equal(source_ids, PAD_ID), tf.int32), axis=1)
    return tf.clip_by_value(source_lengths + max_decode_extra, 1, max_length)


def output_buffer_length(source_ids: tf.Tensor, max_decode_extra: int, max_length: int) -> tf.Tensor:
    """Scalar int32 bound on every `output_limits` entry, derived from the padded source
    shape only (so that it is a compile-time constant under XLA)."""
    return tf.clip_by_value(tf.shape(source_ids)[1] + max_decode_extra, 1, max_length)


def allowed_log_probs(logits: tf.Tensor) -> tf.Tensor:
    """Log-softmax over the last axis with PAD and BOS set to -inf (never generated).

    The normalization is over the full vocabulary, so the log-probability of an emitted token
    is exactly the model's (the one teacher forcing gives).
    """
    log_probs = tf.nn.log_softmax(tf.cast(logits, tf.float32), axis=-1)
    vocab = tf.shape(log_probs)[-1]
    banned = tf.reduce_any(
        tf.equal(tf.range(vocab)[:, None], tf.constant([[PAD_ID, BOS_ID]])), axis=1)
    return tf.where(banned, tf.constant(-float("inf"), tf.float32), log_probs)
