"""Greedy search, beam search (section 6.1) and sampling over a step function, each one
`tf.while_loop`.

The searches know nothing of the model. They call

    step(token_ids, position, state) -> (log_probs, state)

with the newest token of every hypothesis, `token_ids` `[batch, per sentence]` (the
hypotheses of each sentence: its beam, or its samples; the start token at position 0), and get
the log-probabilities of the next one, `[batch, per sentence, n]` over `n` candidate ids
(`vocabulary_ids`, default `range(n)`), plus the step's new state: any structure of tensors,
e.g. a key/value cache. When beam search moves hypotheses, the state follows them through
`reorder(state, parents)` (`parents[row]`: the flat `[batch * beam_size]` row that
hypothesis `row` extends); by default every tensor of the state is gathered along
its first axis (`gather_rows`), and a state laid out otherwise brings its own reorder.

Scores are GNMT-normalized: log-probability / `length_divisor(length, alpha)`. `ensemble`
makes one step function of several (models trained on the same vocabulary).
"""
from __future__ import annotations

import math
from typing import Any, Callable, NamedTuple, Optional, Sequence

import tensorflow as tf

from keras_transformer import constraints as constrained
from keras_transformer.config import BOS_ID, EOS_ID, PAD_ID

State = Any
StepFunction = Callable[[tf.Tensor, tf.Tensor, State], tuple[tf.Tensor, State]]
Reorder = Callable[[State, tf.Tensor], State]

NEG_INF = -float("inf")


class DecodeResult(NamedTuple):
    """n-best hypotheses per sentence, best first.

    ids: `[batch, n, length]` int32 without the start token; EOS (when emitted) then PAD.
    scores: `[batch, n]` float32, sum of token log-probs / `length_divisor(lengths, alpha)`;
        -inf for slots left empty.
    lengths: `[batch, n]` int32, emitted tokens including EOS.
    unplaced: of a constrained beam search, `[batch, n, C]` bool: the constraints each
        hypothesis does not contain (it reached its length limit first); else None.
    """

    ids: tf.Tensor
    scores: tf.Tensor
    lengths: tf.Tensor
    unplaced: Optional[tf.Tensor] = None


def length_divisor(length, alpha: float) -> tf.Tensor:
    """GNMT's length penalty (Wu et al., 2016) `((5 + length) / 6) ** alpha`, by which a
    hypothesis' log-probability is divided."""
    length = tf.cast(length, tf.float32)
    return tf.pow((5.0 + length) / 6.0, tf.cast(alpha, tf.float32))


def gather_rows(state: State, parents: tf.Tensor) -> State:
    """The default reorder: row `parents[i]` of every tensor of `state` becomes row `i`."""
    return tf.nest.map_structure(lambda tensor: tf.gather(tensor, parents), state)


def ensemble(members: Sequence[tuple[StepFunction, State, Reorder]]
             ) -> tuple[StepFunction, State, Reorder]:
    """`(step, state, reorder)` of an ensemble of `members` (each a step function over the same
    candidates, its initial state and its reorder): the log of the mean of the members'
    probabilities (as fairseq's and Marian's ensembles), a state holding each member's, each
    reordered by its own `reorder`."""
    steps, states, reorders = zip(*members)
    log_count = math.log(len(members))

    def step(token_ids, position, state):
        outputs = [member(token_ids, position, member_state)
                   for member, member_state in zip(steps, state)]
        log_probs = tf.reduce_logsumexp(tf.stack([log_probs for log_probs, _ in outputs]),
                                        axis=0) - log_count
        return log_probs, tuple(member_state for _, member_state in outputs)

    def reorder(state, parents):
        return tuple(member(member_state, parents)
                     for member, member_state in zip(reorders, state))

    return step, tuple(states), reorder


