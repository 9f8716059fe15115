"""Searching with a `Transformer`: its step function for `keras_transformer.search`, the
output length limits of section 6.1 (source length + `max_decode_extra`), and teacher-forced
scoring on the searches' scale.

`beam_search(model, source_ids, ...)`, `greedy_decode(model, ...)` and `sample(model, ...)`
are one graph each;
`run_search(model, source_ids, settings)` builds the search `settings` ask for inside a
caller's `tf.function` (the exported `TranslationModule`'s). Each takes one `Transformer` or an
ensemble: a sequence of them over the same vocabulary, whose probabilities the search averages
(`search.ensemble`). The step function the search runs is `cached_step`'s, the model's
`decode_step` with its key/value cache, or with `use_cache=False` its reference
`recomputed_step`'s.
"""
from __future__ import annotations

import functools
from typing import Optional, Sequence, Union

import tensorflow as tf

from keras_transformer import hooks, search
from keras_transformer.decoding.shortlist import VocabularyShortlist
from keras_transformer.model import (DecodingCache, Transformer, never_emitted,
                                     next_token_log_probs, source_padding_mask)
from keras_transformer.search import DecodeResult, length_divisor
from keras_transformer.config import BOS_ID, EOS_ID, PAD_ID, SearchSettings


Models = Union[Transformer, Sequence[Transformer]]  # one model, or an ensemble


def ensemble_members(model: Models) -> list[Transformer]:
    """`model` as a list of models (one, or an ensemble's); members must share `vocab_size`,
    `target_vocab_size` and `max_length` (ValueError naming the first member and setting that
    differ). Models alone cannot show their subword pieces: the command lines check those
    (`--ensemble`), and an API caller gives models trained on one vocabulary."""
    members = [model] if isinstance(model, Transformer) else list(model)
    if not members:
        raise ValueError("model: an ensemble needs at least one Transformer")
    for index, member in enumerate(members[1:], start=1):
        for setting in ("vocab_size", "target_vocab_size", "max_length"):
            value, first = (getattr(one.config, setting) for one in (member, members[0]))
            if value != first:
                raise ValueError(f"ensemble member {index}: {setting}={value}, but member 0 "
                                 f"has {setting}={first}")
    return members


def run_search(model: Models, source_ids: tf.Tensor, settings: Optional[SearchSettings] = None,
               use_cache: bool = True, eos_id: int = EOS_ID,
               prefix_ids: Optional[tf.Tensor] = None,
               shortlist: Optional[VocabularyShortlist] = None, greedy: Optional[bool] = None,
               static_shapes: bool = False, num_samples: int = 1,
               constraints: Optional[tf.Tensor] = None) -> DecodeResult:
    """Builds a search over `source_ids` (`[batch, src_len]` int32, EOS-terminated, right-padded
    with PAD) by `model`, the Transformer or an ensemble's (their probabilities averaged), whose
    result is the n-best `DecodeResult` (when sampling, the samples in the order drawn); call it
    inside a `tf.function`.

    `settings` are the beam size, length penalty, length limit and sampling (default: the paper's).
    `use_cache` False recomputes the whole decoder at every position (the reference). `eos_id` -1
    disables end of sentence (every hypothesis runs to its length limit). `prefix_ids`, optional
    `[batch, P]`, are target ids every hypothesis starts with (PAD-padded). A `shortlist` scores
    only its `target_ids` for this batch (None: the whole vocabulary). `greedy` chooses the greedy
    search (default: when `beam_size` is 1); unused when sampling. `static_shapes` builds the search
    with the sizes the input shapes fix (what XLA compiles): the shortlist's `padded_target_ids`
    instead of its `target_ids`, and caches read whole (`Transformer.init_decoding`). `num_samples`
    translations are drawn per sentence when `settings.sampling`. `constraints`, optional
    `[batch, C, L]`, are target phrases (ids, PAD-padded) each translation must contain: the
    constrained beam search (`search.beam`), whatever the beam size; a shortlist then scores their
    ids too.

    The layers run the hooks' references (`hooks.references`), whichever set is installed: a
    search is never differentiated, and its graph is the same for every set.
    """
    with hooks.references():
        settings = SearchSettings() if settings is None else settings
        if constraints is not None and settings.sampling:
            raise ValueError("constraints: a constrained search is a beam search, not sampling")
        members = ensemble_members(model)
        source_ids = tf.cast(source_ids, tf.int32)
        limits, buffer_length = output_limits(source_ids, settings.max_decode_extra,
                                              members[0].config.max_length, prefix_ids=prefix_ids)
        vocabulary_ids = unscored = None
        if shortlist is not None:
            listed = prefix_ids
            if constraints is not None:
                pieces = tf.reshape(tf.cast(constraints, tf.int32), [tf.shape(source_ids)[0], -1])
                listed = pieces if prefix_ids is None else tf.concat([prefix_ids, pieces], 1)
            if static_shapes:
                vocabulary_ids, unscored = shortlist.padded_target_ids(source_ids, listed)
            else:
                vocabulary_ids = shortlist.target_ids(source_ids, listed)
        greedy = (settings.beam_size == 1 if greedy is None else greedy) and constraints is None
        rows_per_sentence = (num_samples if settings.sampling else 1 if greedy
                             else settings.beam_size)
        step_arguments = dict(source_ids=source_ids, rows_per_sentence=rows_per_sentence,
                              buffer_length=buffer_length, vocabulary_ids=vocabulary_ids,
                              unscored=unscored)
        steps = []
        for member in members:
            steps.append(cached_step(member, static_shapes=static_shapes, **step_arguments)
                         if use_cache else recomputed_step(member, **step_arguments))
        step, state, reorder = steps[0] if len(steps) == 1 else search.ensemble(steps)
        common = dict(step=step, state=state, limits=limits, buffer_length=buffer_length,
                      length_penalty=settings.length_penalty, eos_id=eos_id,
                      prefix_ids=prefix_ids, vocabulary_ids=vocabulary_ids)
        if settings.sampling:
            return search.sampling(
                seeds=search.sentence_seeds(source_ids, settings.sampling_seed),
                num_samples=num_samples, temperature=settings.temperature, top_k=settings.top_k,
                top_p=settings.top_p, **common)
        if greedy:
            return search.greedy(**common)
        return search.beam(beam_size=settings.beam_size, reorder=reorder,
                           constraints=constraints, **common)


