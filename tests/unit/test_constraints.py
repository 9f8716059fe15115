"""Lexically constrained beam search (`keras_transformer.constraints`, `search.beam`'s
`constraints`) over model-free step functions: random bigram tables."""
import numpy as np
import pytest
import tensorflow as tf

from keras_transformer import constraints, search
from keras_transformer.config import BOS_ID, EOS_ID, PAD_ID

VOCAB = 14
SYMBOLS = np.arange(EOS_ID + 1, VOCAB)


def bigram_step(seed: int):
    """A step function whose next-token log-probabilities depend on the last token only (PAD,
    UNK and BOS never emitted)."""
    rng = np.random.default_rng(seed)
    table = rng.normal(size=(VOCAB, VOCAB)) * 2.0
    table[:, [PAD_ID, 1, BOS_ID]] = -1e9
    log_probs = tf.nn.log_softmax(tf.constant(table, tf.float32))

    def step(token_ids, position, state):
        return tf.gather(log_probs, token_ids), state
    return step


def random_constraints(rng: np.random.Generator, batch: int, most: int = 3) -> np.ndarray:
    """`[batch, most, 3]`: 0 to `most` phrases of 1-3 symbols per sentence, PAD-padded."""
    phrases = np.zeros((batch, most, 3), np.int32)
    for row in range(batch):
        for index in range(rng.integers(0, most + 1)):
            length = rng.integers(1, 4)
            phrases[row, index, :length] = rng.choice(SYMBOLS, size=length)
    return phrases


def run_beam(step, limits, beam_size: int, phrases=None, jit_compile: bool = False):
    limits = tf.constant(limits, tf.int32)
    batch = int(limits.shape[0])

    def run(limits, phrases):
        return search.beam(step, tf.zeros([batch * beam_size, 1]), limits,
                           tf.reduce_max(limits), beam_size, constraints=phrases)
    graph = tf.function(run, jit_compile=jit_compile, autograph=False)
    return graph(limits, None if phrases is None else tf.constant(phrases, tf.int32))


def contains(tokens: list[int], phrase: list[int]) -> bool:
    return any(tokens[i:i + len(phrase)] == phrase for i in range(len(tokens) - len(phrase) + 1))


def phrases_of(row: np.ndarray) -> list[list[int]]:
    return [[int(t) for t in phrase if t != PAD_ID] for phrase in row if phrase[0] != PAD_ID]


@pytest.mark.parametrize("seed", range(6))
def test_every_constraint_appears_where_the_length_limit_allows(seed):
    rng = np.random.default_rng(seed)
    phrases = random_constraints(rng, batch=8)
    beam_size = [1, 2, 4, 5, 4, 3][seed]
    result = run_beam(bigram_step(seed), [16] * 8, beam_size, phrases)
    unplaced = result.unplaced.numpy()
    assert not unplaced[:, 0].any()
    for row in range(8):
        for hypothesis in range(beam_size):
            if result.scores[row, hypothesis] == -np.inf:
                continue
            tokens = [int(t) for t in result.ids[row, hypothesis, :result.lengths[row,
                                                                               hypothesis]]]
            for index, phrase in enumerate(phrases_of(phrases[row])):
                # the best holds every phrase; another hypothesis of the n-best may have
                # reached the limit first, and then names what it lacks
                assert contains(tokens, phrase) or unplaced[row, hypothesis, index]
            # ended by EOS (all placed), or at the limit
            assert (tokens[-1] == EOS_ID) == (len(tokens) < 16 or tokens[-1] == EOS_ID)
            if tokens[-1] == EOS_ID:
                assert not unplaced[row, hypothesis].any()


@pytest.mark.parametrize("beam_size", [1, 4])
def test_no_constraints_is_the_plain_beam_search(beam_size):
    step, limits = bigram_step(7), [9, 12, 5, 16]
    plain = run_beam(step, limits, beam_size)
    assert plain.unplaced is None
    for none in (np.zeros((4, 0, 0), np.int32), np.zeros((4, 2, 3), np.int32)):
        constrained = run_beam(step, limits, beam_size, none)
        np.testing.assert_array_equal(constrained.ids.numpy(), plain.ids.numpy())
        np.testing.assert_array_equal(constrained.scores.numpy(), plain.scores.numpy())
        np.testing.assert_array_equal(constrained.lengths.numpy(), plain.lengths.numpy())


def test_constraints_on_some_sentences_leave_the_others_translations_unchanged():
    step, limits = bigram_step(8), [10, 14, 8, 12, 16, 9]
    phrases = random_constraints(np.random.default_rng(8), batch=6)
    phrases[[1, 3, 4]] = PAD_ID
    phrases[0, 0, :2] = [5, 9]  # at least one sentence constrained
    plain, constrained = run_beam(step, limits, 4), run_beam(step, limits, 4, phrases)
    for row in (1, 3, 4):
        length = int(plain.lengths[row].numpy().max())
        np.testing.assert_array_equal(constrained.ids[row, :, :length].numpy(),
                                      plain.ids[row, :, :length].numpy())
        np.testing.assert_array_equal(constrained.scores[row].numpy(),
                                      plain.scores[row].numpy())
    assert not np.array_equal(constrained.ids[0, 0].numpy(), plain.ids[0, 0].numpy()[
        :constrained.ids.shape[2]])


