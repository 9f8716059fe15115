"""Lexically constrained beam search's bookkeeping: dynamic beam allocation (Post & Vilar,
2018) in the vectorized form of Hu et al. (2019), model-free as `search` is.

A sentence's constraints are target phrases that its translation must contain, in any order:
`[batch, C, L]` int32 ids, each phrase's pieces PAD-padded (a phrase of no pieces is absent, so
sentences of a batch may have any number of them). Each hypothesis carries its `Progress`: the
phrases it has placed, and the phrase it is in the middle of with how many of its pieces it has
matched. A token that continues that phrase advances it (its last piece places it); any other
token abandons it and may start a phrase not yet placed (the first such phrase whose first
piece it is; a phrase of one piece is placed at once). A hypothesis may end (EOS) only when it
has placed every phrase; at its sentence's length limit it ends regardless, and the phrases it
did not place are reported (`unplaced`).

At each step (`choose`) the candidates are the plain beam's (the `beam_size` best extensions of
the sentence's hypotheses), every hypothesis' extension by each piece that would advance its
constraints (the next piece of its phrase in progress, the first piece of each phrase not
placed) and every hypothesis' single best extension. They are grouped in banks by how many
constraint pieces they have placed or matched; the beam takes the best candidate of each bank,
highest bank first, then the second best of each, and so on (a bank with too few candidates
leaves its slots to the others). A sentence without constraints has one bank: its beam is
exactly the plain beam's.
"""
from __future__ import annotations

from typing import NamedTuple, Optional

import tensorflow as tf

from keras_transformer.config import PAD_ID

NEG_INF = -float("inf")
_LAST = 2 ** 28  # orders after every ranked candidate (ranks times banks stay far below)


class Progress(NamedTuple):
    """Each hypothesis' constraint state, `[batch, n]` hypotheses of `C` phrases.

    placed: `[batch, n, C]` bool, the phrases it contains.
    phrase: `[batch, n]` int32, the phrase whose first `matched` pieces it ends with (-1: none).
    matched: `[batch, n]` int32.
    """

    placed: tf.Tensor
    phrase: tf.Tensor
    matched: tf.Tensor


def padded(constraints: tf.Tensor) -> tf.Tensor:
    """`constraints` `[batch, C, L]` with one absent phrase and one PAD piece more, so that
    every phrase (even of a batch with none) has a PAD after its last piece."""
    return tf.pad(tf.cast(constraints, tf.int32), [[0, 0], [0, 1], [0, 1]],
                  constant_values=PAD_ID)


def phrase_lengths(constraints: tf.Tensor) -> tf.Tensor:
    """`[batch, C]` int32: the pieces of each phrase (0: absent)."""
    return tf.reduce_sum(tf.cast(tf.not_equal(constraints, PAD_ID), tf.int32), axis=2)


def start(constraints: tf.Tensor, hypotheses: int) -> Progress:
    """The progress of `hypotheses` fresh hypotheses per sentence: nothing placed."""
    batch, count = tf.shape(constraints)[0], tf.shape(constraints)[1]
    return Progress(tf.zeros([batch, hypotheses, count], tf.bool),
                    tf.fill([batch, hypotheses], -1), tf.zeros([batch, hypotheses], tf.int32))


def unplaced(progress: Progress, lengths: tf.Tensor) -> tf.Tensor:
    """`[batch, n, C]` bool: the phrases each hypothesis has not placed."""
    return tf.logical_and(lengths[:, None] > 0, tf.logical_not(progress.placed))


def complete(progress: Progress, lengths: tf.Tensor) -> tf.Tensor:
    """`[batch, n]` bool: the hypotheses that have placed every phrase."""
    return tf.logical_not(tf.reduce_any(unplaced(progress, lengths), axis=2))


def pieces_met(progress: Progress, lengths: tf.Tensor) -> tf.Tensor:
    """`[batch, n]` int32: the constraint pieces each hypothesis has placed or matched (its
    bank)."""
    placed = tf.reduce_sum(tf.where(progress.placed, lengths[:, None], 0), axis=2)
    return placed + progress.matched


def gather_progress(progress: Progress, rows: tf.Tensor) -> Progress:
    """The progress of hypotheses `rows` `[batch, m]` (indices among each sentence's)."""
    return Progress(*(tf.gather(part, rows, batch_dims=1) for part in progress))


def advanced(progress: Progress, tokens: tf.Tensor, constraints: tf.Tensor,
             lengths: tf.Tensor) -> Progress:
    """The progress of hypotheses `[batch, m]` after each emits its token of `tokens`
    (`[batch, m]` int32 ids; the module docstring's rules): `progress` is theirs before the
    tokens, `constraints` the phrases `[batch, C, L]` (`padded`) and `lengths` their lengths
    `[batch, C]` (`phrase_lengths`); the result is their `Progress` after the tokens."""
    count = tf.shape(constraints)[1]
    phrase = tf.maximum(progress.phrase, 0)
    pieces = tf.gather(constraints, phrase, batch_dims=1)  # [batch, m, L]
    expected = tf.gather(pieces, progress.matched, batch_dims=2)
    continues = (progress.phrase >= 0) & tf.equal(tokens, expected)
    finishes = continues & tf.equal(progress.matched + 1,
                                    tf.gather(lengths, phrase, batch_dims=1))
    starts = (tf.equal(constraints[:, None, :, 0], tokens[:, :, None])
              & tf.logical_not(progress.placed) & (lengths[:, None] > 0))  # [batch, m, C]
    restarts = tf.logical_not(continues) & tf.reduce_any(starts, axis=2)
    started = tf.argmax(tf.cast(starts, tf.int32), axis=2, output_type=tf.int32)
    one_piece = tf.equal(tf.gather(lengths, started, batch_dims=1), 1)
    placed = (progress.placed
              | (finishes[:, :, None] & tf.one_hot(phrase, count, True, False, dtype=tf.bool))
              | ((restarts & one_piece)[:, :, None]
                 & tf.one_hot(started, count, True, False, dtype=tf.bool)))
    goes_on = continues & tf.logical_not(finishes)
    opens = restarts & tf.logical_not(one_piece)
    return Progress(placed,
                    tf.where(goes_on, progress.phrase, tf.where(opens, started, -1)),
                    tf.where(goes_on, progress.matched + 1, tf.where(opens, 1, 0)))


