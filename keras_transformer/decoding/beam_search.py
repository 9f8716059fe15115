"""Beam search with length penalty (section 6.1) on a batch, as one `tf.while_loop`.

Each step extends every alive hypothesis by every token and keeps the `beam_size` best
candidates per sentence; candidates ending in EOS, or reaching the sentence's length limit, move
to that sentence's finished n-best list. A sentence stops as soon as no alive hypothesis can
beat its worst finished one, and the loop stops when every sentence has.
"""
from __future__ import annotations

from typing import Optional

import tensorflow as tf

from keras_transformer.decoding.constraints import (allowed_log_probs, emitted_ids,
                                                   force_prefix, prefix_tensor, prepare_search)
from keras_transformer.decoding.length_penalty import length_divisor
from keras_transformer.decoding.loop import search_loop
from keras_transformer.decoding.result import DecodeResult, make_result
from keras_transformer.decoding.shortlist import VocabularyShortlist
from keras_transformer.decoding.steps import make_steps
from keras_transformer.model import Transformer
from keras_transformer.search_settings import SearchSettings
from keras_transformer.vocab_ids import BOS_ID, EOS_ID, PAD_ID

NEG_INF = -float("inf")


def search_beams(model: Transformer, source_ids: tf.Tensor, beam_size: int = 4,
                 length_penalty: float = 0.6, max_decode_extra: int = 50,
                 use_cache: bool = True, eos_id: int = EOS_ID,
                 prefix_ids: Optional[tf.Tensor] = None,
                 shortlist: Optional[VocabularyShortlist] = None) -> DecodeResult:
    """Builds the search (call it inside a `tf.function`; `beam_search` does).

    `source_ids`: `[batch, src_len]` int32, EOS-terminated, right-padded with PAD.
    `eos_id=-1` disables end of sentence (every hypothesis runs to its length limit).
    `prefix_ids`: optional `[batch, P]` target ids every hypothesis starts with (PAD-padded).
    `shortlist`: score only the batch's `shortlist.target_ids` (None: the whole vocabulary).
    """
    settings = SearchSettings(beam_size, length_penalty, max_decode_extra)
    alpha = settings.length_penalty
    source_ids, batch, limits, buffer_length = prepare_search(
        source_ids, settings, model.config.max_length, prefix_ids)
    best_limit_penalty = length_divisor(limits, alpha)
    target_ids = None if shortlist is None else shortlist.target_ids(source_ids, prefix_ids)
    steps = make_steps(model, source_ids, beam_size, buffer_length, use_cache, target_ids)
    positions = tf.range(buffer_length + 1)

    sequences = tf.concat([tf.fill([batch, beam_size, 1], BOS_ID),
                           tf.fill([batch, beam_size, buffer_length], PAD_ID)], axis=2)
    first_beam_only = tf.concat([[0.0], tf.fill([beam_size - 1], NEG_INF)], axis=0)
    alive_log_probs = tf.tile(first_beam_only[None], [batch, 1])
    finished = (sequences, tf.fill([batch, beam_size], NEG_INF),
                tf.zeros([batch, beam_size], tf.int32))

    def advance(step, carried, done):
        sequences, alive_log_probs, finished, state = carried
        logits, state = steps(sequences, step, state)
        totals = alive_log_probs[:, :, None] + force_prefix(
            allowed_log_probs(logits, target_ids), prefix_ids, step, target_ids)
        vocab = tf.shape(totals)[2]
        top_log_probs, flat = tf.math.top_k(tf.reshape(totals, [batch, -1]), k=beam_size)
        origin, tokens = flat // vocab, emitted_ids(flat % vocab, target_ids)
        sequences = tf.where(positions == step + 1, tokens[:, :, None],
                             tf.gather(sequences, origin, batch_dims=1))
        length = step + 1
        ends = tf.logical_or(tf.equal(tokens, eos_id), (length >= limits)[:, None])
        ends = tf.logical_and(ends, tf.logical_not(done)[:, None])
        new_scores = tf.where(ends, top_log_probs / length_divisor(length, alpha), NEG_INF)
        finished = _merge_finished(finished, sequences, new_scores, length, beam_size)
        alive_log_probs = tf.where(tf.logical_or(ends, done[:, None]), NEG_INF, top_log_probs)
        # Log-probs only fall and the penalty grows with length, so the best an alive
        # hypothesis can still score is its log-prob over the penalty at the sentence's limit.
        best_alive = tf.reduce_max(alive_log_probs, axis=1)
        hopeless = best_alive / best_limit_penalty < tf.reduce_min(finished[1], axis=1)
        done = done | hopeless | tf.equal(best_alive, NEG_INF)
        return (sequences, alive_log_probs, finished, steps.reorder(state, origin)), done

    carried = (sequences, alive_log_probs, finished, steps.initial_state)
    _, _, (sequences, scores, lengths), _ = search_loop(
        advance, carried, tf.zeros([batch], tf.bool), buffer_length)
    return make_result(sequences, scores, lengths)


def _merge_finished(finished, candidates, candidate_scores, length, beam_size: int):
    """Keeps the `beam_size` best of the finished hypotheses and the new finishing ones."""
    sequences, scores, lengths = finished
    all_scores = tf.concat([scores, candidate_scores], axis=1)
    all_lengths = tf.concat([lengths, tf.fill(tf.shape(candidate_scores), length)], axis=1)
    all_sequences = tf.concat([sequences, candidates], axis=1)
    scores, keep = tf.math.top_k(all_scores, k=beam_size)
    return (tf.gather(all_sequences, keep, batch_dims=1), scores,
            tf.gather(all_lengths, keep, batch_dims=1))


_search_graph = tf.function(search_beams, reduce_retracing=True, autograph=False)
_search_graph_xla = tf.function(search_beams, reduce_retracing=True, autograph=False, jit_compile=True)


def beam_search(model: Transformer, source_ids, beam_size: int = 4,
                length_penalty: float = 0.6, max_decode_extra: int = 50,
                use_cache: bool = True, eos_id: int = EOS_ID,
                jit_compile: bool = False, prefix_ids=None,
                shortlist: Optional[VocabularyShortlist] = None) -> DecodeResult:
    """n-best (`beam_size`) translations of `source_ids` `[batch, src_len]` in one graph.

    At most `source length + max_decode_extra` tokens (EOS included, capped at
    `model.config.max_length`) are generated per sentence. `use_cache=False` recomputes the
    whole decoder every step (a slow reference). `jit_compile` compiles the search with XLA
    (cached decoding only). `prefix_ids` `[batch, P]` (PAD-padded) forces each sentence's
    output to start with its row's ids. `shortlist` restricts each batch's search to its
    `target_ids` (see `decoding.shortlist`).
    """
    if jit_compile and not use_cache:
        raise ValueError("jit_compile: needs use_cache=True (recomputation has dynamic shapes)")
    if jit_compile and shortlist is not None:
        raise ValueError("jit_compile: not with a shortlist (its size depends on the batch)")
    settings = SearchSettings(beam_size, length_penalty, max_decode_extra)  # named errors
    search = _search_graph_xla if jit_compile else _search_graph
    return search(model, tf.convert_to_tensor(source_ids, tf.int32), settings.beam_size,
                  float(settings.length_penalty), settings.max_decode_extra, use_cache, eos_id,
                  prefix_tensor(prefix_ids), shortlist)
