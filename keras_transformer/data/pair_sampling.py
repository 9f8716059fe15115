"""Batches of several language pairs, each pair drawn by temperature, from the seed.

Each pair has its own storage and `BatchPlan`; element `n` of the stream is a batch of one
pair: pair `i` with probability `share_i`, proportional to `b_i ** (1 / T)`, where `b_i` is
the pair's batches per epoch (token-budget batches: its size in tokens). T = 1 draws the pairs
in proportion to their size, as one corpus of all of them would; T -> infinity draws them
uniformly; in between, small pairs are drawn more often than their size (Arivazhagan et al.,
2019; fairseq's `--sampling-temperature`). The draws come in blocks of `BLOCK` elements, each
block from the seed and its number, and the pair's own batches follow its plan in order: the
element at any position, and the position in each pair's plan, follow from counting the
draws before it (no data read), so a resume and per-worker reading work as with one
`BatchPlan`.
"""
from __future__ import annotations

import bisect
from collections.abc import Callable, Iterator, Sequence
from typing import Optional

import numpy as np
import tensorflow as tf

from keras_transformer.data.batch_plan import Batch, BatchPlan, stream_dataset
from keras_transformer.config import PAD_ID

BLOCK = 4096  # elements drawn at a time


def temperature_shares(sizes: Sequence[int], temperature: float) -> np.ndarray:
    """Each pair's probability of being drawn: `size ** (1 / temperature)`, normalized
    (computed in logarithms, so large sizes and small temperatures do not overflow);
    `temperature` inf gives every pair the same share."""
    if not temperature > 0:
        raise ValueError(f"temperature: must be positive, got {temperature}")
    if min(sizes) < 1:
        raise ValueError(f"sizes: must be positive, got {list(sizes)}")
    logits = np.log(np.asarray(sizes, np.float64)) / temperature
    weights = np.exp(logits - logits.max())
    return weights / weights.sum()


class PairSampling:
    """The endless, seeded stream of batches over several pairs' `BatchPlan`s: `plans`, each pair's
    plan by the pair's name (in the order of the shares), sampled at the temperature `temperature`
    (T of `temperature_shares`), the pairs drawn from `seed`.

    `prefixes` holds, by pair name, the ids its storage put before every source and every target (a
    target-language token, `languages`): kept whole in its batches (word dropout replaces none of
    them), and a target's never a label (the decoder reads it but is not trained to predict it).
    """

    def __init__(self, plans: dict[str, BatchPlan], temperature: float, seed: int,
                 prefixes: Optional[dict[str, tuple[Sequence[int], Sequence[int]]]] = None):
        if not plans:
            raise ValueError("plans: give at least one pair's")
        self.plans = dict(plans)
        self.names = list(self.plans)
        self.temperature, self.seed = temperature, seed
        self.prefixes = [(prefixes or {}).get(name, ((), ())) for name in self.names]
        self.shares = temperature_shares([plan.batches_per_epoch for plan in self.plans.values()],
                                         temperature)
        self._bounds = np.cumsum(self.shares)
        self._ends: list[np.ndarray] = []  # per block: each pair's elements up to its end
        self._cached: tuple[int, np.ndarray] = (-1, np.zeros([0], np.int64))

    @property
    def max_length(self) -> int:
        """The plans' (one model's)."""
        return next(iter(self.plans.values())).max_length

    @property
    def batches_per_epoch(self) -> int:
        """The pairs' batches per epoch together: what one pass over all of them takes."""
        return sum(plan.batches_per_epoch for plan in self.plans.values())

    @property
    def pairs_per_epoch(self) -> int:
        """Pairs (sentence pairs) one pass over all of them trains on."""
        return sum(plan.pairs_per_epoch for plan in self.plans.values())

    def choices(self, block: int) -> np.ndarray:
        """The pair index of each element of block `block` (elements `block * BLOCK` on)."""
        if self._cached[0] != block:
            draws = np.random.default_rng([self.seed, block, 3]).random(BLOCK)
            picked = np.searchsorted(self._bounds, draws, side="right")
            self._cached = (block, np.minimum(picked, len(self.names) - 1))
        return self._cached[1]

    def counts_before(self, element: int) -> np.ndarray:
        """How many of the elements before `element` each pair has."""
        block, offset = divmod(element, BLOCK)
        self._extend(block)
        before = self._ends[block - 1] if block else np.zeros(len(self.names), np.int64)
        return before + np.bincount(self.choices(block)[:offset], minlength=len(self.names))

    def position(self, pair: int, index: int) -> int:
        """The element that is batch `index` (from 0) of pair `pair`'s plan."""
        while not self._ends or self._ends[-1][pair] <= index:
            self._extend(len(self._ends))
        block = bisect.bisect_right(self._ends, index, key=lambda ends: ends[pair])
        before = self._ends[block - 1][pair] if block else 0
        return block * BLOCK + int(np.flatnonzero(self.choices(block) == pair)[index - before])

    def elements(self, first: int = 0,
                 wanted: Optional[Callable[[int], bool]] = None) -> Iterator[tuple[int, Batch]]:
        """The stream from element `first` on, endless: (element, padded batch) for each
        element `wanted` accepts (default: all); the others are skipped unread."""
        starts = self.counts_before(first)
        streams = [plan.elements(int(starts[pair]),
                                 None if wanted is None else self._wanted_of(pair, wanted))
                   for pair, plan in enumerate(self.plans.values())]
        element = first
        while True:
            block, offset = divmod(element, BLOCK)
            for pair in self.choices(block)[offset:].tolist():
                if wanted is None or wanted(element):
                    _, batch = next(streams[pair])
                    yield element, with_prefixes(batch, *self.prefixes[pair])
                element += 1

    def pair_of(self, element: int) -> str:
        """The name of the pair element `element` is a batch of."""
        return self.names[int(self.choices(element // BLOCK)[element % BLOCK])]

    def dataset(self, first: int = 0,
                wanted: Optional[Callable[[int], bool]] = None) -> tf.data.Dataset:
        """`elements` as a `tf.data.Dataset` of `((source, target_in), target_out)`."""
        return stream_dataset(self.elements, first, wanted)

    def _wanted_of(self, pair: int, wanted: Callable[[int], bool]) -> Callable[[int], bool]:
        """`wanted` in the numbering of pair `pair`'s plan."""
        return lambda index: wanted(self.position(pair, index))

    def _extend(self, block: int) -> None:
        """Counts the draws of every block up to `block`."""
        while len(self._ends) <= block:
            counts = np.bincount(self.choices(len(self._ends)), minlength=len(self.names))
            self._ends.append(counts + (self._ends[-1] if self._ends else 0))


def with_prefixes(batch: Batch, source_prefix: Sequence[int],
                  target_prefix: Sequence[int]) -> Batch:
    """`batch`, whose every source starts with `source_prefix` and every target with
    `target_prefix`, with those ids as stored (whatever word dropout made of them) and the
    target prefix's labels padding (not trained on); the batch itself when both are empty."""
    if not (len(source_prefix) or len(target_prefix)):
        return batch
    (source, target_in), target_out = batch
    source, target_in, target_out = source.copy(), target_in.copy(), target_out.copy()
    if len(source_prefix):
        source[:, :len(source_prefix)] = source_prefix
    if len(target_prefix):
        target_in[:, 1:1 + len(target_prefix)] = target_prefix
        target_out[:, :len(target_prefix)] = PAD_ID
    return (source, target_in), target_out