def candidate_indices(ids: tf.Tensor, vocabulary_ids: Optional[tf.Tensor], candidates
                      ) -> tuple[tf.Tensor, tf.Tensor]:
    """`(indices, found)`: the indices of token `ids` among the scored candidates (`range(
    candidates)`, or `vocabulary_ids`), and whether each is scored at all."""
    if vocabulary_ids is None:
        return ids, (ids >= 0) & (ids < candidates)
    equal = tf.equal(ids[..., None], vocabulary_ids)
    return (tf.argmax(tf.cast(equal, tf.int32), axis=-1, output_type=tf.int32),
            tf.reduce_any(equal, axis=-1))


def choose(totals: tf.Tensor, progress: Progress, constraints: tf.Tensor, beam_size: int,
           vocabulary_ids: Optional[tf.Tensor] = None, eos_index: Optional[tf.Tensor] = None
           ) -> tuple[tf.Tensor, tf.Tensor, tf.Tensor, Progress]:
    """One step's beam by dynamic beam allocation (the module docstring): of `totals`
    `[batch, k, n]` (each hypothesis' log-probability plus each candidate's) and the `k` hypotheses'
    `progress`, the `beam_size` hypotheses kept per sentence as
    `(log_probs, origins, indices, progress)`, best bank first: their totals, the hypotheses they
    extend, their candidate indices and their progress.

    `constraints` are the phrases `[batch, C, L]` (`padded`); `vocabulary_ids`, optional `[n]`, the
    ids the candidates are (default `range(n)`); `eos_index` the index of EOS among the candidates,
    closed to hypotheses that have not placed every phrase (None: no end of sentence).
    """
    batch, hypotheses, candidates = (tf.shape(totals)[i] for i in range(3))
    lengths = phrase_lengths(constraints)
    if eos_index is not None:
        closed = tf.logical_not(complete(progress, lengths))[:, :, None] & tf.equal(
            tf.range(candidates), eos_index)
        totals = tf.where(closed, NEG_INF, totals)
    flat_totals = tf.reshape(totals, [batch, -1])
    _, best = tf.math.top_k(flat_totals, k=beam_size)  # the plain beam's, in its order
    expected = tf.gather(tf.gather(constraints, tf.maximum(progress.phrase, 0), batch_dims=1),
                         progress.matched, batch_dims=2)
    expected = tf.where(progress.phrase >= 0, expected, PAD_ID)
    firsts = tf.where(unplaced(progress, lengths), constraints[:, None, :, 0], PAD_ID)
    pieces = tf.concat([expected[:, :, None], firsts], axis=2)  # [batch, k, 1 + C]
    piece_indices, found = candidate_indices(pieces, vocabulary_ids, candidates)
    rows = tf.broadcast_to(tf.range(hypotheses)[None, :, None], tf.shape(pieces))
    own_best = tf.argmax(totals, axis=2, output_type=tf.int32)  # [batch, k]
    flat = tf.concat([best, tf.reshape(rows * candidates + piece_indices, [batch, -1]),
                      tf.range(hypotheses)[None] * candidates + own_best], axis=1)  # [b, M]
    scores = tf.gather(flat_totals, flat, batch_dims=1)
    size = tf.shape(flat)[1]
    position = tf.range(size)[None]
    # The plain beam's candidates always; the others where scored, finite and new.
    offered = tf.concat([tf.ones_like(best, tf.bool),
                         tf.reshape(found & tf.not_equal(pieces, PAD_ID), [batch, -1]),
                         tf.ones_like(own_best, tf.bool)], axis=1)
    offered &= (position < beam_size) | (scores > NEG_INF)
    earlier = tf.range(size)[:, None] < tf.range(size)[None, :]  # [i, j]: i before j
    keys = tf.where(offered, flat, -1 - position)  # the ones not offered: all distinct
    repeated = tf.reduce_any(tf.equal(keys[:, :, None], keys[:, None, :]) & earlier, axis=1)
    offered &= tf.logical_not(repeated)

    origins, indices = flat // candidates, flat % candidates
    tokens = indices if vocabulary_ids is None else tf.gather(vocabulary_ids, indices)
    after = advanced(gather_progress(progress, origins), tokens, constraints, lengths)
    banks = pieces_met(after, lengths)
    ranked = offered & (scores > NEG_INF)
    better = (ranked[:, :, None] & tf.equal(banks[:, :, None], banks[:, None, :])
              & ((scores[:, :, None] > scores[:, None, :])
                 | (tf.equal(scores[:, :, None], scores[:, None, :]) & earlier)))
    rank = tf.reduce_sum(tf.cast(better, tf.int32), axis=1)
    top_bank = tf.reduce_max(tf.reduce_sum(lengths, axis=1))
    order = tf.where(ranked, rank * (top_bank + 1) + (top_bank - banks),
                     tf.where(offered, _LAST + position, 2 * _LAST + position))
    _, kept = tf.math.top_k(-order, k=beam_size)
    return (tf.gather(scores, kept, batch_dims=1), tf.gather(origins, kept, batch_dims=1),
            tf.gather(indices, kept, batch_dims=1), gather_progress(after, kept))
