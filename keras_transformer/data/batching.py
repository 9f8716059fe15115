"""Length bucketing with token-budget batches, and the padding statistic that motivates it."""
from __future__ import annotations

import math

import tensorflow as tf

from keras_transformer.config import PAD_ID


def bucket_boundaries(max_length: int, width: int = 8, growth: float = 1.1) -> list[int]:
    """Return increasing padded lengths ending at ``max_length``.

    Boundaries step by ``width`` while that is finer than growing by ``growth``, then grow
    geometrically (rounded up to a multiple of ``width``), so few shapes cover long sentences.
    """
    if max_length < 1 or width < 1 or growth <= 1.0:
        raise ValueError(
            f"bucket_boundaries: need max_length >= 1, width >= 1, growth > 1; got "
            f"max_length={max_length}, width={width}, growth={growth}"
        )
    boundaries, bound = [], width
    while bound < max_length:
        boundaries.append(bound)
        bound = max(bound + width, math.ceil(bound * growth / width) * width)
    return boundaries + [max_length]


def bucket_by_token_budget(
    examples: tf.data.Dataset,
    batch_tokens: int,
    boundaries: list[int],
    batch_multiple: int = 1,
) -> tf.data.Dataset:
    """Batch ``(source, target_in, target_out)`` int32 vectors into padded token-budget batches.

    Each example goes to the smallest boundary >= its longest side; a bucket with padded
    length L holds ``batch_tokens // L`` examples (rounded down to a multiple of
    ``batch_multiple``), so every batch has at most ``batch_tokens`` source and target
    positions, padding included. Padded lengths are always boundaries, so shapes repeat
    (only each bucket's last, partial batch of an epoch is smaller: nothing is dropped).
    Examples longer than the last boundary must have been filtered out already.
    """
    if batch_tokens < boundaries[-1] * batch_multiple:
        raise ValueError(
            f"batch_tokens={batch_tokens} cannot hold {batch_multiple} example(s) of the "
            f"maximum length {boundaries[-1]}; raise batch_tokens or lower max_length"
        )
    sizes = [batch_tokens // bound // batch_multiple * batch_multiple for bound in boundaries]
    bounds_t = tf.constant(boundaries, tf.int32)
    sizes_t = tf.constant(sizes, tf.int64)

    def bucket_of(source: tf.Tensor, target_in: tf.Tensor, target_out: tf.Tensor) -> tf.Tensor:
        length = tf.maximum(tf.size(source), tf.size(target_in))
        return tf.reduce_sum(tf.cast(bounds_t < length, tf.int64))

    def batch_bucket(bucket: tf.Tensor, window: tf.data.Dataset) -> tf.data.Dataset:
        shape = tf.reshape(tf.cast(tf.gather(bounds_t, bucket), tf.int64), [1])
        return window.padded_batch(
            tf.gather(sizes_t, bucket),
            padded_shapes=(shape, shape, shape),
            padding_values=PAD_ID,
        )

    return examples.group_by_window(
        key_func=bucket_of,
        reduce_func=batch_bucket,
        window_size_func=lambda bucket: tf.gather(sizes_t, bucket),
    )


def padding_fraction(dataset: tf.data.Dataset, max_batches: int | None = None) -> float:
    """Share of padding positions in the source and target-output tensors of a model dataset.

    ``dataset`` yields ``((source, target_in), target_out)`` as produced by
    ``make_training_dataset`` or ``make_eval_dataset``.
    """
    pads = total = 0
    for (source, _), target_out in dataset.take(-1 if max_batches is None else max_batches):
        for ids in (source, target_out):
            pads += int(tf.reduce_sum(tf.cast(ids == PAD_ID, tf.int64)))
            total += int(tf.size(ids))
    if total == 0:
        raise ValueError("padding_fraction: the dataset yielded no batches")
    return pads / total
