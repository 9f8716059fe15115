"""Beam search and greedy decoding on a random `tiny` model: equivalences and limits."""
import functools
from typing import NamedTuple

import numpy as np
import pytest
import tensorflow as tf

import keras_transformer as kt
from keras_transformer import fast
from keras_transformer.decoding import (beam_search, greedy_decode, length_divisor,
                                        score_hypotheses)
from keras_transformer.decoding.transformer_search import cached_step, recomputed_step, run_search
from keras_transformer.precision import serving_copy
from keras_transformer.config import EOS_ID, PAD_ID

EXTRA = 6
SOURCES = np.array([[5, 6, 7, 8, 9, 3],
                    [10, 11, 3, 0, 0, 0],
                    [3, 0, 0, 0, 0, 0],
                    [12, 13, 14, 15, 3, 0]], np.int32)


@pytest.fixture(scope="module")
def model():
    return kt.Transformer(kt.TransformerConfig.preset("tiny", vocab_size=50))


def test_length_divisor_is_gnmt():
    np.testing.assert_allclose(length_divisor([1, 7], 0.6).numpy(),
                               [1.0, 2.0 ** 0.6], rtol=1e-6)
    np.testing.assert_allclose(length_divisor([9], 0.0).numpy(), [1.0])


def test_beam_one_equals_greedy(model):
    greedy = greedy_decode(model, SOURCES, max_decode_extra=EXTRA)
    beam = beam_search(model, SOURCES, beam_size=1, max_decode_extra=EXTRA)
    np.testing.assert_array_equal(greedy.ids.numpy(), beam.ids.numpy())
    np.testing.assert_array_equal(greedy.lengths.numpy(), beam.lengths.numpy())
    np.testing.assert_array_equal(greedy.scores.numpy(), beam.scores.numpy())


@pytest.mark.parametrize("beam_size", [1, 4])
def test_cache_matches_full_recomputation(model, beam_size):
    cached = beam_search(model, SOURCES, beam_size=beam_size, max_decode_extra=EXTRA)
    recomputed = beam_search(model, SOURCES, beam_size=beam_size, max_decode_extra=EXTRA,
                             use_cache=False)
    np.testing.assert_array_equal(cached.ids.numpy(), recomputed.ids.numpy())
    np.testing.assert_allclose(cached.scores.numpy(), recomputed.scores.numpy(), atol=1e-5)


def test_greedy_cache_matches_full_recomputation(model):
    cached = greedy_decode(model, SOURCES, max_decode_extra=EXTRA)
    recomputed = greedy_decode(model, SOURCES, max_decode_extra=EXTRA, use_cache=False)
    np.testing.assert_array_equal(cached.ids.numpy(), recomputed.ids.numpy())
    np.testing.assert_allclose(cached.scores.numpy(), recomputed.scores.numpy(), atol=1e-5)


@pytest.mark.parametrize("alpha", [0.0, 0.6, 1.0])
def test_scores_equal_teacher_forced_log_probs(model, alpha):
    result = beam_search(model, SOURCES, beam_size=3, length_penalty=alpha, max_decode_extra=EXTRA)
    for rank in range(3):
        forced = score_hypotheses(model, SOURCES, result.ids[:, rank], alpha)
        np.testing.assert_allclose(result.scores[:, rank].numpy(), forced.numpy(), atol=1e-4)


def test_nbest_is_sorted_padded_and_within_limits(model):
    result = beam_search(model, SOURCES, beam_size=4, max_decode_extra=EXTRA)
    scores, ids, lengths = result.scores.numpy(), result.ids.numpy(), result.lengths.numpy()
    assert ids.shape[:2] == (4, 4) and np.all(np.isfinite(scores))
    assert np.all(np.diff(scores, axis=1) <= 0)
    limits = (SOURCES != PAD_ID).sum(axis=1) + EXTRA
    for sentence, limit in enumerate(limits):
        for rank in range(4):
            length = lengths[sentence, rank]
            assert 1 <= length <= limit
            assert np.all(ids[sentence, rank, length:] == PAD_ID)
            hypothesis = ids[sentence, rank, :length]
            assert np.all(hypothesis[:-1] != EOS_ID)
            assert hypothesis[-1] == EOS_ID or length == limit


