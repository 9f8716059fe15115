"""Vocabulary shortlists: what they hold, and searches over them against the full vocabulary."""
import numpy as np
import pytest
import tensorflow as tf

import keras_transformer as kt
from keras_transformer.decoding import beam_search, greedy_decode
from keras_transformer.decoding.transformer_search import run_search
from keras_transformer.decoding.shortlist import VocabularyShortlist, build_shortlist
from keras_transformer.config import BOS_ID, EOS_ID, PAD_ID, UNK_ID

VOCAB = 50
EXTRA = 6
SOURCES = np.array([[5, 6, 7, 8, 9, 3],
                    [10, 11, 3, 0, 0, 0],
                    [12, 13, 14, 15, 3, 0]], np.int32)


@pytest.fixture(scope="module")
def model():
    return kt.Transformer(kt.TransformerConfig.preset("tiny", vocab_size=VOCAB))


def whole_vocabulary() -> VocabularyShortlist:
    return VocabularyShortlist(np.arange(VOCAB), np.zeros([VOCAB, 1]))


def narrow(per_source_ids: dict[int, list[int]], frequent=(UNK_ID,)) -> VocabularyShortlist:
    candidates = np.zeros([VOCAB, 2], np.int32)
    for source, targets in per_source_ids.items():
        candidates[source, :len(targets)] = targets
    return VocabularyShortlist(frequent, candidates)


def test_build_ranks_specific_translations_first_and_counts_frequent_tokens():
    # Source 5 always comes with target 20; 6 with 21; target 30 is in every sentence (common,
    # so not specific to any source); 40 appears once, beside 5.
    sources = [[5, 6], [5], [6], [5, 7], [6, 7]]
    targets = [[20, 21, 30, 30], [20, 30, 40], [21, 30], [20, 30], [21, 30]]
    shortlist = build_shortlist(sources, targets, VOCAB, frequent=1, per_source=2)
    candidates = shortlist.candidates.numpy()
    # Dice(5, 20) = 2*3/(3+3) = 1 > Dice(5, 30) = 2*3/(3+5) > Dice(5, 40) = 2*1/(3+1) = 0.5.
    assert candidates[5].tolist() == [20, 30]
    assert candidates[6].tolist() == [21, 30]
    assert candidates[9].tolist() == [PAD_ID, PAD_ID]  # never seen
    assert shortlist.frequent_ids.numpy().tolist() == [30]  # 6 tokens, the most


def test_build_names_the_pair_with_an_id_beyond_the_vocabulary():
    with pytest.raises(ValueError, match="pair 2: ids beyond the vocabulary of 50"):
        build_shortlist([[5], [5, 50]], [[6], [7]], VOCAB, frequent=1, per_source=1)
    with pytest.raises(ValueError, match="per_source >= 1"):
        build_shortlist([[5]], [[6]], VOCAB, frequent=1, per_source=0)


def test_target_ids_union_the_batch_candidates_eos_pad_and_prefix():
    shortlist = narrow({5: [20, 21], 10: [22, BOS_ID]}, frequent=(UNK_ID,))
    ids = shortlist.target_ids(tf.constant([[5, 3, 0], [10, 5, 3]]),
                               prefix_ids=tf.constant([[33, 0], [0, 0]])).numpy()
    assert ids.tolist() == sorted({PAD_ID, UNK_ID, BOS_ID, EOS_ID, 20, 21, 22, 33})


def test_a_pad_row_of_candidates_never_enters_a_sentences_shortlist(model):
    """A table built by hand whose PAD row lists ids: padding adds none of them, so a sentence
    gets the same shortlist, and translation, padded or not (a batch's shortlist is still the
    union of its sentences')."""
    shortlist = narrow({5: [20, 21], 10: [22, 23], PAD_ID: [40, 41]})
    padded = shortlist.target_ids(tf.constant([[10, 3, 0, 0]])).numpy().tolist()
    assert padded == shortlist.target_ids(tf.constant([[10, 3]])).numpy().tolist()
    assert 40 not in padded and 41 not in padded
    unpadded = beam_search(model, SOURCES[1:2, :3], beam_size=3, max_decode_extra=EXTRA,
                           shortlist=shortlist)
    padded = beam_search(model, SOURCES[1:2], beam_size=3, max_decode_extra=EXTRA,
                         shortlist=shortlist)
    np.testing.assert_array_equal(padded.ids.numpy(), unpadded.ids.numpy())
    np.testing.assert_allclose(padded.scores.numpy(), unpadded.scores.numpy(), atol=1e-5)


@pytest.mark.parametrize("beam_size", [1, 4])
def test_whole_vocabulary_shortlist_searches_exactly_like_none(model, beam_size):
    full = beam_search(model, SOURCES, beam_size=beam_size, max_decode_extra=EXTRA)
    listed = beam_search(model, SOURCES, beam_size=beam_size, max_decode_extra=EXTRA,
                         shortlist=whole_vocabulary())
    np.testing.assert_array_equal(full.ids.numpy(), listed.ids.numpy())
    np.testing.assert_allclose(full.scores.numpy(), listed.scores.numpy(), atol=1e-6)