# `run_search` as a graph function of its own: the signatures of an export that search alike
# (plain text, ids, n-best, scores, alignment) call one trace of it instead of tracing the
# search each, and the greedy, beam and sampling functions below run it.
run_search_graph = tf.function(run_search, reduce_retracing=True, autograph=False)
# `run_search` compiled by XLA as one cluster (the whole search loop): what `jit_compile` runs
# and an export with `jit_compile` calls inside its signatures.
run_search_xla = tf.function(run_search, reduce_retracing=True, autograph=False,
                             jit_compile=True)


def beam_search(model: Models, source_ids, beam_size: int = 4,
                length_penalty: float = 0.6, max_decode_extra: int = 50,
                use_cache: bool = True, eos_id: int = EOS_ID, jit_compile: bool = False,
                prefix_ids=None, shortlist: Optional[VocabularyShortlist] = None,
                constraints=None) -> DecodeResult:
    """The `beam_size` best translations of `source_ids` `[batch, src_len]`, in one graph.

    Arguments as `run_search`'s; at most `source length + max_decode_extra` tokens (EOS
    included, capped at `model.config.max_length`) per sentence. `jit_compile` compiles the
    search with XLA (cached decoding only; a shortlist is then padded to a static size).
    """
    settings = SearchSettings(beam_size=beam_size, length_penalty=length_penalty,
                              max_decode_extra=max_decode_extra)
    return _checked_search(model, source_ids, settings, greedy=False, use_cache=use_cache,
                           eos_id=eos_id, jit_compile=jit_compile, prefix_ids=prefix_ids,
                           shortlist=shortlist, constraints=constraints)


def greedy_decode(model: Models, source_ids, length_penalty: float = 0.6,
                  max_decode_extra: int = 50, use_cache: bool = True, eos_id: int = EOS_ID,
                  prefix_ids=None, shortlist: Optional[VocabularyShortlist] = None
                  ) -> DecodeResult:
    """The most likely next token at every position (n = 1), scored like `beam_search`;
    arguments as `run_search`'s."""
    settings = SearchSettings(beam_size=1, length_penalty=length_penalty,
                              max_decode_extra=max_decode_extra)
    return _checked_search(model, source_ids, settings, greedy=True, use_cache=use_cache,
                           eos_id=eos_id, jit_compile=False, prefix_ids=prefix_ids,
                           shortlist=shortlist)