def test_disabled_eos_runs_every_sentence_to_its_limit(model):
    result = beam_search(model, SOURCES, beam_size=2, max_decode_extra=EXTRA, eos_id=-1)
    limits = (SOURCES != PAD_ID).sum(axis=1) + EXTRA
    np.testing.assert_array_equal(result.lengths.numpy(), np.stack([limits, limits], axis=1))


def test_output_is_capped_at_max_length():
    short = kt.Transformer(kt.TransformerConfig.preset("tiny", vocab_size=50, max_length=8,
                                                       positional="learned"))
    result = greedy_decode(short, SOURCES, max_decode_extra=50, eos_id=-1)
    assert result.lengths.numpy().max() == 8


def test_sentence_result_does_not_depend_on_its_batch(model):
    together = beam_search(model, SOURCES, beam_size=4, max_decode_extra=EXTRA)
    for sentence, source in enumerate(SOURCES):
        alone = beam_search(model, source[None, :(source != PAD_ID).sum()], beam_size=4,
                            max_decode_extra=EXTRA)
        width = alone.ids.shape[2]
        np.testing.assert_array_equal(together.ids[sentence, :, :width].numpy(),
                                      alone.ids[0].numpy())
        np.testing.assert_allclose(together.scores[sentence].numpy(), alone.scores[0].numpy(),
                                   atol=1e-5)


@pytest.mark.parametrize("search", [greedy_decode, beam_search])
def test_empty_batch(model, search):
    result = search(model, tf.zeros([0, 3], tf.int32))
    assert result.ids.shape[0] == 0 and result.scores.shape[0] == 0


def test_xla_matches_graph(model):
    plain = beam_search(model, SOURCES, beam_size=4, max_decode_extra=EXTRA)
    xla = beam_search(model, SOURCES, beam_size=4, max_decode_extra=EXTRA, jit_compile=True)
    np.testing.assert_array_equal(plain.ids.numpy(), xla.ids.numpy())
    np.testing.assert_allclose(plain.scores.numpy(), xla.scores.numpy(), atol=1e-4)


# Every option a decoding step reads: pre-norm (a final norm), learned positions from an
# offset, d_k != d_v, no attention bias, an untied output projection over another vocabulary,
# uneven depths; and those of models trained elsewhere (swish, sinusoids in halves, embedding
# norm, output bias).
STEP_VARIANTS = [
    {},
    {"norm": "pre", "positional": "learned", "position_offset": 2, "key_dim": 8, "value_dim": 12,
     "attention_bias": False, "share_embeddings": False, "target_vocab_size": 30,
     "num_encoder_layers": 3, "num_decoder_layers": 1},
    {"norm": "pre", "activation": "swish", "sinusoid_layout": "halves", "embedding_norm": True,
     "output_bias": True}]


# In the quick tier: the default variant and the one of models trained elsewhere, in float32
# (the other cases, 7-13 s each, run in the whole suite).
QUICK_STEP_CASES = {("float32", 0), ("float32", 2)}


class StepCase(NamedTuple):
    """A model of a step variant in a serving precision, the tokens and parents of six
    positions of a beam of 3 over two sentences, and the reference's log-probabilities."""
    model: kt.Transformer
    source: tf.Tensor
    tokens: tf.Tensor
    parents: tf.Tensor
    reference: np.ndarray


BEAM, LENGTH = 3, 6


def step_positions(case: StepCase, build, **options) -> tf.Tensor:
    """The log-probabilities `build`'s step gives at each position of `case`, the state
    reordered to the position's parents after each: a loop over the positions, as a search
    runs the step (in a graph, one step traced)."""
    step, state, reorder = build(case.model, case.source, BEAM, tf.constant(LENGTH + 2),
                                 **options)
    outputs = tf.TensorArray(tf.float32, size=LENGTH)
    for position in tf.range(LENGTH):
        log_probs, state = step(case.tokens[position], position, state)
        outputs = outputs.write(position, log_probs)
        state = reorder(state, case.parents[position])
    return outputs.stack()


