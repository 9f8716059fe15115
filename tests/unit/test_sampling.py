"""Sampling: token frequencies against the distribution they are drawn from (a known Markov
chain through the model-agnostic search, a tiny Transformer's own softmax), temperature, top-k
and top-p against a numpy reference, and seeds that reproduce a sentence's samples anywhere."""
import numpy as np
import pytest
import tensorflow as tf

import keras_transformer as kt
from keras_transformer import search
from keras_transformer.decoding import greedy_decode, sample
from keras_transformer.config import BOS_ID, EOS_ID

DRAWS = 20_000
SOURCES = np.array([[5, 6, 7, 8, 9, 3],
                    [10, 11, 3, 0, 0, 0],
                    [12, 13, 14, 15, 3, 0]], np.int32)


def reshaped_probs(log_probs: np.ndarray, temperature: float, top_k: int, top_p: float):
    """What sampling should draw from, computed independently of the library: softmax at
    `temperature`, the `top_k` most likely kept, then the smallest most-likely set of mass
    >= `top_p`, renormalized."""
    probs = np.exp(log_probs / temperature - np.max(log_probs / temperature))
    probs /= probs.sum()
    order = np.argsort(-probs, kind="stable")
    keep = np.zeros_like(probs, bool)
    keep[order[:top_k or len(probs)]] = True
    probs = np.where(keep, probs, 0.0) / np.where(keep, probs, 0.0).sum()
    mass = np.cumsum(probs[order])
    nucleus = order[:int(np.searchsorted(mass, top_p - 1e-12)) + 1]
    kept = np.zeros_like(probs, bool)
    kept[nucleus] = True
    return np.where(kept, probs, 0.0) / probs[kept].sum()


def assert_frequencies_match(counts: np.ndarray, probs: np.ndarray):
    """Every frequency within 5 binomial standard deviations (+1e-3) of its probability, and
    exactly 0 where the probability is 0."""
    draws = counts.sum()
    frequencies = counts / draws
    bound = 5 * np.sqrt(probs * (1 - probs) / draws) + 1e-3
    np.testing.assert_array_less(np.abs(frequencies - probs), bound)
    assert not counts[probs == 0].any()


# A Markov chain over 8 ids: the next token's log-probabilities depend on the previous one.
CHAIN = np.log(np.random.default_rng(3).dirichlet(np.full(8, 0.7), size=8)).astype("float32")


def chain_step(token_ids, position, state):
    return tf.gather(tf.constant(CHAIN), token_ids), state


@pytest.mark.parametrize("temperature, top_k, top_p", [(1.0, 0, 1.0), (0.6, 0, 1.0),
                                                        (1.3, 4, 1.0), (1.0, 0, 0.7),
                                                        (0.8, 5, 0.8)])
def test_two_token_samples_follow_the_chain(temperature, top_k, top_p):
    """The pairs (first, second token) of 20,000 samples: frequencies against p(y1) p(y2|y1)
    of the reshaped chain, so the second draw is checked conditioned on the first."""
    result = search.sampling(
        chain_step, (), limits=tf.constant([2]), buffer_length=tf.constant(2),
        seeds=tf.constant([7], tf.uint32), num_samples=DRAWS, temperature=temperature,
        top_k=top_k, top_p=top_p, eos_id=-1)
    pairs = result.ids.numpy()[0]
    counts = np.zeros((8, 8))
    np.add.at(counts, (pairs[:, 0], pairs[:, 1]), 1)
    first = reshaped_probs(CHAIN[BOS_ID], temperature, top_k, top_p)
    joint = first[:, None] * np.stack([reshaped_probs(row, temperature, top_k, top_p)
                                       for row in CHAIN])
    assert_frequencies_match(counts.ravel(), joint.ravel())
    # Scores are the chain's own log-probabilities (before temperature and truncation).
    np.testing.assert_allclose(result.scores.numpy()[0] * search.length_divisor(2, 0.6),
                               CHAIN[BOS_ID][pairs[:, 0]] + CHAIN[pairs[:, 0], pairs[:, 1]],
                               rtol=1e-5)


@pytest.fixture(scope="module")
def model():
    model = kt.Transformer(kt.TransformerConfig.preset("tiny", vocab_size=40, dropout=0.0))
    rng = np.random.default_rng(0)  # spread the untrained model's near-uniform softmax
    model.set_weights([weight + rng.normal(size=weight.shape).astype("float32") * 0.3
                       for weight in model.get_weights()])
    return model