def sample(model: Models, source_ids, seed: int = 0, temperature: float = 1.0,
           top_k: int = 0, top_p: float = 1.0, num_samples: int = 1,
           length_penalty: float = 0.6, max_decode_extra: int = 50, use_cache: bool = True,
           eos_id: int = EOS_ID, jit_compile: bool = False, prefix_ids=None,
           shortlist: Optional[VocabularyShortlist] = None) -> DecodeResult:
    """`num_samples` translations of each sentence of `source_ids`, drawn token by token
    (`search.sampling`; the settings as `SearchSettings`'), in one graph; other
    arguments as `beam_search`'s."""
    if not isinstance(num_samples, int) or num_samples < 1:
        raise ValueError(f"num_samples: must be a positive integer, got {num_samples!r}")
    settings = SearchSettings(beam_size=1, length_penalty=length_penalty,
                              max_decode_extra=max_decode_extra, sampling=True,
                              temperature=temperature, top_k=top_k, top_p=top_p,
                              sampling_seed=seed)
    return _checked_search(model, source_ids, settings, greedy=False, use_cache=use_cache,
                           eos_id=eos_id, jit_compile=jit_compile, prefix_ids=prefix_ids,
                           shortlist=shortlist, num_samples=num_samples)


def _checked_search(model: Models, source_ids, settings: SearchSettings, greedy: bool,
                    use_cache: bool, eos_id: int, jit_compile: bool, prefix_ids,
                    shortlist: Optional[VocabularyShortlist], num_samples: int = 1,
                    constraints=None) -> DecodeResult:
    """Checks the arguments eagerly (named errors) and runs `run_search`'s graph (arguments
    as its, and `jit_compile` as `beam_search`'s)."""
    if jit_compile and not use_cache:
        raise ValueError("jit_compile: needs use_cache=True (recomputation has dynamic shapes)")
    members = ensemble_members(model)
    model = members[0] if len(members) == 1 else tuple(members)
    graph = run_search_xla if jit_compile else run_search_graph
    prefix_ids, constraints = (None if ids is None else tf.convert_to_tensor(ids, tf.int32)
                               for ids in (prefix_ids, constraints))
    return graph(model, tf.convert_to_tensor(source_ids, tf.int32), settings,
                 use_cache=use_cache, eos_id=eos_id, prefix_ids=prefix_ids,
                 shortlist=shortlist, greedy=greedy, static_shapes=jit_compile,
                 num_samples=num_samples, constraints=constraints)


def output_limits(source_ids: tf.Tensor, max_decode_extra: int, max_length: int,
                  prefix_ids: Optional[tf.Tensor] = None) -> tuple[tf.Tensor, tf.Tensor]:
    """`(limits, buffer_length)`: `[batch]` int32, at most `source length + max_decode_extra`
    output tokens (EOS included; the source length counts non-padding ids), capped at
    `max_length` and at least 1; and a scalar bound on every limit from the padded source
    shape only (a compile-time constant under XLA). With `prefix_ids` both leave room for the
    prefix and at least one token after it (within `max_length`)."""
    source_lengths = tf.reduce_sum(tf.cast(tf.not_equal(source_ids, PAD_ID), tf.int32), axis=1)
    limits = tf.clip_by_value(source_lengths + max_decode_extra, 1, max_length)
    buffer_length = tf.clip_by_value(tf.shape(source_ids)[1] + max_decode_extra, 1, max_length)
    if prefix_ids is not None:
        prefix_lengths = tf.reduce_sum(tf.cast(tf.not_equal(prefix_ids, PAD_ID), tf.int32), 1)
        limits = tf.minimum(tf.maximum(limits, prefix_lengths + 1), max_length)
        buffer_length = tf.minimum(tf.maximum(buffer_length, tf.shape(prefix_ids)[1] + 1),
                                   max_length)
    return limits, buffer_length


def cached_step(model: Transformer, source_ids: tf.Tensor, rows_per_sentence: int,
                buffer_length: tf.Tensor, vocabulary_ids: Optional[tf.Tensor] = None,
                unscored: Optional[tf.Tensor] = None, static_shapes: bool = False):
    """`(step, state, reorder)`, `search`'s protocol: `model.decode_step` with its constants bound,
    its key/value cache and the cache's reorder, for the Transformer `model` over `source_ids`
    `[batch, src_len]`, `rows_per_sentence` hypotheses (cache rows) per sentence, caches of
    `buffer_length` positions.

    `vocabulary_ids`, optional `[n]`, are the ids the step's log-probabilities score; `unscored`,
    optional `[n]` bool, is True at the ids of `vocabulary_ids` that only pad it to a static size
    (log-probability -inf, outside the normalization). `static_shapes` builds the step XLA compiles
    (`Transformer.init_decoding`).

    What a search never changes (the encoder's keys and values, the positional encodings, the output
    projection) is prepared once, outside the state (`DecodingConstants`); the state is the
    `DecodingCache`, whose reorder moves the ancestors only.
    """
    constants, cache = model.init_decoding(
        model.encode(source_ids, training=False), source_padding_mask(source_ids),
        rows_per_sentence=rows_per_sentence, cache_length=buffer_length,
        vocabulary_ids=vocabulary_ids, unscored=unscored, static_shapes=static_shapes)
    return functools.partial(model.decode_step, constants=constants), cache, DecodingCache.reorder