@functools.cache
def step_case(number: int, dtype: str) -> StepCase:
    """The `StepCase` of `STEP_VARIANTS[number]` in `dtype`, built and its reference (the
    decoder rerun over each prefix, in a graph) computed once for the graph and XLA cases."""
    config = kt.TransformerConfig.preset("tiny", vocab_size=40, dropout=0.0,
                                         **STEP_VARIANTS[number])
    model = kt.Transformer(config)
    if model.output_bias is not None:  # zeros when built: a bias that changes the logits
        model.output_bias.assign(np.linspace(-1, 1, config.target_vocab_size, dtype="float32"))
    draws = np.random.default_rng(1)  # its own: the same draws whichever tests run before
    tokens = tf.constant(draws.integers(4, 30, size=(LENGTH, 2, BEAM)), tf.int32)
    # A hypothesis extends one of its own sentence's, as in a beam search.
    parents = tf.constant(draws.integers(0, BEAM, size=(LENGTH, 2 * BEAM))
                          + np.repeat([0, BEAM], BEAM), tf.int32)
    case = StepCase(serving_copy(model, dtype), tf.constant([[5, 6, 7, 8, 3], [9, 10, 3, 0, 0]]),
                    tokens, parents, None)
    return case._replace(reference=tf.function(step_positions)(case, recomputed_step).numpy())


@pytest.mark.parametrize("number, dtype, tolerance", [
    pytest.param(number, dtype, tolerance, id=f"{dtype}-variant{number}",
                 marks=[] if (dtype, number) in QUICK_STEP_CASES else [pytest.mark.slow])
    for dtype, tolerance in (("float32", 1e-5), ("bfloat16", 0.15))
    for number in range(len(STEP_VARIANTS))])
@pytest.mark.parametrize("jit_compile", [False, pytest.param(True, marks=pytest.mark.slow)])
def test_cached_step_equals_the_recomputed_step_at_every_position(number, dtype, tolerance,
                                                                  jit_compile):
    """The cached step (caches never reordered, each row reading its ancestors' positions)
    against the reference that reruns the decoder over each prefix, over six positions of a
    beam of 3 whose hypotheses extend random parents of their sentence: the same
    log-probabilities at every position, in a graph and under XLA (caches read whole, the
    unwritten positions masked)."""
    case = step_case(number, dtype)
    cached = tf.function(step_positions, jit_compile=jit_compile)(
        case, cached_step, static_shapes=jit_compile).numpy()
    finite = np.isfinite(case.reference)
    np.testing.assert_array_equal(np.isfinite(cached), finite)
    np.testing.assert_allclose(cached[finite], case.reference[finite], rtol=0, atol=tolerance)


def test_the_decoding_step_runs_the_same_ops_under_either_kernel_set():
    """The implementations differ in training only: the search's loop (the cached step, the decoder
    layers' own `call`) holds the same ops whichever set is in force (`hooks.references`), for
    a model with every norm a step can have."""
    model = kt.Transformer(kt.TransformerConfig.preset("tiny", vocab_size=40, **STEP_VARIANTS[2]))

    def loop_ops(implementation: str) -> list[tuple[str, int]]:
        with fast.implementation_scope(implementation):
            graph = tf.function(run_search, autograph=False).get_concrete_function(
                model, tf.TensorSpec([None, None], tf.int32), kt.SearchSettings(3)).graph
        counts: dict[str, int] = {}
        for function in graph.as_graph_def().library.function:
            if function.signature.name.startswith("while_body"):
                for node in function.node_def:
                    counts[node.op] = counts.get(node.op, 0) + 1
        return sorted(counts.items())

    ops = loop_ops("fast")
    assert dict(ops).get("MatMul", 0) > 10 and ops == loop_ops("reference")