def beam(step: StepFunction, state: State, limits: tf.Tensor, buffer_length: tf.Tensor,
         beam_size: int, length_penalty: float = 0.6, eos_id: int = EOS_ID,
         prefix_ids: Optional[tf.Tensor] = None,
         vocabulary_ids: Optional[tf.Tensor] = None,
         reorder: Reorder = gather_rows,
         constraints: Optional[tf.Tensor] = None) -> DecodeResult:
    """The `beam_size` best hypotheses of each sentence, a `DecodeResult` with n = `beam_size` (and
    `unplaced` with `constraints`); build it inside a `tf.function`.

    Each position extends every alive hypothesis by every candidate and keeps the `beam_size` best
    per sentence; candidates ending in `eos_id`, or reaching their sentence's limit, join its
    finished n-best list. A sentence stops as soon as no alive hypothesis can beat its worst
    finished one, the loop when every sentence has. With `constraints`, the beam is allocated by the
    constraint pieces each hypothesis has met (`constraints.choose`), a hypothesis ends only when it
    contains every phrase (or at its limit), and the finished list ranks those that contain fewer
    after the others.

    `step` is the step function (module docstring), called with `[batch, beam_size]` tokens, and
    `state` its initial state, `batch * beam_size` rows; `reorder` moves the state's rows to the
    hypotheses that extend them. `limits`, `[batch]` int32, are the most tokens (EOS included) each
    sentence may emit; `buffer_length`, a scalar int32 >= every limit, the length of the output
    buffer. `length_penalty` is alpha of `length_divisor`; `eos_id` the end-of-sentence id (-1:
    none, every hypothesis runs to its limit). `prefix_ids`, optional `[batch, P]`, are ids every
    hypothesis starts with (PAD-padded); `vocabulary_ids`, optional `[n]`, the ids the step's
    log-probabilities score. `constraints`, optional `[batch, C, L]` int32, are target phrases each
    sentence's translation must contain (`keras_transformer.constraints`; PAD-padded, a phrase of no
    pieces is absent).
    """
    batch = tf.shape(limits)[0]
    positions = tf.range(buffer_length + 1)
    best_limit_penalty = length_divisor(limits, length_penalty)
    sequences = _start_sequences(batch, beam_size, buffer_length)
    first_beam_only = tf.concat([[0.0], tf.fill([beam_size - 1], NEG_INF)], axis=0)
    alive_log_probs = tf.tile(first_beam_only[None], [batch, 1])
    finished = (sequences, tf.fill([batch, beam_size], NEG_INF),
                tf.zeros([batch, beam_size], tf.int32))
    row_offsets = tf.range(batch)[:, None] * beam_size
    progress = ()
    if constraints is not None:
        given = tf.shape(constraints)[1]
        constraints = constrained.padded(constraints)
        phrase_lengths = constrained.phrase_lengths(constraints)
        progress = constrained.start(constraints, beam_size)
        finished += (constrained.unplaced(progress, phrase_lengths),)

    def advance(position, carried, done):
        sequences, alive_log_probs, finished, state, progress = carried
        log_probs, state = step(tf.gather(sequences, position, axis=2), position, state)
        totals = alive_log_probs[:, :, None] + _force_prefix(log_probs, prefix_ids, position,
                                                            vocabulary_ids)
        candidates = tf.shape(totals)[2]
        if constraints is None:
            top_log_probs, flat = tf.math.top_k(tf.reshape(totals, [batch, -1]), k=beam_size)
            origin, index = flat // candidates, flat % candidates
        else:
            eos_index = None if eos_id < 0 else constrained.candidate_indices(
                tf.constant(eos_id), vocabulary_ids, candidates)[0]
            top_log_probs, origin, index, progress = constrained.choose(
                totals, progress, constraints, beam_size, vocabulary_ids, eos_index)
        tokens = _emitted(index, vocabulary_ids)
        sequences = tf.where(positions == position + 1, tokens[:, :, None],
                             tf.gather(sequences, origin, batch_dims=1))
        length = position + 1
        ends = tf.logical_or(tf.equal(tokens, eos_id), (length >= limits)[:, None])
        ends = tf.logical_and(ends, tf.logical_not(done)[:, None])
        new_scores = tf.where(ends, top_log_probs / length_divisor(length, length_penalty),
                              NEG_INF)
        new = (sequences, new_scores) + (
            () if constraints is None else (constrained.unplaced(progress, phrase_lengths),))
        finished = _merge_finished(finished, new, length, beam_size)
        alive_log_probs = tf.where(tf.logical_or(ends, done[:, None]), NEG_INF, top_log_probs)
        # Log-probs only fall and the penalty grows with length, so the best an alive
        # hypothesis can still score is its log-prob over the penalty at the sentence's limit.
        best_alive = tf.reduce_max(alive_log_probs, axis=1)
        hopeless = best_alive / best_limit_penalty < tf.reduce_min(finished[1], axis=1)
        state = reorder(state, tf.reshape(origin + row_offsets, [-1]))
        return _next_position(position, (sequences, alive_log_probs, finished, state, progress),
                              done | hopeless | tf.equal(best_alive, NEG_INF), (carried, done))

    loop = (tf.constant(0), (sequences, alive_log_probs, finished, state, progress),
            tf.zeros([batch], tf.bool))
    _, (_, _, finished, _, _), _ = tf.while_loop(_searching(buffer_length), advance, loop,
                                                 maximum_iterations=buffer_length)
    result = _result(*finished[:3])
    if constraints is None:
        return result
    return DecodeResult(*result[:3], unplaced=finished[3][:, :, :given])


