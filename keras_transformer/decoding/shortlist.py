"""A vocabulary shortlist: the target ids a search scores for one batch of sources.

Without one, every decoding step projects onto the whole target vocabulary and runs the
log-softmax and top-k over it. With one, a search scores only the ids likely in this batch's
translations: the `frequent` most common target pieces, plus, for each piece of the batch's
sources, the `per_source` target pieces that co-occur with it most specifically in parallel data
(Dice coefficient over the sentence pairs containing each), plus EOS (and a forced prefix's ids).
The log-softmax is then over the shortlist, so scores and translations approximate the full
vocabulary's: an export option (`kt-export --shortlist`) whose speed and BLEU are measured in
benchmarks/RESULTS.md. CTranslate2 calls this a vocabulary map.
"""
from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Optional

import numpy as np
import tensorflow as tf

from keras_transformer.config import EOS_ID, PAD_ID

_CHUNK_PAIRS = 20_000_000  # (source, target) id pairs counted at once


class VocabularyShortlist(tf.Module):
    """`frequent_ids` `[n]` and `candidates` `[vocab, per_source]` (PAD where a source id has
    fewer) of target ids below `target_vocab_size` (default: the candidates' rows, one
    vocabulary for both sides), stored as variables so that an export saves them."""

    def __init__(self, frequent_ids: Sequence[int] | np.ndarray,
                 candidates: Sequence[Sequence[int]] | np.ndarray,
                 name: str = "vocabulary_shortlist", target_vocab_size: Optional[int] = None):
        super().__init__(name=name)
        candidates = np.asarray(candidates, np.int32)
        frequent_ids = np.asarray(frequent_ids, np.int32).reshape([-1])
        if candidates.ndim != 2 or 0 in candidates.shape:
            raise ValueError(f"candidates: expected a [vocab, per_source] table, got shape "
                             f"{list(candidates.shape)}")
        self.target_vocab_size = target_vocab_size or candidates.shape[0]
        for what, ids in (("frequent_ids", frequent_ids), ("candidates", candidates)):
            if ids.size and not (ids.min() >= 0 and ids.max() < self.target_vocab_size):
                raise ValueError(f"{what}: ids must lie in [0, {self.target_vocab_size}) (the "
                                 "target vocabulary)")
        self.frequent_ids = tf.Variable(frequent_ids, trainable=False, name="frequent_ids")
        self.candidates = tf.Variable(candidates, trainable=False, name="candidates")

    @property
    def vocab_size(self) -> int:
        return int(self.candidates.shape[0])

    def target_ids(self, source_ids: tf.Tensor,
                   prefix_ids: Optional[tf.Tensor] = None) -> tf.Tensor:
        """Sorted unique `[n]` int32 ids a search over `source_ids` `[batch, len]` scores: the
        frequent ids, every source id's candidates, EOS and `prefix_ids`' ids, and PAD (the
        table's filler; searches never emit PAD or BOS, but keep them in the normalization,
        so that a shortlist of every id searches exactly like none)."""
        ids, _ = tf.unique(self._listed_ids(source_ids, prefix_ids))
        return tf.sort(ids)

    def padded_target_ids(self, source_ids: tf.Tensor, prefix_ids: Optional[tf.Tensor] = None
                          ) -> tuple[tf.Tensor, tf.Tensor]:
        """`target_ids` in a vector whose size depends only on the input shapes (what XLA
        compiles): `(ids, unscored)`, `ids` `[m]` int32 holding the target ids in ascending
        order, then other ids of the vocabulary that only fill it to `m` (flagged in
        `unscored` `[m]` bool), where `m` bounds the target ids' count: the frequent ids, the
        sources' and prefixes' ids times their candidates, PAD and EOS, at most the
        vocabulary."""
        listed = self._listed_ids(source_ids, prefix_ids)
        member = tf.scatter_nd(listed[:, None], tf.ones_like(listed),
                               [self.target_vocab_size]) > 0
        # From the input shapes: a constant when XLA compiles, even where tracing saw none.
        size = tf.minimum(self.target_vocab_size, tf.shape(listed)[0])
        ids = tf.argsort(tf.cast(tf.logical_not(member), tf.int32), stable=True)[:size]
        return ids, tf.logical_not(tf.gather(member, ids))

    def _listed_ids(self, source_ids: tf.Tensor, prefix_ids: Optional[tf.Tensor]) -> tf.Tensor:
        """The ids `target_ids` holds, with repeats: `[len(frequent) + sources * per_source +
        2 (+ prefixes)]`."""
        source_ids = tf.cast(source_ids, tf.int32)
        # Padding lists nothing (whatever the table's PAD row holds): a sentence's shortlist
        # does not depend on its batch.
        candidates = tf.where(tf.not_equal(source_ids, PAD_ID)[..., None],
                              tf.gather(self.candidates, source_ids), PAD_ID)
        parts = [self.frequent_ids, tf.reshape(candidates, [-1]), tf.constant([PAD_ID, EOS_ID])]
        if prefix_ids is not None:
            parts.append(tf.reshape(tf.cast(prefix_ids, tf.int32), [-1]))
        return tf.concat(parts, axis=0)