def test_constraints_beyond_the_length_limit_are_reported_unplaced():
    phrases = np.zeros((3, 2, 3), np.int32)
    phrases[0] = [[5, 6, 7], [8, 9, 10]]  # 6 pieces in a limit of 4
    phrases[1] = [[5, 6, 0], [0, 0, 0]]
    phrases[2] = [[11, 0, 0], [12, 13, 0]]  # 3 pieces in a limit of 3: fit exactly
    result = run_beam(bigram_step(9), [4, 4, 3], 4, phrases)
    unplaced = result.unplaced.numpy()
    best = [[int(t) for t in result.ids[row, 0, :result.lengths[row, 0]]] for row in range(3)]
    for row in range(3):  # what is reported is exactly what the translation lacks
        for index, phrase in enumerate(phrases[row]):
            real = [int(t) for t in phrase if t != PAD_ID]
            assert unplaced[row, 0, index] == (bool(real) and not contains(best[row], real))
    assert unplaced[0, 0].any() and not unplaced[1, 0].any() and not unplaced[2, 0].any()
    assert sorted(best[2]) == [11, 12, 13]  # no room for EOS: ended at the limit


def test_xla_compiles_the_constrained_search_to_the_same_hypotheses():
    step, limits = bigram_step(10), [12, 9, 15]
    phrases = random_constraints(np.random.default_rng(10), batch=3)
    graph, xla = (run_beam(step, limits, 4, phrases, jit_compile=jit) for jit in (False, True))
    np.testing.assert_array_equal(xla.ids.numpy(), graph.ids.numpy())
    np.testing.assert_allclose(xla.scores.numpy(), graph.scores.numpy(), atol=1e-5)


def test_a_phrase_is_continued_abandoned_or_restarted_as_the_tokens_say():
    phrases = constraints.padded(tf.constant([[[5, 6, 7], [9, 0, 0], [6, 8, 0]]]))
    lengths = constraints.phrase_lengths(phrases)
    progress = constraints.start(phrases, 1)

    def emit(progress, token):
        return constraints.advanced(progress, tf.constant([[token]]), phrases, lengths)

    states = []
    for token in (5, 6, 5, 9, 6, 8, 5, 6, 7):
        progress = emit(progress, token)
        states.append((progress.placed.numpy()[0, 0, :3].tolist(),
                       int(progress.phrase[0, 0]), int(progress.matched[0, 0])))
    assert states == [
        ([False, False, False], 0, 1),  # 5 starts "5 6 7"
        ([False, False, False], 0, 2),  # 6 continues it
        ([False, False, False], 0, 1),  # 5 abandons it, and starts it again
        ([False, True, False], -1, 0),  # 9 abandons it and places the one-piece "9"
        ([False, True, False], 2, 1),   # 6 starts "6 8" ("5 6 7" does not start with 6)
        ([False, True, True], -1, 0),   # 8 places "6 8"
        ([False, True, True], 0, 1),
        ([False, True, True], 0, 2),
        ([True, True, True], -1, 0)]    # "5 6 7" placed: every phrase
    assert constraints.complete(progress, lengths).numpy().all()
    assert constraints.pieces_met(progress, lengths).numpy().tolist() == [[6]]


@pytest.mark.parametrize("seed", range(4))
def test_the_beam_takes_each_banks_best_first_fullest_bank_first(seed):
    """`choose` on random log-probabilities: with at least as many slots as banks, every bank
    that has a candidate gives its best one, in the order of the banks (most pieces met
    first), then the second best of each; within a bank, candidates by score."""
    rng = np.random.default_rng(seed)
    batch, beam_size = 3, 6
    totals = tf.constant(rng.normal(size=(batch, beam_size, VOCAB)), tf.float32)
    phrases = constraints.padded(tf.constant(random_constraints(rng, batch, most=2)))
    lengths = constraints.phrase_lengths(phrases)
    progress = constraints.start(phrases, beam_size)
    for _ in range(3):  # hypotheses that have met some pieces already
        tokens = tf.constant(rng.choice(SYMBOLS, size=(batch, beam_size)), tf.int32)
        progress = constraints.advanced(progress, tokens, phrases, lengths)
    scores, origins, indices, after = constraints.choose(totals, progress, phrases, beam_size)
    banks = constraints.pieces_met(after, lengths).numpy()
    scores = scores.numpy()
    for row in range(batch):
        kept_banks = banks[row].tolist()
        distinct = sorted(set(kept_banks), reverse=True)
        stripe = kept_banks[:len(distinct)]
        assert stripe == distinct  # the best of each bank first, fullest bank first
        for bank in distinct:  # within a bank, by score
            mine = scores[row][banks[row] == bank]
            assert np.all(np.diff(mine) <= 0)
        # no candidate kept twice
        pairs = list(zip(origins[row].numpy().tolist(), indices[row].numpy().tolist()))
        assert len(set(pairs)) == len(pairs)
