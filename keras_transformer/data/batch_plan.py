"""Which pairs of prepared data make up each training batch, epoch after epoch, from the seed.

Epoch `e` visits the shards in a seeded order; within a shard (a uniform random sample of the
corpus, `prepare`) the pairs are shuffled, grouped by length bucket, cut into token-budget
batches (a bucket of padded length L holds `batch_tokens // L` pairs: the rule of
`bucket_by_token_budget`), and the shard's batches are shuffled. The number of batches of
every shard follows from the manifest's length histograms, so the batch at any position of the
endless stream, (epoch, shard, offset), is found without reading the data before it: a
restart costs the same at step 100,000 as at step 0. Only the batches a caller wants are
read and padded, so each worker of a cluster reads the ids of its own batches alone.
"""
from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Optional

import numpy as np
import tensorflow as tf

from keras_transformer.data.batching import bucket_boundaries
from keras_transformer.data.token_storage import Shard, ShardInfo, TokenStorage
from keras_transformer.config import BOS_ID, EOS_ID, PAD_ID, UNK_ID

# ((source, target_in), target_out), and the alignment targets for storage of piece links
Batch = tuple[np.ndarray | tuple[np.ndarray, np.ndarray], ...]


class BatchPlan:
    """The endless, seeded stream of token-budget batches over `storage`, the `TokenStorage` of the
    prepared pairs.

    A batch has at most `batch_tokens` source (and target) positions, padding included; pairs whose
    longer side exceeds `max_length` ids (with its EOS/BOS) are left out. `seed` fixes every epoch's
    order; `bucket_width` is the step of the bucket boundaries (`bucket_boundaries`). `word_dropout`
    is the probability `drop_words` replaces a piece by UNK (0: never), drawn from the seed and the
    batch's position in the stream, so a resume gives the same.
    """

    def __init__(self, storage: TokenStorage, batch_tokens: int, max_length: int, seed: int,
                 bucket_width: int = 8, word_dropout: float = 0.0):
        self.storage, self.max_length, self.seed = storage, max_length, seed
        self.word_dropout = word_dropout
        self.boundaries = np.array(bucket_boundaries(max_length, width=bucket_width))
        check_batch_tokens(batch_tokens, max_length)
        self.sizes = batch_tokens // self.boundaries
        self.shard_batches = np.array([self._batch_count(info) for info in storage.shards],
                                      np.int64)
        self.batches_per_epoch = int(self.shard_batches.sum())
        if self.batches_per_epoch == 0:
            raise ValueError(f"{storage.directory}: no stored pair is at most max_length="
                             f"{max_length} ids long")

    @property
    def pairs_per_epoch(self) -> int:
        """Pairs an epoch trains on (those within `max_length`)."""
        return sum(count for info in self.storage.shards
                   for length, count in info.longest.items() if length <= self.max_length)

    def shard_order(self, epoch: int) -> np.ndarray:
        """The order epoch `epoch` visits the shards in."""
        generator = np.random.default_rng([self.seed, epoch, 0])
        return generator.permutation(len(self.storage.shards))

    def batches_of_shard(self, epoch: int, index: int,
                         shard: Shard) -> list[tuple[int, np.ndarray]]:
        """Shard `index`'s batches in epoch `epoch`, in training order: (bucket, pair indices)."""
        generator = np.random.default_rng([self.seed, epoch, 1, index])
        longest = shard.lengths.max(axis=1) + 1
        order = generator.permutation(len(longest))
        order = order[longest[order] <= self.max_length]
        buckets = np.searchsorted(self.boundaries, longest[order])
        by_bucket = np.argsort(buckets, kind="stable")
        order, buckets = order[by_bucket], buckets[by_bucket]
        batches = []
        for bucket in np.unique(buckets).tolist():
            members = order[buckets == bucket]
            size = int(self.sizes[bucket])
            batches += [(bucket, members[start:start + size])
                        for start in range(0, len(members), size)]
        return [batches[i] for i in generator.permutation(len(batches))]

    def locate(self, element: int) -> tuple[int, int, int]:
        """Where element `element` (from 0) of the stream is: (epoch, position in that epoch's
        shard order, offset among that shard's batches)."""
        epoch, rest = divmod(element, self.batches_per_epoch)
        ends = np.cumsum(self.shard_batches[self.shard_order(epoch)])
        position = int(np.searchsorted(ends, rest, side="right"))
        return epoch, position, rest - int(ends[position - 1] if position else 0)

    def elements(self, first: int = 0,
                 wanted: Optional[Callable[[int], bool]] = None) -> Iterator[tuple[int, Batch]]:
        """The stream from element `first` on, endless: (element, padded batch) for each
        element `wanted` accepts (default: all); the others are skipped unread."""
        epoch, position, offset = self.locate(first)
        element = first
        while True:
            order = self.shard_order(epoch)
            for index in order[position:].tolist():
                shard = self.storage.load_shard(index)
                for bucket, members in self.batches_of_shard(epoch, index, shard)[offset:]:
                    if wanted is None or wanted(element):
                        batch = padded_batch(shard, members, int(self.boundaries[bucket]))
                        if self.word_dropout:
                            batch = drop_words(batch, self.word_dropout,
                                               np.random.default_rng([self.seed, element, 2]))
                        yield element, batch
                    element += 1
                offset = 0
            epoch, position = epoch + 1, 0

    def dataset(self, first: int = 0,
                wanted: Optional[Callable[[int], bool]] = None) -> tf.data.Dataset:
        """`elements` as a `tf.data.Dataset` of `((source, target_in), target_out)` (and the
        alignment targets, storage of piece links)."""
        return stream_dataset(self.elements, first, wanted, links=self.storage.has_links)

    def _batch_count(self, info: ShardInfo) -> int:
        lengths = np.array([length for length in info.longest if length <= self.max_length],
                           np.int64)
        if not len(lengths):
            return 0
        counts = np.array([info.longest[length] for length in lengths.tolist()], np.int64)
        pairs = np.bincount(np.searchsorted(self.boundaries, lengths), weights=counts,
                            minlength=len(self.boundaries))
        return int(np.sum(np.ceil(pairs / self.sizes)))