def build_shortlist(source_ids: Iterable[Sequence[int]], target_ids: Iterable[Sequence[int]],
                    vocab_size: int, frequent: int, per_source: int,
                    target_vocab_size: Optional[int] = None) -> VocabularyShortlist:
    """A `VocabularyShortlist` from line-aligned id sequences of a parallel corpus, `source_ids`
    (each pair's source ids, below `vocab_size`, the source vocabulary's size) and `target_ids`
    (each pair's target ids, below `target_vocab_size`, the target vocabulary's size; default
    `vocab_size`, one vocabulary for both sides): the `frequent` most common target ids (by token
    count) and, per source id, the `per_source` target ids of highest Dice coefficient 2 c(s, t)
    / (c(s) + c(t)): c(s, t) counts the sentence pairs whose source holds s and whose target
    holds t, c(s) those whose source holds s, c(t) those whose target holds t."""
    if frequent < 0 or per_source < 1:
        raise ValueError(f"shortlist: needs frequent >= 0 and per_source >= 1, got "
                         f"{frequent} and {per_source}")
    target_size = target_vocab_size or vocab_size
    token_counts = np.zeros(target_size, np.int64)
    source_counts = np.zeros(vocab_size, np.int64)
    target_counts = np.zeros(target_size, np.int64)
    chunks, pending, pending_pairs = [], [], 0
    for line, (source, target) in enumerate(zip(source_ids, target_ids, strict=True), start=1):
        source, target = np.asarray(source, np.int64), np.asarray(target, np.int64)
        if source.max(initial=0) >= vocab_size or target.max(initial=0) >= target_size:
            raise ValueError(f"shortlist data, pair {line}: ids beyond the vocabulary of "
                             f"{vocab_size} source and {target_size} target ids")
        np.add.at(token_counts, target, 1)
        source, target = np.unique(source), np.unique(target)
        source_counts[source] += 1
        target_counts[target] += 1
        pending.append((source[:, None] * target_size + target[None, :]).reshape([-1]))
        pending_pairs += pending[-1].size
        if pending_pairs >= _CHUNK_PAIRS:
            chunks.append(_counted(np.concatenate(pending)))
            pending, pending_pairs = [], 0
    if pending:
        chunks.append(_counted(np.concatenate(pending)))
    candidates = np.full([vocab_size, per_source], PAD_ID, np.int32)
    if chunks:
        keys, counts = _merged(chunks)
        sources, targets = keys // target_size, keys % target_size
        dice = 2.0 * counts / (source_counts[sources] + target_counts[targets])
        order = np.lexsort((targets, -dice, sources))  # per source: best first, ties by id
        sources, targets = sources[order], targets[order]
        first = np.searchsorted(sources, sources, side="left")
        rank = np.arange(sources.size) - first
        keep = rank < per_source
        candidates[sources[keep], rank[keep]] = targets[keep]
    by_count = np.lexsort((np.arange(target_size), -token_counts))
    frequent_ids = by_count[:frequent][token_counts[by_count[:frequent]] > 0]
    return VocabularyShortlist(frequent_ids, candidates, target_vocab_size=target_size)


def _counted(keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    return np.unique(keys, return_counts=True)


def _merged(chunks: list[tuple[np.ndarray, np.ndarray]]) -> tuple[np.ndarray, np.ndarray]:
    """One (unique keys, counts) from several."""
    if len(chunks) == 1:
        return chunks[0]
    keys, inverse = np.unique(np.concatenate([keys for keys, _ in chunks]), return_inverse=True)
    counts = np.bincount(inverse, weights=np.concatenate([counts for _, counts in chunks]))
    return keys, counts.astype(np.int64)
