"""tf.data batching: token budgets, bucketing, filtering, determinism, eval order."""
import random

import numpy as np
import pytest
import tensorflow as tf

from keras_transformer.data import (
    SubwordTokenizer,
    bucket_boundaries,
    make_eval_dataset,
    make_source_dataset,
    make_training_dataset,
    padding_fraction,
)
from keras_transformer.config import BOS_ID, EOS_ID, PAD_ID

Corpus = tuple[list[str], list[str]]


def _lengths(tokenizer: SubwordTokenizer, texts: list[str]) -> np.ndarray:
    return tokenizer.tokenize(tf.constant(texts)).row_lengths().numpy() + 1


def _check_batches(dataset: tf.data.Dataset, budget: int, max_length: int) -> int:
    """Assert the budget and layout of every batch; return the number of sentences."""
    sentences = 0
    for (source, target_in), target_out in dataset:
        assert source.dtype == target_in.dtype == target_out.dtype == tf.int32
        assert target_in.shape == target_out.shape
        for ids in (source, target_in):
            assert ids.shape[0] * ids.shape[1] <= budget and ids.shape[1] <= max_length
        target_in, target_out = target_in.numpy(), target_out.numpy()
        assert (target_in[:, 0] == BOS_ID).all()
        for row_in, row_out in zip(target_in, target_out):
            tokens = row_out[row_out != PAD_ID]
            assert tokens[-1] == EOS_ID
            assert (row_in[row_in != PAD_ID][1:] == tokens[:-1]).all()
        sentences += source.shape[0]
    return sentences


def test_bucket_boundaries() -> None:
    assert bucket_boundaries(30) == [8, 16, 24, 30]
    long = bucket_boundaries(256)
    assert long[:10] == [8, 16, 24, 32, 40, 48, 56, 64, 72, 80] and long[-1] == 256
    assert all(b % 8 == 0 for b in long) and len(long) <= 20
    with pytest.raises(ValueError, match="growth"):
        bucket_boundaries(64, growth=1.0)


def test_demo_batches_within_budget_and_nothing_lost(
    demo_train: Corpus, demo_tokenizer: SubwordTokenizer
) -> None:
    sources, targets = demo_train
    assert max(_lengths(demo_tokenizer, sources + targets)) <= 32
    dataset = make_training_dataset(sources, targets, demo_tokenizer, 1000, 32, seed=0)
    assert _check_batches(dataset, 1000, 32) == len(sources)


def test_max_length_filters_exactly_the_long_pairs(
    demo_train: Corpus, demo_tokenizer: SubwordTokenizer
) -> None:
    sources, targets = demo_train[0][:2000], demo_train[1][:2000]
    keep = np.maximum(_lengths(demo_tokenizer, sources), _lengths(demo_tokenizer, targets)) <= 10
    dataset = make_training_dataset(sources, targets, demo_tokenizer, 200, 10, seed=0)
    assert 0 < keep.sum() < len(sources)
    assert _check_batches(dataset, 200, 10) == keep.sum()


def test_seeded_order_and_repeating_shapes(
    demo_train: Corpus, demo_tokenizer: SubwordTokenizer
) -> None:
    sources, targets = demo_train[0][:3000], demo_train[1][:3000]

    def first_sources(seed: int) -> list[list[int]]:
        dataset = make_training_dataset(sources, targets, demo_tokenizer, 400, 24, seed=seed)
        return [batch[0][0].numpy().tolist() for batch in dataset.take(3)]

    assert first_sources(1) == first_sources(1) != first_sources(2)
    dataset = make_training_dataset(sources, targets, demo_tokenizer, 400, 24, seed=0)
    widths = {int(batch[0][0].shape[1]) for batch in dataset}
    assert widths <= set(bucket_boundaries(24))


def test_budget_too_small_for_max_length(demo_tokenizer: SubwordTokenizer) -> None:
    with pytest.raises(ValueError, match="batch_tokens=50"):
        make_training_dataset(["a"], ["b"], demo_tokenizer, 50, 64, seed=0)


def test_mismatched_lists_rejected(demo_tokenizer: SubwordTokenizer) -> None:
    with pytest.raises(ValueError, match="sources has 2 sentences but targets has 1"):
        make_eval_dataset(["a", "b"], ["c"], demo_tokenizer, batch_size=2)


def test_eval_keeps_order_and_truncates(demo_tokenizer: SubwordTokenizer) -> None:
    sources = ["I have forty-two apples", "zero", "we see one dog"]
    targets = ["ich habe zweiundvierzig Äpfel", "null", "wir sehen einen Hund"]
    batches = list(make_eval_dataset(sources, targets, demo_tokenizer, batch_size=2))
    assert [int(target_out.shape[0]) for _, target_out in batches] == [2, 1]
    decoded = [demo_tokenizer.detokenize(inputs[0]) for inputs, _ in batches]
    assert [text.decode() for text in tf.concat(decoded, 0).numpy()] == sources
    _check_batches(tf.data.Dataset.from_tensors(batches[0]), budget=10**6, max_length=100)

    (source, _), target_out = next(iter(
        make_eval_dataset(sources, targets, demo_tokenizer, batch_size=3, max_length=4)))
    assert source.shape[1] == target_out.shape[1] == 4
    assert (source.numpy()[[0, 2], -1] == EOS_ID).all()
    only_sources = next(iter(make_source_dataset(sources, demo_tokenizer, 3, max_length=4)))
    assert only_sources.numpy().tolist() == source.numpy().tolist()


@pytest.mark.slow
def test_multi30k_bucketing_cuts_padding(
    multi30k_train: Corpus, multi30k_tokenizer: SubwordTokenizer
) -> None:
    sources, targets = multi30k_train
    budget = 4096
    # Cached: the three passes below tokenize and bucket once.
    bucketed = make_training_dataset(sources, targets, multi30k_tokenizer, budget, 100,
                                     seed=0).cache()
    sentences = _check_batches(bucketed, budget, 100)
    batches = sum(1 for _ in bucketed)
    order = list(range(len(sources)))
    random.Random(0).shuffle(order)
    naive = make_eval_dataset([sources[i] for i in order], [targets[i] for i in order],
                              multi30k_tokenizer, batch_size=sentences // batches)
    bucketed_padding, naive_padding = padding_fraction(bucketed), padding_fraction(naive)
    print(f"\nMulti30k train padding fraction, {budget}-token buckets: {bucketed_padding:.3f}; "
          f"naive batches of {sentences // batches} shuffled sentences: {naive_padding:.3f}")
    assert bucketed_padding < 0.6 * naive_padding