@pytest.mark.parametrize("temperature, top_k, top_p", [
    (1.0, 0, 1.0), pytest.param(0.7, 6, 1.0, marks=pytest.mark.slow),
    pytest.param(1.0, 0, 0.8, marks=pytest.mark.slow)])
def test_first_tokens_follow_the_models_softmax(model, temperature, top_k, top_p):
    source = np.array([[5, 6, 7, EOS_ID]], np.int32)
    result = sample(model, source, seed=11, temperature=temperature, top_k=top_k, top_p=top_p,
                    num_samples=DRAWS, max_decode_extra=0)
    first = result.ids.numpy()[0, :, 0]
    log_probs = tf.nn.log_softmax(model((source, np.array([[BOS_ID]], np.int32))))[0, 0].numpy()
    log_probs[[0, BOS_ID]] = -np.inf  # PAD and BOS are never generated
    assert_frequencies_match(np.bincount(first, minlength=40),
                             reshaped_probs(log_probs, temperature, top_k, top_p))


@pytest.mark.slow
def test_a_sentence_draws_the_same_samples_alone_in_a_batch_and_under_xla(model):
    settings = dict(seed=5, temperature=1.2, top_p=0.95, max_decode_extra=4)
    together = sample(model, SOURCES, **settings)
    again = sample(model, SOURCES, **settings)
    np.testing.assert_array_equal(together.ids.numpy(), again.ids.numpy())
    for row, source in enumerate(SOURCES):
        alone = sample(model, source[None, :list(source).index(EOS_ID) + 1], **settings)
        width = alone.ids.shape[2]
        np.testing.assert_array_equal(alone.ids.numpy()[0, 0],
                                      together.ids.numpy()[row, 0, :width])
        assert not together.ids.numpy()[row, 0, width:].any()
    xla = sample(model, SOURCES, jit_compile=True, **settings)
    np.testing.assert_array_equal(xla.ids.numpy(), together.ids.numpy())
    recomputed = sample(model, SOURCES, use_cache=False, **settings)
    np.testing.assert_array_equal(recomputed.ids.numpy(), together.ids.numpy())
    others = [sample(model, SOURCES, **{**settings, "seed": seed}).ids.numpy()
              for seed in (6, 7, 8)]
    assert any(other.shape != together.ids.shape or (other != together.ids.numpy()).any()
               for other in others)


def test_top_k_one_is_greedy_and_prefixes_are_kept(model):
    greedy = greedy_decode(model, SOURCES, max_decode_extra=5)
    drawn = sample(model, SOURCES, seed=3, top_k=1, max_decode_extra=5, temperature=2.0)
    np.testing.assert_array_equal(drawn.ids.numpy(), greedy.ids.numpy())
    np.testing.assert_allclose(drawn.scores.numpy(), greedy.scores.numpy(), atol=1e-5)
    prefix = np.array([[20, 21], [22, 0], [0, 0]], np.int32)
    forced = sample(model, SOURCES, seed=3, num_samples=4, max_decode_extra=5,
                    prefix_ids=prefix).ids.numpy()
    assert (forced[0, :, :2] == [20, 21]).all() and (forced[1, :, 0] == 22).all()


def test_sentence_seeds_ignore_padding_and_follow_tokens_order_and_seed():
    seeds = search.sentence_seeds(tf.constant([[5, 6, 3, 0], [6, 5, 3, 0]]), 1).numpy()
    unpadded = search.sentence_seeds(tf.constant([[5, 6, 3]]), 1).numpy()
    assert seeds[0] == unpadded[0] and seeds[0] != seeds[1]
    assert search.sentence_seeds(tf.constant([[5, 6, 3]]), 2).numpy()[0] != unpadded[0]


@pytest.mark.parametrize("settings, field", [({"temperature": 0.0}, "temperature"),
                                             ({"top_p": 0.0}, "top_p"),
                                             ({"top_p": 1.5}, "top_p"),
                                             ({"top_k": -1}, "top_k"),
                                             ({"seed": -1}, "sampling_seed"),
                                             ({"num_samples": 0}, "num_samples")])
def test_bad_sampling_settings_are_named(model, settings, field):
    with pytest.raises(ValueError, match=field):
        sample(model, SOURCES, **settings)