def greedy(step: StepFunction, state: State, limits: tf.Tensor,
           buffer_length: tf.Tensor, length_penalty: float = 0.6, eos_id: int = EOS_ID,
           prefix_ids: Optional[tf.Tensor] = None,
           vocabulary_ids: Optional[tf.Tensor] = None, hypotheses: int = 1,
           choose: Optional[Callable[[tf.Tensor, tf.Tensor], tf.Tensor]] = None
           ) -> DecodeResult:
    """The most likely next token at every position: `beam` with one beam, without its bookkeeping
    (same tokens and scores), a `DecodeResult` with n = `hypotheses`, the independent hypotheses per
    sentence. Each hypothesis is extended at every position until it emits `eos_id` or reaches its
    sentence's limit.

    `step`, `state`, `limits`, `buffer_length`, `length_penalty`, `eos_id`, `prefix_ids` and
    `vocabulary_ids` are as `beam`'s, the step called with `[batch, hypotheses]` tokens and the
    state holding `batch * hypotheses` rows (never reordered). `choose` takes
    `(log_probs, position)` to the candidate each hypothesis is extended by, `[batch, hypotheses]`
    indices into the candidates (default: the most likely; `sampling` draws).
    """
    batch = tf.shape(limits)[0]
    positions = tf.range(buffer_length + 1)

    def advance(position, carried, done):
        sequences, log_prob_sums, lengths, state = carried
        log_probs, state = step(tf.gather(sequences, position, axis=2), position, state)
        log_probs = _force_prefix(log_probs, prefix_ids, position, vocabulary_ids)
        chosen = (tf.argmax(log_probs, axis=-1, output_type=tf.int32) if choose is None
                  else choose(log_probs, position))
        token_log_probs = tf.gather(log_probs, chosen, batch_dims=2)
        tokens = tf.where(done, PAD_ID, _emitted(chosen, vocabulary_ids))
        sequences = tf.where(positions == position + 1, tokens[:, :, None], sequences)
        log_prob_sums = tf.where(done, log_prob_sums, log_prob_sums + token_log_probs)
        lengths = tf.where(done, lengths, position + 1)
        return _next_position(
            position, (sequences, log_prob_sums, lengths, state),
            done | tf.equal(tokens, eos_id) | (position + 1 >= limits)[:, None], (carried, done))

    loop = (tf.constant(0), (_start_sequences(batch, hypotheses, buffer_length),
                             tf.zeros([batch, hypotheses]),
                             tf.zeros([batch, hypotheses], tf.int32), state),
            tf.zeros([batch, hypotheses], tf.bool))
    _, (sequences, log_prob_sums, lengths, _), _ = tf.while_loop(
        _searching(buffer_length), advance, loop, maximum_iterations=buffer_length)
    return _result(sequences, log_prob_sums / length_divisor(lengths, length_penalty), lengths)


def sampling(step: StepFunction, state: State, limits: tf.Tensor,
             buffer_length: tf.Tensor, seeds: tf.Tensor, num_samples: int = 1,
             temperature: float = 1.0, top_k: int = 0, top_p: float = 1.0,
             length_penalty: float = 0.6, eos_id: int = EOS_ID,
             prefix_ids: Optional[tf.Tensor] = None,
             vocabulary_ids: Optional[tf.Tensor] = None) -> DecodeResult:
    """`num_samples` translations of each sentence, every token drawn from the step's distribution
    reshaped by `sampling_log_probs` (`temperature`, then `top_k`, then `top_p`, as its own): a
    `DecodeResult` with n = `num_samples`, in the order drawn; the scores are the model's
    log-probabilities of the drawn tokens (before temperature and truncation) over `length_divisor`
    (`length_penalty` its alpha), as greedy's are.

    The draws are Gumbel-max over noise hashed from the sentence's seed (`seeds`, `[batch]` uint32,
    one per sentence: `sentence_seeds`), the sample's index, the position and the candidate's id
    (`_gumbel_noise`): a sentence with the same seed gets the same samples in any batch, in graph or
    XLA, on any device, and a candidate keeps its noise when a shortlist scores fewer ids.

    `step`, `state`, `limits`, `buffer_length`, `eos_id`, `prefix_ids` and `vocabulary_ids` are as
    `beam`'s, the step called with `[batch, num_samples]` tokens and the state holding
    `batch * num_samples` rows (never reordered).
    """
    keys = _mix(tf.cast(seeds, tf.uint32)[:, None]
                ^ _mix(tf.range(1, num_samples + 1, dtype=tf.int32)))  # [batch, n]

    def draw(log_probs, position):
        scored = (tf.range(tf.shape(log_probs)[-1]) if vocabulary_ids is None
                  else vocabulary_ids)
        reshaped = sampling_log_probs(log_probs, temperature, top_k, top_p)
        return tf.argmax(reshaped + _gumbel_noise(keys, position, scored), axis=-1,
                         output_type=tf.int32)

    return greedy(step, state, limits, buffer_length, length_penalty, eos_id, prefix_ids,
                  vocabulary_ids, hypotheses=num_samples, choose=draw)


