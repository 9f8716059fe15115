"""Beam search on a `tiny` model trained with `fit` to reverse random token strings."""
import keras
import numpy as np
import pytest

import keras_transformer as kt
from keras_transformer.decoding import beam_search, greedy_decode, score_hypotheses

SYMBOLS = np.arange(4, 20)  # Every id but PAD, UNK, BOS and EOS.
ALPHA = 0.6


def reversal_data(count: int, rng: np.random.Generator):
    """(source, target_in, target_out), padded: the target is the source reversed."""
    width = 10
    source, target_in, target_out = (np.zeros((count, width), np.int32) for _ in range(3))
    for row in range(count):
        tokens = rng.choice(SYMBOLS, size=rng.integers(3, 9))
        source[row, :len(tokens) + 1] = [*tokens, kt.EOS_ID]
        target_in[row, :len(tokens) + 1] = [kt.BOS_ID, *tokens[::-1]]
        target_out[row, :len(tokens) + 1] = [*tokens[::-1], kt.EOS_ID]
    return source, target_in, target_out


@pytest.fixture(scope="module")
def trained():
    keras.utils.set_random_seed(0)  # Deterministic weights: the assertions below are exact.
    recipe = kt.Recipe.preset("tiny", vocab_size=20, warmup_steps=100)
    model = kt.Transformer(recipe.architecture)
    model.compile(optimizer=kt.make_optimizer(recipe.architecture.d_model, recipe.training),
                  loss=kt.LabelSmoothedCrossEntropy(recipe.training.label_smoothing))
    source, target_in, target_out = reversal_data(4096, np.random.default_rng(0))
    model.fit((source, target_in), target_out, batch_size=64, epochs=6, verbose=0)
    return model


@pytest.mark.slow
def test_beam_never_scores_worse_than_greedy(trained):
    source, _, target_out = reversal_data(64, np.random.default_rng(1))
    greedy = greedy_decode(trained, source, length_penalty=ALPHA, max_decode_extra=4)
    beam = beam_search(trained, source, beam_size=4, length_penalty=ALPHA, max_decode_extra=4)
    greedy_scores = score_hypotheses(trained, source, greedy.ids[:, 0], ALPHA).numpy()
    beam_scores = score_hypotheses(trained, source, beam.ids[:, 0], ALPHA).numpy()
    assert np.all(beam_scores >= greedy_scores - 1e-5)
    np.testing.assert_allclose(beam_scores, beam.scores[:, 0].numpy(), atol=1e-4)
    # The model did learn the task, so the comparison is between meaningful outputs.
    width = target_out.shape[1]
    best = np.pad(beam.ids[:, 0].numpy(), [(0, 0), (0, width)])[:, :width]
    assert np.mean(np.all(best == target_out, axis=1)) > 0.5


@pytest.mark.slow
def test_cached_beam_equals_recomputation_on_trained_model(trained):
    source, _, _ = reversal_data(16, np.random.default_rng(2))
    cached = beam_search(trained, source, beam_size=4, max_decode_extra=4)
    recomputed = beam_search(trained, source, beam_size=4, max_decode_extra=4, use_cache=False)
    np.testing.assert_array_equal(cached.ids.numpy(), recomputed.ids.numpy())
    np.testing.assert_allclose(cached.scores.numpy(), recomputed.scores.numpy(), atol=1e-5)


@pytest.mark.slow
def test_bfloat16_serving_copy_translates_like_float32(trained):
    """A bfloat16 export's model (weights rounded once, layer norm/softmax/logits float32)
    finds the same best hypotheses as float32 on the learned task, with close scores."""
    from keras_transformer.precision import serving_copy

    source, _, _ = reversal_data(64, np.random.default_rng(3))
    exact = beam_search(serving_copy(trained, "float32"), source, beam_size=4, max_decode_extra=4)
    rounded = beam_search(serving_copy(trained, "bfloat16"), source, beam_size=4,
                          max_decode_extra=4)
    agree = np.all(exact.ids[:, 0].numpy() == rounded.ids[:, 0].numpy(), axis=1)
    assert agree.mean() >= 0.95
    # bfloat16 keeps 8 bits of mantissa: each weight is off by up to 0.4%, and a sentence's
    # score sums the resulting error over its tokens, so the bound grows with the score.
    got, want = rounded.scores[:, 0].numpy()[agree], exact.scores[:, 0].numpy()[agree]
    np.testing.assert_allclose(got, want, rtol=0.1, atol=0.05)
    assert np.mean(np.abs(got - want)) <= 0.03


def reference_phrases(target_out: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Post & Vilar's protocol: 1-3 random phrases of 1-3 tokens from each reference, apart
    from each other, `[batch, 3, 3]` PAD-padded."""
    phrases = np.zeros((len(target_out), 3, 3), np.int32)
    for row, reference in enumerate(target_out):
        tokens = reference[(reference != kt.PAD_ID) & (reference != kt.EOS_ID)].tolist()
        cuts = sorted(rng.choice(np.arange(1, len(tokens)), size=2, replace=False).tolist())
        spans = [tokens[a:b] for a, b in zip([0, *cuts], [*cuts, len(tokens)])]
        for index, span in enumerate(spans[:rng.integers(1, 4)]):
            length = min(rng.integers(1, 4), len(span))
            start = rng.integers(0, len(span) - length + 1)
            phrases[row, index, :length] = span[start:start + length]
    return phrases


def test_constrained_search_places_every_constraint_and_references_help(trained):
    """On the learned task: random constraints all appear in the best translations (the limit
    leaves room), and constraints from the references keep or raise exact matches."""
    rng = np.random.default_rng(4)
    source, _, target_out = reversal_data(48, rng)
    random_phrases = np.zeros((48, 3, 3), np.int32)
    for row in range(48):
        for index in range(rng.integers(1, 4)):
            length = rng.integers(1, 4)
            random_phrases[row, index, :length] = rng.choice(SYMBOLS, size=length)
    result = beam_search(trained, source, beam_size=4, max_decode_extra=12,
                         constraints=random_phrases)
    assert not result.unplaced.numpy()[:, 0].any()
    for row in range(48):
        best = result.ids[row, 0, :result.lengths[row, 0]].numpy().tolist()
        assert best[-1] == kt.EOS_ID
        for phrase in random_phrases[row]:
            real = phrase[phrase != kt.PAD_ID].tolist()
            assert not real or any(best[i:i + len(real)] == real for i in range(len(best)))

    width = target_out.shape[1]
    def exact(ids):
        return np.mean(np.all(np.pad(ids, [(0, 0), (0, width)])[:, :width] == target_out, 1))
    plain = beam_search(trained, source, beam_size=4, max_decode_extra=4)
    guided = beam_search(trained, source, beam_size=4, max_decode_extra=4,
                         constraints=reference_phrases(target_out, rng))
    assert exact(guided.ids[:, 0].numpy()) >= exact(plain.ids[:, 0].numpy())