@pytest.mark.parametrize("kwargs, field", [({"beam_size": 0}, "beam_size"),
                                           ({"length_penalty": -1.0}, "length_penalty"),
                                           ({"max_decode_extra": -1}, "max_decode_extra"),
                                           ({"jit_compile": True, "use_cache": False},
                                            "jit_compile")])
def test_bad_arguments_are_named(model, kwargs, field):
    with pytest.raises(ValueError, match=field):
        beam_search(model, SOURCES, **kwargs)


# A prefix per sentence: two ids, none, one, and longer than the source's limit allows (6).
PREFIXES = np.array([[20, 21, 0, 0, 0, 0, 0, 0],
                     [0, 0, 0, 0, 0, 0, 0, 0],
                     [22, 0, 0, 0, 0, 0, 0, 0],
                     [23, 24, 25, 26, 27, 28, 29, 30]], np.int32)


@pytest.mark.parametrize("search, kwargs", [(beam_search, {"beam_size": 3}), (greedy_decode, {})])
def test_prefix_starts_every_hypothesis_and_scores_as_teacher_forcing(model, search, kwargs):
    result = search(model, SOURCES, max_decode_extra=2, prefix_ids=PREFIXES, **kwargs)
    ids, lengths = result.ids.numpy(), result.lengths.numpy()
    for sentence, prefix in enumerate(PREFIXES):
        prefix = prefix[prefix != PAD_ID]
        # Room is made for the prefix and one more token, beyond the source's own limit.
        assert np.all(lengths[sentence] > len(prefix))
        for rank in range(ids.shape[1]):
            np.testing.assert_array_equal(ids[sentence, rank, :len(prefix)], prefix)
    for rank in range(ids.shape[1]):
        forced = score_hypotheses(model, SOURCES, result.ids[:, rank], 0.6)
        np.testing.assert_allclose(result.scores[:, rank].numpy(), forced.numpy(), atol=1e-4)


@pytest.mark.parametrize("beam_size", [1, 3])
def test_prefix_cache_matches_full_recomputation(model, beam_size):
    cached = beam_search(model, SOURCES, beam_size=beam_size, max_decode_extra=EXTRA,
                         prefix_ids=PREFIXES)
    recomputed = beam_search(model, SOURCES, beam_size=beam_size, max_decode_extra=EXTRA,
                             prefix_ids=PREFIXES, use_cache=False)
    np.testing.assert_array_equal(cached.ids.numpy(), recomputed.ids.numpy())
    np.testing.assert_allclose(cached.scores.numpy(), recomputed.scores.numpy(), atol=1e-5)


@pytest.mark.parametrize("search, kwargs", [(beam_search, {"beam_size": 3}), (greedy_decode, {})])
def test_empty_prefix_changes_nothing(model, search, kwargs):
    free = search(model, SOURCES, max_decode_extra=EXTRA, **kwargs)
    empty = search(model, SOURCES, max_decode_extra=EXTRA, prefix_ids=np.zeros([4, 3], np.int32),
                   **kwargs)
    np.testing.assert_array_equal(free.ids.numpy(), empty.ids.numpy())
    np.testing.assert_allclose(free.scores.numpy(), empty.scores.numpy(), atol=1e-6)


def test_greedy_forced_onto_its_own_start_finds_the_same_output(model):
    free = greedy_decode(model, SOURCES, max_decode_extra=EXTRA)
    own = free.ids.numpy()[:, 0, :2]
    own = np.where(np.cumsum(own == EOS_ID, axis=1) > 0, PAD_ID, own)  # never force an EOS
    forced = greedy_decode(model, SOURCES, max_decode_extra=EXTRA, prefix_ids=own)
    np.testing.assert_array_equal(forced.ids.numpy(), free.ids.numpy())
    np.testing.assert_allclose(forced.scores.numpy(), free.scores.numpy(), atol=1e-6)