def sampling_log_probs(log_probs: tf.Tensor, temperature: float = 1.0, top_k: int = 0,
                       top_p: float = 1.0) -> tf.Tensor:
    """The unnormalized log-probabilities sampling draws from: `log_probs / temperature`,
    then -inf outside the `top_k` most likely candidates (0: all), then -inf outside the
    nucleus, the most likely candidates whose probabilities (after temperature and top-k) sum
    to at least `top_p` (Holtzman et al., 2020; the most likely is always in). Candidates tied
    with the last one kept are kept too."""
    reshaped = log_probs / tf.cast(temperature, log_probs.dtype)
    candidates = log_probs.shape[-1] or tf.shape(log_probs)[-1]
    if top_k:
        k = min(top_k, candidates) if isinstance(candidates, int) else tf.minimum(top_k,
                                                                                  candidates)
        kth = tf.math.top_k(reshaped, k=k).values[..., -1:]
        reshaped = tf.where(reshaped < kth, NEG_INF, reshaped)
    if top_p < 1.0:
        descending = tf.sort(reshaped, axis=-1, direction="DESCENDING")
        probs = tf.nn.softmax(descending, axis=-1)
        before = tf.cumsum(probs, axis=-1, exclusive=True)  # mass of the more likely ones
        kept = tf.where(before < top_p, descending, float("inf"))
        smallest_kept = tf.reduce_min(kept, axis=-1, keepdims=True)
        reshaped = tf.where(reshaped < smallest_kept, NEG_INF, reshaped)
    return reshaped


def sentence_seeds(source_ids: tf.Tensor, seed: int) -> tf.Tensor:
    """`[batch]` uint32 sampling seeds: a hash of each sentence's non-PAD ids, their
    positions and `seed`, so that a sentence draws the same samples whatever batch, padding or
    shard it comes in, and another `seed` draws others."""
    ids = tf.cast(source_ids, tf.int32)
    positions = tf.range(tf.shape(ids)[1])[None, :]
    terms = _mix(_mix(ids) ^ _mix(positions + _GOLDEN))
    terms = tf.where(tf.not_equal(ids, PAD_ID), terms, tf.zeros_like(terms))
    return _mix(tf.reduce_sum(terms, axis=1) ^ _mix(tf.cast(seed, tf.int64)))


_GOLDEN = 0x3C6EF372  # any constant: keeps position 0 from hashing like id 0


def _mix(values: tf.Tensor) -> tf.Tensor:
    """A bijective 32-bit integer hash (Wellons' `lowbias32`) of int32 or uint32 `values`,
    as uint32: integer ops only, the same on every device and under XLA."""
    x = tf.bitwise.bitwise_and(tf.cast(values, tf.int64), 0xFFFFFFFF)
    x = tf.cast(x, tf.uint32)
    for multiplier in (0x7FEB352D, 0x846CA68B):
        x = tf.bitwise.bitwise_xor(x, tf.bitwise.right_shift(x, tf.constant(16, tf.uint32)))
        x = x * tf.constant(multiplier, tf.uint32)
    return tf.bitwise.bitwise_xor(x, tf.bitwise.right_shift(x, tf.constant(16, tf.uint32)))


def _gumbel_noise(keys: tf.Tensor, position: tf.Tensor, candidate_ids: tf.Tensor) -> tf.Tensor:
    """`[batch, n, candidates]` standard Gumbel noise, a function of each hypothesis' key
    (`[batch, n]` uint32), the position and the candidate's id only."""
    at_position = _mix(keys ^ _mix(position))[:, :, None]
    spread = tf.cast(candidate_ids, tf.uint32) * tf.constant(0x9E3779B9, tf.uint32)
    bits = tf.bitwise.right_shift(_mix(at_position + spread), tf.constant(8, tf.uint32))
    uniform = (tf.cast(bits, tf.float32) + 0.5) * 2.0 ** -24  # in (0, 1)
    return -tf.math.log(-tf.math.log(uniform))