def stream_dataset(elements: Callable[[int, Optional[Callable[[int], bool]]],
                                      Iterator[tuple[int, Batch]]],
                   first: int, wanted: Optional[Callable[[int], bool]],
                   links: bool = False) -> tf.data.Dataset:
    """The batches of `elements(first, wanted)` (a plan's stream) as a prefetched
    `tf.data.Dataset` of `((source, target_in), target_out)`, with `links` also their
    `alignment_targets`."""
    spec = tf.TensorSpec([None, None], tf.int32)
    signature = ((spec, spec), spec) + ((tf.TensorSpec([None, None, None], tf.float32),)
                                        if links else ())
    return tf.data.Dataset.from_generator(
        lambda: (batch for _, batch in elements(first, wanted)),
        output_signature=signature).prefetch(tf.data.AUTOTUNE)


def check_batch_tokens(batch_tokens: int, max_length: int) -> None:
    """Refuses (ValueError naming both) a batch budget of `batch_tokens` positions that cannot
    hold one pair of `max_length` ids (the last bucket's padded length)."""
    if batch_tokens < max_length:
        raise ValueError(f"batch_tokens={batch_tokens} cannot hold one pair of the maximum "
                         f"length {max_length}; raise batch_tokens or lower max_length")


def padded_batch(shard: Shard, members: np.ndarray, length: int) -> Batch:
    """The model's batch of pairs `members` of `shard`: sources + EOS, BOS + targets and
    targets + EOS, int32, padded to `length` (one gather from the ids for the whole batch);
    for a shard of piece links, then their `alignment_targets`."""
    source_lengths, target_lengths = shard.lengths[members].T
    starts = shard.starts[members]
    columns = np.arange(length)
    if len(shard.ids) == 0:
        sources = targets = np.zeros([len(members), length], np.int32)
    else:
        def gathered(first: np.ndarray) -> np.ndarray:
            at = np.minimum(first[:, None] + columns, len(shard.ids) - 1)
            return shard.ids[at].astype(np.int32)
        sources, targets = gathered(starts), gathered(starts + source_lengths)
    source = np.where(columns < source_lengths[:, None], sources, PAD_ID)
    target_out = np.where(columns < target_lengths[:, None], targets, PAD_ID)
    source[np.arange(len(members)), source_lengths] = EOS_ID
    target_in = np.concatenate([np.full([len(members), 1], BOS_ID), target_out[:, :-1]],
                               axis=1)
    target_out[np.arange(len(members)), target_lengths] = EOS_ID
    batch = ((source.astype(np.int32), target_in.astype(np.int32)), target_out.astype(np.int32))
    return (*batch, alignment_targets(shard, members, length)) if shard.has_links else batch


def alignment_targets(shard: Shard, members: np.ndarray, length: int) -> np.ndarray:
    """What guided alignment trains the attention of pairs `members` of `shard` toward,
    `[pairs, length, length]` float32: row t (the query that predicts target piece t) spread
    evenly over the source pieces piece t is linked to; zeros for a piece linked to none."""
    targets = np.zeros([len(members), length, length], np.float32)
    for row, member in enumerate(members.tolist()):
        links = shard.links(member).astype(np.int64)
        targets[row, links[:, 1], links[:, 0]] = 1.0
    return targets / np.maximum(targets.sum(axis=2, keepdims=True), 1.0)


def drop_words(batch: Batch, rate: float, generator: np.random.Generator) -> Batch:
    """Word dropout (Sennrich et al., 2016): `batch` (`((source, target_in), target_out)` as
    `padded_batch` makes it) with each piece of the source and of the decoder input replaced by
    UNK with probability `rate`, the replacements drawn by `generator`, in new arrays (`batch` is
    unchanged); BOS, EOS, padding and the labels (`target_out`) are kept, so the model still
    predicts every true piece."""
    (source, target_in), *rest = batch

    def dropped(ids: np.ndarray) -> np.ndarray:
        replaced = (ids > EOS_ID) & (generator.random(ids.shape) < rate)
        return np.where(replaced, np.int32(UNK_ID), ids)

    return ((dropped(source), dropped(target_in)), *rest)