def recomputed_step(model: Transformer, source_ids: tf.Tensor, rows_per_sentence: int,
                    buffer_length: tf.Tensor, vocabulary_ids: Optional[tf.Tensor] = None,
                    unscored: Optional[tf.Tensor] = None):
    """`(step, state, reorder)` without a cache (the reference; arguments as `cached_step`'s):
    the state is each hypothesis' prefix, on which every position reruns the whole decoder
    (`model.decode`); the default reorder moves the prefixes."""
    encoder_output = tf.repeat(model.encode(source_ids, training=False), rows_per_sentence,
                               axis=0)
    source_mask = tf.repeat(source_padding_mask(source_ids), rows_per_sentence, axis=0)
    rows = tf.shape(encoder_output)[0]
    state = {"prefix": tf.fill(tf.stack([rows, buffer_length + 1]), PAD_ID)}
    never = never_emitted(vocabulary_ids, model.config.target_vocab_size)

    def step(token_ids, position, state):
        prefix = tf.where(tf.range(buffer_length + 1) == position,
                          tf.reshape(token_ids, [-1, 1]), state["prefix"])
        logits = model.decode(prefix[:, :position + 1], encoder_output, source_mask,
                              training=False)[:, -1]
        if vocabulary_ids is not None:
            logits = tf.gather(logits, vocabulary_ids, axis=-1)
        logits = tf.reshape(logits, [tf.shape(token_ids)[0], tf.shape(token_ids)[1], -1])
        return next_token_log_probs(logits, never, unscored), {"prefix": prefix}

    return step, state, search.gather_rows


def token_log_probs(model: Transformer, source_ids, target_ids) -> tf.Tensor:
    """`[batch, length]` log p(y_t | y_<t, x) of each token of `target_ids` (`[batch, length]`
    without BOS, EOS-terminated, right-padded with PAD; 0 at PAD), teacher-forced in one
    `model.decode` pass over the whole vocabulary."""
    return token_and_end_log_probs(model, source_ids, target_ids)[0]


def token_and_end_log_probs(model: Transformer, source_ids, target_ids
                            ) -> tuple[tf.Tensor, tf.Tensor]:
    """`token_log_probs`, and `[batch]` the log-probability of ending each row where it ends:
    of EOS after its last piece, at its EOS's position, or, for a row without EOS (cut at a
    length limit), in place of its last token (0 for a row of padding alone)."""
    source_ids = tf.convert_to_tensor(source_ids, tf.int32)
    targets = tf.convert_to_tensor(target_ids, tf.int32)
    inputs = tf.concat([tf.fill([tf.shape(targets)[0], 1], BOS_ID), targets[:, :-1]], axis=1)
    logits = model.decode(inputs, model.encode(source_ids, training=False),
                          source_padding_mask(source_ids), training=False)
    all_log_probs = tf.nn.log_softmax(tf.cast(logits, tf.float32))
    real = tf.not_equal(targets, PAD_ID)
    log_probs = tf.where(real, tf.gather(all_log_probs, targets, batch_dims=2), 0.0)
    pieces = tf.reduce_sum(tf.cast(real & tf.not_equal(targets, EOS_ID), tf.int32), axis=1)
    end = tf.minimum(pieces, tf.maximum(tf.shape(targets)[1] - 1, 0))
    ending = tf.pad(all_log_probs[:, :, EOS_ID], [[0, 0], [0, 1]])  # a column for width 0
    end_log_probs = tf.gather(ending, end[:, None], batch_dims=1)[:, 0]
    return log_probs, tf.where(tf.reduce_any(real, axis=1), end_log_probs, 0.0)


def score_hypotheses(model: Transformer, source_ids, hypothesis_ids, alpha: float = 0.6
                     ) -> tf.Tensor:
    """`[batch]` sum of log p(y_t | y_<t, x) over each hypothesis' tokens (EOS included,
    PAD excluded; `token_log_probs`) divided by `length_divisor(length, alpha)`.

    `hypothesis_ids`: `[batch, length]` without BOS, right-padded with PAD.
    """
    targets = tf.convert_to_tensor(hypothesis_ids, tf.int32)
    total = tf.reduce_sum(token_log_probs(model, source_ids, targets), axis=1)
    lengths = tf.reduce_sum(tf.cast(tf.not_equal(targets, PAD_ID), tf.int32), axis=1)
    return total / length_divisor(lengths, alpha)