@pytest.mark.slow
@pytest.mark.parametrize("beam_size", [1, 3])
def test_narrow_shortlist_emits_only_its_ids_and_cache_equals_recomputation(model, beam_size):
    shortlist = narrow({5: [20, 21], 10: [22, 23], 12: [24, 25]})
    allowed = set(shortlist.target_ids(tf.constant(SOURCES)).numpy().tolist()) | {PAD_ID}
    cached = beam_search(model, SOURCES, beam_size=beam_size, max_decode_extra=EXTRA,
                         shortlist=shortlist)
    recomputed = beam_search(model, SOURCES, beam_size=beam_size, max_decode_extra=EXTRA,
                             shortlist=shortlist, use_cache=False)
    assert set(np.unique(cached.ids.numpy()).tolist()) <= allowed
    np.testing.assert_array_equal(cached.ids.numpy(), recomputed.ids.numpy())
    np.testing.assert_allclose(cached.scores.numpy(), recomputed.scores.numpy(), atol=1e-5)
    greedy = greedy_decode(model, SOURCES, max_decode_extra=EXTRA, shortlist=shortlist)
    if beam_size == 1:
        np.testing.assert_array_equal(greedy.ids.numpy(), cached.ids.numpy())


def test_narrow_shortlist_renormalizes_over_its_ids(model):
    """With EOS and one token listed, a hypothesis' score is the teacher-forced sum of
    log-softmax over those two ids' and PAD's logits (length penalty off)."""
    shortlist = VocabularyShortlist([20], np.zeros([VOCAB, 1]))
    result = greedy_decode(model, SOURCES[:1], length_penalty=0.0, max_decode_extra=EXTRA,
                           shortlist=shortlist)
    length = int(result.lengths.numpy()[0, 0])
    emitted = result.ids.numpy()[0, 0, :length]
    assert set(emitted.tolist()) <= {EOS_ID, 20}
    inputs = np.concatenate([[BOS_ID], emitted[:-1]])[None].astype(np.int32)
    logits = model.decode(inputs, model.encode(SOURCES[:1]), tf.constant(SOURCES[:1] != 0))
    listed = tf.nn.log_softmax(tf.gather(logits[0], [PAD_ID, EOS_ID, 20], axis=-1)).numpy()
    expected = sum(listed[t, 1 if token == EOS_ID else 2] for t, token in enumerate(emitted))
    np.testing.assert_allclose(result.scores.numpy()[0, 0], expected, atol=1e-4)


def test_shortlist_with_prefix_keeps_the_prefix(model):
    shortlist = narrow({5: [20, 21]})
    result = beam_search(model, SOURCES, beam_size=2, max_decode_extra=EXTRA,
                         shortlist=shortlist, prefix_ids=tf.constant([[40, 41]] * 3))
    np.testing.assert_array_equal(result.ids.numpy()[:, :, :2], [[[40, 41]] * 2] * 3)


def test_padded_target_ids_are_the_target_ids_then_unscored_fillers_of_a_static_size():
    shortlist = narrow({5: [20, 21], 10: [22, BOS_ID]}, frequent=(UNK_ID, 20))
    sources, prefix = tf.constant([[5, 3, 0], [10, 5, 3]]), tf.constant([[33, 0], [0, 0]])
    listed = shortlist.target_ids(sources, prefix).numpy().tolist()
    ids, unscored = (t.numpy() for t in shortlist.padded_target_ids(sources, prefix))
    # 2 frequent + 6 sources x 2 candidates + PAD and EOS + 4 prefix ids: 20 slots.
    assert ids.shape == unscored.shape == (2 + 6 * 2 + 2 + 4,)
    assert ids[~unscored].tolist() == listed == ids[:len(listed)].tolist()
    assert unscored[len(listed):].all() and len(set(ids.tolist())) == ids.size
    wide = shortlist.padded_target_ids(tf.zeros([4, 10], tf.int32))[0]  # 84 slots > VOCAB
    assert sorted(wide.numpy().tolist()) == list(range(VOCAB))
    # Traced without shapes (as an export's signature is), compiled with them.
    compiled = tf.function(shortlist.padded_target_ids, jit_compile=True,
                           input_signature=[tf.TensorSpec([None, None], tf.int32)])
    np.testing.assert_array_equal(compiled(sources)[0], shortlist.padded_target_ids(sources)[0])


@pytest.mark.slow
@pytest.mark.parametrize("beam_size", [1, 3])
def test_xla_search_over_the_padded_shortlist_equals_the_graph_search(model, beam_size):
    """`jit_compile` scores the shortlist padded to a static size; the fillers change nothing:
    the same ids and scores as the graph search over `target_ids`, also with a prefix (and so
    for the graph search built with static shapes: the padded form, caches read whole)."""
    shortlist = narrow({5: [20, 21], 10: [22, 23], 12: [24, 25]}, frequent=(UNK_ID, 30, 31))
    prefix = tf.constant([[30, 0], [0, 0], [31, 20]])
    for prefix_ids in (None, prefix):
        graph = beam_search(model, SOURCES, beam_size=beam_size, max_decode_extra=EXTRA,
                            shortlist=shortlist, prefix_ids=prefix_ids)
        compiled = beam_search(model, SOURCES, beam_size=beam_size, max_decode_extra=EXTRA,
                               shortlist=shortlist, prefix_ids=prefix_ids, jit_compile=True)
        padded = tf.function(run_search, autograph=False)(
            model, tf.constant(SOURCES), kt.SearchSettings(beam_size, 0.6, EXTRA),
            prefix_ids=prefix_ids, shortlist=shortlist, static_shapes=True)
        for result in (compiled, padded):
            np.testing.assert_array_equal(result.ids.numpy(), graph.ids.numpy())
            np.testing.assert_allclose(result.scores.numpy(), graph.scores.numpy(), atol=1e-5)


def test_bad_tables_are_refused():
    with pytest.raises(ValueError, match=r"frequent_ids: ids must lie in \[0, 50\)"):
        VocabularyShortlist([50], np.zeros([VOCAB, 1]))
    with pytest.raises(ValueError, match="candidates: expected a"):
        VocabularyShortlist([1], np.zeros([VOCAB]))
