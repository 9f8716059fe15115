"""Strings -> in-graph subword ids -> model batches ``((source, target_in), target_out)``.

Sources get EOS appended; target_in is BOS + tokens and target_out is tokens + EOS. All
tensors are int32 and padded with PAD_ID (0).
"""
from __future__ import annotations

from collections.abc import Callable, Sequence

import tensorflow as tf

from keras_transformer.data.batching import bucket_boundaries, bucket_by_token_budget
from keras_transformer.data.tokenizer import SubwordTokenizer
from keras_transformer.config import BOS_ID, EOS_ID

_TOKENIZE_CHUNK = 512


def _check_pairs(sources: Sequence[str], targets: Sequence[str]) -> None:
    if len(sources) != len(targets):
        raise ValueError(
            f"sources has {len(sources)} sentences but targets has {len(targets)}"
        )
    if not sources:
        raise ValueError("sources and targets are empty")


def _with_token(ids: tf.RaggedTensor, token: int, first: bool) -> tf.RaggedTensor:
    """Prepend (``first``) or append ``token`` to every row of ``ids``."""
    column = tf.fill([ids.nrows(), 1], tf.constant(token, tf.int32))
    parts = [column, ids] if first else [ids, column]
    return tf.concat(parts, axis=1)


def _truncate(ids: tf.RaggedTensor, max_tokens: int | None) -> tf.RaggedTensor:
    return ids if max_tokens is None else ids[:, :max_tokens]


def _model_triples(
    tokenizer: SubwordTokenizer, max_length: int | None
) -> Callable[[tf.Tensor, tf.Tensor], tuple[tf.RaggedTensor, ...]]:
    """Return a batch map: strings -> ragged (source, target_in, target_out).

    With ``max_length`` set, over-long sequences are truncated to ``max_length`` ids.
    """
    keep = None if max_length is None else max_length - 1

    def triples(sources: tf.Tensor, targets: tf.Tensor) -> tuple[tf.RaggedTensor, ...]:
        source = _with_token(_truncate(tokenizer.tokenize(sources), keep), EOS_ID, first=False)
        target = _truncate(tokenizer.tokenize_target(targets), keep)
        return (source, _with_token(target, BOS_ID, first=True),
                _with_token(target, EOS_ID, first=False))

    return triples


def make_training_dataset(
    sources: Sequence[str],
    targets: Sequence[str],
    tokenizer: SubwordTokenizer,
    batch_tokens: int,
    max_length: int,
    seed: int,
    shuffle_buffer: int | None = None,
    bucket_width: int = 8,
    batch_multiple: int = 1,
) -> tf.data.Dataset:
    """One epoch of shuffled, length-bucketed training batches (call ``.repeat()`` for more).

    Pairs whose source or target exceeds ``max_length`` ids (EOS/BOS included) are dropped.
    Each batch holds at most ``batch_tokens`` source and ``batch_tokens`` target positions,
    padding included; pass the per-replica budget when distributing per replica, or a global
    budget with ``batch_multiple`` = replica count for ``experimental_distribute_dataset``.
    The order is fixed by ``seed`` and reshuffled each epoch; ``shuffle_buffer`` defaults
    to the whole corpus.
    """
    _check_pairs(sources, targets)
    boundaries = bucket_boundaries(max_length, width=bucket_width)
    triples = _model_triples(tokenizer, max_length=None)

    def short_triples(sources: tf.Tensor, targets: tf.Tensor) -> tuple[tf.RaggedTensor, ...]:
        source, target_in, target_out = triples(sources, targets)
        keep = tf.maximum(source.row_lengths(), target_in.row_lengths()) <= max_length
        return tuple(tf.ragged.boolean_mask(ids, keep) for ids in (source, target_in, target_out))

    examples = (
        tf.data.Dataset.from_tensor_slices((list(sources), list(targets)))
        .shuffle(shuffle_buffer or len(sources), seed=seed, reshuffle_each_iteration=True)
        .batch(_TOKENIZE_CHUNK)
        .map(short_triples, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
        .unbatch()
        # unbatch leaves ragged specs of rank 0; padded_batch needs plain tensor specs.
        .map(lambda *ids: ids)
    )
    batches = bucket_by_token_budget(examples, batch_tokens, boundaries, batch_multiple)
    return batches.map(_model_inputs).prefetch(tf.data.AUTOTUNE)


def make_eval_dataset(
    sources: Sequence[str],
    targets: Sequence[str],
    tokenizer: SubwordTokenizer,
    batch_size: int,
    max_length: int | None = None,
) -> tf.data.Dataset:
    """Fixed-size batches in corpus order, each padded to its longest sequence.

    Nothing is dropped: with ``max_length`` set, longer sequences are truncated to
    ``max_length`` ids (EOS/BOS included) instead.
    """
    _check_pairs(sources, targets)
    triples = _model_triples(tokenizer, max_length)
    return (
        tf.data.Dataset.from_tensor_slices((list(sources), list(targets)))
        .batch(batch_size)
        .map(lambda src, tgt: _model_inputs(*[ids.to_tensor() for ids in triples(src, tgt)]),
             num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
        .prefetch(tf.data.AUTOTUNE)
    )


def make_source_dataset(
    sources: Sequence[str],
    tokenizer: SubwordTokenizer,
    batch_size: int,
    max_length: int | None = None,
) -> tf.data.Dataset:
    """Batches of source ids (+EOS, 0-padded) in corpus order, for decoding."""
    if not sources:
        raise ValueError("sources is empty")
    keep = None if max_length is None else max_length - 1

    def encode(texts: tf.Tensor) -> tf.Tensor:
        ids = _truncate(tokenizer.tokenize(texts), keep)
        return _with_token(ids, EOS_ID, first=False).to_tensor()

    return (
        tf.data.Dataset.from_tensor_slices(list(sources))
        .batch(batch_size)
        .map(encode, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
        .prefetch(tf.data.AUTOTUNE)
    )


def _model_inputs(
    source: tf.Tensor, target_in: tf.Tensor, target_out: tf.Tensor
) -> tuple[tuple[tf.Tensor, tf.Tensor], tf.Tensor]:
    return (source, target_in), target_out
