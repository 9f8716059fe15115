"""Ensemble decoding: a search over several models scores the mean of their probabilities."""
import keras
import numpy as np
import pytest
import tensorflow as tf

import keras_transformer as kt
from keras_transformer import search
from keras_transformer.config import BOS_ID, PAD_ID, SearchSettings
from keras_transformer.decoding import beam_search, greedy_decode, length_divisor
from keras_transformer.decoding.translator import TranslationModule
from keras_transformer.model import source_padding_mask

EXTRA = 6
SOURCES = np.array([[5, 6, 7, 8, 9, 3],
                    [10, 11, 3, 0, 0, 0],
                    [12, 13, 14, 15, 3, 0]], np.int32)


def tiny_models(count: int, vocab_size: int = 50) -> list[kt.Transformer]:
    keras.utils.set_random_seed(7)
    return [kt.Transformer(kt.TransformerConfig.preset("tiny", vocab_size=vocab_size))
            for _ in range(count)]


@pytest.fixture(scope="module")
def models():
    return tiny_models(2)


def mean_probability_scores(models, sources, hypotheses, alpha: float) -> np.ndarray:
    """Teacher-forced score of each hypothesis under the mean of the models' probabilities:
    sum over its tokens of log mean_m p_m(y_t | y_<t, x), over `length_divisor`."""
    targets = np.asarray(hypotheses)
    inputs = np.concatenate([np.full((len(targets), 1), BOS_ID), targets[:, :-1]], axis=1)
    member_log_probs = np.stack([
        tf.nn.log_softmax(model.decode(inputs, model.encode(sources, training=False),
                                       source_padding_mask(sources), training=False)).numpy()
        for model in models])
    mean = np.logaddexp.reduce(member_log_probs, axis=0) - np.log(len(models))
    token_log_probs = np.take_along_axis(mean, targets[..., None], axis=-1)[..., 0]
    real = targets != PAD_ID
    total = np.where(real, token_log_probs, 0.0).sum(axis=1)
    return total / length_divisor(real.sum(axis=1), alpha).numpy()


def test_ensemble_step_averages_probabilities_and_reorders_every_member():
    with np.errstate(divide="ignore"):  # log 0 = -inf: a candidate a member never emits
        first, second, expected = (np.log(np.array(probabilities)) for probabilities in (
            [0.0, 0.5, 0.5, 0.0], [0.0, 0.2, 0.6, 0.2], [0.0, 0.35, 0.55, 0.1]))

    def member(log_probs):
        def step(token_ids, position, state):
            scores = tf.broadcast_to(tf.constant(log_probs, tf.float32), [2, 2, 4])
            return scores, state * 10
        return step, tf.range(4), search.gather_rows

    step, state, reorder = search.ensemble([member(first), member(second)])
    log_probs, state = step(tf.zeros([2, 2], tf.int32), tf.constant(0), state)
    np.testing.assert_allclose(log_probs.numpy()[1, 0], expected, rtol=1e-6)
    assert np.isneginf(log_probs.numpy()[..., 0]).all()  # no NaN where every member has -inf
    for member_state in reorder(state, tf.constant([3, 2, 1, 0])):
        np.testing.assert_array_equal(member_state.numpy(), [30, 20, 10, 0])


def test_a_model_twice_is_the_model(models):
    single = beam_search(models[0], SOURCES, beam_size=3, max_decode_extra=EXTRA)
    twice = beam_search([models[0], models[0]], SOURCES, beam_size=3, max_decode_extra=EXTRA)
    np.testing.assert_array_equal(single.ids.numpy(), twice.ids.numpy())
    np.testing.assert_allclose(single.scores.numpy(), twice.scores.numpy(), atol=1e-5)


@pytest.mark.parametrize("use_cache", [True, pytest.param(False, marks=pytest.mark.slow)])
def test_scores_are_the_teacher_forced_mean_probability(models, use_cache):
    result = beam_search(models, SOURCES, beam_size=3, length_penalty=0.6,
                         max_decode_extra=EXTRA, use_cache=use_cache)
    for rank in range(3):
        np.testing.assert_allclose(
            result.scores[:, rank].numpy(),
            mean_probability_scores(models, SOURCES, result.ids[:, rank].numpy(), 0.6),
            atol=1e-4)
    alone = beam_search(models[0], SOURCES, beam_size=3, length_penalty=0.6,
                        max_decode_extra=EXTRA)
    assert not np.allclose(result.scores.numpy(), alone.scores.numpy(), atol=1e-3)


@pytest.mark.slow
def test_greedy_and_xla_ensembles_match(models):
    greedy = greedy_decode(models, SOURCES, max_decode_extra=EXTRA)
    beam_one = beam_search(models, SOURCES, beam_size=1, max_decode_extra=EXTRA)
    np.testing.assert_array_equal(greedy.ids.numpy(), beam_one.ids.numpy())
    graph = beam_search(models, SOURCES, beam_size=3, max_decode_extra=EXTRA)
    xla = beam_search(models, SOURCES, beam_size=3, max_decode_extra=EXTRA, jit_compile=True)
    np.testing.assert_array_equal(graph.ids.numpy(), xla.ids.numpy())
    np.testing.assert_allclose(graph.scores.numpy(), xla.scores.numpy(), atol=1e-4)


def test_members_must_share_vocabulary_and_length(models):
    other = kt.Transformer(kt.TransformerConfig.preset("tiny", vocab_size=51))
    with pytest.raises(ValueError, match="ensemble member 1: vocab_size=51"):
        beam_search([models[0], other], SOURCES)
    shorter = kt.Transformer(kt.TransformerConfig.preset("tiny", vocab_size=50, max_length=40))
    with pytest.raises(ValueError, match="ensemble member 2: max_length=40"):
        beam_search([*models, shorter], SOURCES)
    wider = kt.Transformer(kt.TransformerConfig.preset(  # same source vocabulary, wider output
        "tiny", vocab_size=50, share_embeddings=False, tie_output=False, target_vocab_size=60))
    with pytest.raises(ValueError, match="ensemble member 1: target_vocab_size=60"):
        beam_search([models[0], wider], SOURCES)


@pytest.mark.slow
def test_translator_searches_with_its_ensemble(demo_tokenizer):
    first, second = tiny_models(2, demo_tokenizer.vocab_size)
    settings = SearchSettings(beam_size=3, length_penalty=0.6, max_decode_extra=EXTRA)
    translator = TranslationModule(first, demo_tokenizer, settings, ensemble=[second])
    translated = translator.translate_ids(tf.constant(SOURCES))
    expected = beam_search([first, second], SOURCES, 3, 0.6, EXTRA)
    np.testing.assert_array_equal(translated["nbest_ids"].numpy(), expected.ids.numpy())
    np.testing.assert_allclose(translated["nbest_scores"].numpy(), expected.scores.numpy(),
                               atol=1e-5)
    with pytest.raises(ValueError, match="ensemble member 1"):
        TranslationModule(first, demo_tokenizer, settings, ensemble=tiny_models(1, 50))