def _start_sequences(batch, beam_size: int, buffer_length) -> tf.Tensor:
    """`[batch, beam_size, buffer_length + 1]`: the start token, then PAD."""
    return tf.concat([tf.fill([batch, beam_size, 1], BOS_ID),
                      tf.fill([batch, beam_size, buffer_length], PAD_ID)], axis=2)


def _emitted(indices: tf.Tensor, vocabulary_ids: Optional[tf.Tensor]) -> tf.Tensor:
    """The ids of `indices` into the scored candidates."""
    return indices if vocabulary_ids is None else tf.gather(vocabulary_ids, indices)


def _force_prefix(log_probs: tf.Tensor, prefix_ids: Optional[tf.Tensor], position: tf.Tensor,
                  vocabulary_ids: Optional[tf.Tensor]) -> tf.Tensor:
    """`log_probs` `[batch, beam, n]` with every candidate but the prefix's id at `position`
    set to -inf in sentences whose prefix is that long (the forced id keeps its log-prob)."""
    if prefix_ids is None:
        return log_probs
    padded = tf.pad(prefix_ids, [[0, 0], [0, 1]], constant_values=PAD_ID)
    forced = tf.gather(padded, tf.minimum(position, tf.shape(prefix_ids)[1]),
                       axis=1)[:, None, None]
    scored = (tf.range(tf.shape(log_probs)[-1]) if vocabulary_ids is None else vocabulary_ids)
    others = tf.not_equal(scored, forced)
    return tf.where(others & tf.not_equal(forced, PAD_ID), NEG_INF, log_probs)


def _merge_finished(finished: tuple, new: tuple, length, beam_size: int) -> tuple:
    """Keeps the `beam_size` best of the finished hypotheses, `(sequences, scores, lengths)`
    and, of a constrained search, `unplaced`, and the new finishing ones, `(sequences, scores)`
    (-inf: not finishing) and their `unplaced`; those missing fewer constraints first."""
    scores = tf.concat([finished[1], new[1]], axis=1)
    merged = (tf.concat([finished[0], new[0]], axis=1), scores,
              tf.concat([finished[2], tf.fill(tf.shape(new[1]), length)], axis=1),
              *(tf.concat([old, now], axis=1) for old, now in zip(finished[3:], new[2:])))
    if len(finished) == 3:
        scores, keep = tf.math.top_k(scores, k=beam_size)
    else:
        missing = tf.reduce_sum(tf.cast(merged[3], tf.int32), axis=2)
        missing = tf.where(scores > NEG_INF, missing, tf.shape(merged[3])[2] + 1)
        by_score = tf.argsort(scores, axis=1, direction="DESCENDING", stable=True)
        by_missing = tf.argsort(tf.gather(missing, by_score, batch_dims=1), axis=1, stable=True)
        keep = tf.gather(by_score, by_missing, batch_dims=1)[:, :beam_size]
    return tuple(tf.gather(part, keep, batch_dims=1) for part in merged)


def _searching(buffer_length: tf.Tensor) -> Callable[[tf.Tensor, Any, tf.Tensor], tf.Tensor]:
    """The condition of a search's `tf.while_loop` over `(position, carried, done)` from
    position 0: a position within `buffer_length` left and a sentence (`done`: `[batch]` or
    `[batch, hypotheses]` bool) not done."""
    def searching(position, carried, done):
        return tf.logical_and(position < buffer_length, tf.logical_not(tf.reduce_all(done)))
    return searching


def _next_position(position: tf.Tensor, carried: Any, done: tf.Tensor,
                   before: tuple[Any, tf.Tensor]) -> tuple[tf.Tensor, Any, tf.Tensor]:
    """A search loop's variables after `position`, the position just searched (its
    `tf.while_loop` body's outputs): `(position + 1, carried, done)`, `carried` what the search
    carries to the next position, `done` which sentences (or hypotheses) are done. They take the
    static shapes of `before`, the `(carried, done)` the position started from (their shapes
    never change, but gathers lose static sizes, e.g. a batch of 0)."""
    def restore(tensor: tf.Tensor, old: tf.Tensor) -> tf.Tensor:
        tensor.set_shape(old.shape)
        return tensor
    return (position + 1, *tf.nest.map_structure(restore, (carried, done), before))


def _result(sequences: tf.Tensor, scores: tf.Tensor, lengths: tf.Tensor) -> DecodeResult:
    """Drops the start column of `sequences` `[batch, n, 1 + T]` and the columns after the
    longest hypothesis."""
    longest = tf.reduce_max(tf.concat([[0], tf.reshape(lengths, [-1])], axis=0))
    return DecodeResult(sequences[:, :, 1:longest + 1], scores, lengths)
