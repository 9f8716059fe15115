"""Greedy decoding: the fast path for beam size 1 (same tokens and scores as `beam_search`)."""
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


def search_greedy(model: Transformer, source_ids: tf.Tensor, length_penalty: float = 0.6,
                  max_decode_extra: int = 50, use_cache: bool = True,
                  eos_id: int = EOS_ID, prefix_ids: Optional[tf.Tensor] = None,
                  shortlist: Optional[VocabularyShortlist] = None) -> DecodeResult:
    """Builds greedy decoding (call it inside a `tf.function`; `greedy_decode` does).

    `prefix_ids`: optional `[batch, P]` target ids the output starts with (PAD-padded).
    `shortlist`: score only the batch's `shortlist.target_ids` (None: the whole vocabulary).
    """
    settings = SearchSettings(1, length_penalty, max_decode_extra)
    source_ids, batch, limits, buffer_length = prepare_search(
        source_ids, settings, model.config.max_length, prefix_ids)
    target_ids = None if shortlist is None else shortlist.target_ids(source_ids, prefix_ids)
    steps = make_steps(model, source_ids, 1, buffer_length, use_cache, target_ids)
    positions = tf.range(buffer_length + 1)
    sequences = tf.concat([tf.fill([batch, 1, 1], BOS_ID),
                           tf.fill([batch, 1, buffer_length], PAD_ID)], axis=2)

    def advance(step, carried, done):
        sequences, log_prob_sums, lengths, state = carried
        logits, state = steps(sequences, step, state)
        log_probs = force_prefix(allowed_log_probs(logits, target_ids), prefix_ids, step,
                                 target_ids)[:, 0]
        best = tf.argmax(log_probs, axis=-1, output_type=tf.int32)
        token_log_probs = tf.gather(log_probs, best, batch_dims=1)
        tokens = tf.where(done, PAD_ID, emitted_ids(best, target_ids))
        sequences = tf.where(positions == step + 1, tokens[:, None, None], sequences)
        log_prob_sums = tf.where(done, log_prob_sums, log_prob_sums + token_log_probs)
        lengths = tf.where(done, lengths, step + 1)
        done = done | tf.equal(tokens, eos_id) | (step + 1 >= limits)
        return (sequences, log_prob_sums, lengths, state), done

    carried = (sequences, tf.zeros([batch]), tf.zeros([batch], tf.int32), steps.initial_state)
    sequences, log_prob_sums, lengths, _ = search_loop(advance, carried,
                                                       tf.zeros([batch], tf.bool), buffer_length)
    scores = log_prob_sums / length_divisor(lengths, settings.length_penalty)
    return make_result(sequences, scores[:, None], lengths[:, None])


_greedy_graph = tf.function(search_greedy, reduce_retracing=True, autograph=False)


def greedy_decode(model: Transformer, source_ids, length_penalty: float = 0.6,
                  max_decode_extra: int = 50, use_cache: bool = True,
                  eos_id: int = EOS_ID, prefix_ids=None,
                  shortlist: Optional[VocabularyShortlist] = None) -> DecodeResult:
    """The most likely next token at every step, for `source_ids` `[batch, src_len]`.

    Returns a `DecodeResult` with n = 1, scored like `beam_search` (`length_penalty` alpha).
    `prefix_ids` `[batch, P]` (PAD-padded) forces each output to start with its row's ids.
    `shortlist` restricts each batch's search to its `target_ids` (see `decoding.shortlist`).
    """
    settings = SearchSettings(1, length_penalty, max_decode_extra)  # named errors, eagerly
    return _greedy_graph(model, tf.convert_to_tensor(source_ids, tf.int32),
                         float(settings.length_penalty), settings.max_decode_extra, use_cache,
                         eos_id, prefix_tensor(prefix_ids), shortlist)
