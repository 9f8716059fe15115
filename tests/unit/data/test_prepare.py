"""Prepared token storage and its batch plan: the ids are the in-graph tokenizer's, an epoch is
every pair once, a resume anywhere gives the same batches, workers read disjoint shares,
and damaged or foreign storage is named."""
import gzip
import json
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_datasets as tfds

from keras_transformer.data import SubwordTokenizer, write_demo_corpus
from keras_transformer.data import batch_plan, token_storage
from keras_transformer.data.batch_plan import BatchPlan
from keras_transformer.data.prepare import (ParallelSource, check_segmentation,
                                            combined_source, prepare, prepared,
                                            sample_sentences, text_file_source, tfds_source)
from keras_transformer.data.token_storage import MANIFEST, TokenStorage
from keras_transformer.config import BOS_ID, EOS_ID, PAD_ID, UNK_ID


@pytest.fixture(scope="module")
def demo_files(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """The demo train split with two empty-sided pairs appended, gzipped source side."""
    src, tgt = map(Path, write_demo_corpus(tmp_path_factory.mktemp("demo"))["train"])
    directory = src.parent
    sources = src.read_text(encoding="utf-8").splitlines() + ["", "one more"]
    targets = tgt.read_text(encoding="utf-8").splitlines() + ["noch eins", ""]
    with gzip.open(directory / "train.src.gz", "wt", encoding="utf-8") as handle:
        handle.write("\n".join(sources) + "\n")
    (directory / "train.tgt").write_text("\n".join(targets) + "\n", encoding="utf-8")
    return directory / "train.src.gz", directory / "train.tgt"


@pytest.fixture(scope="module")
def storage(demo_files: tuple[Path, Path], demo_vocab: Path,
            tmp_path_factory: pytest.TempPathFactory) -> TokenStorage:
    """The demo pairs in 8 shards of about 1,900 pairs."""
    return prepare(text_file_source(*demo_files), tmp_path_factory.mktemp("prepared"),
                   SubwordTokenizer.load(demo_vocab), shard_pairs=2000, seed=3)


def _all_pairs(storage: TokenStorage) -> list[tuple[tuple[int, ...], tuple[int, ...]]]:
    pairs = []
    for index in range(len(storage.shards)):
        shard = storage.load_shard(index)
        pairs += [tuple(tuple(side.tolist()) for side in shard.pair(i))
                  for i in range(len(shard.lengths))]
    return pairs


def test_stored_ids_are_the_in_graph_tokenizers_and_empty_pairs_are_counted(
        storage, demo_files, demo_vocab):
    tokenizer = SubwordTokenizer.load(demo_vocab)
    pairs = [pair for pair in text_file_source(*demo_files).pairs() if all(pair)]
    expected = {(tuple(source), tuple(target)) for source, target in zip(
        *(tokenizer.tokenize(tf.constant(side)).to_list() for side in zip(*pairs)))}
    stored = _all_pairs(storage)
    assert len(stored) == len(pairs) and set(stored) == expected
    assert storage.manifest["pairs"]["read"] == len(pairs) + 2
    assert storage.manifest["pairs"]["dropped"]["an empty side"] == 2
    assert len(storage.shards) == 8 and min(info.pairs for info in storage.shards) > 1000
    assert (Path(storage.directory) / "spm.model").read_bytes() == tokenizer.model_proto


def test_several_corpora_go_into_one_storage_counted_each(storage, demo_files, demo_vocab,
                                                         tmp_path):
    """The demo pairs and a second corpus (a stand-in teacher's translations: the targets
    reversed, and one over-long pair): every pair of both stored once, each corpus counted in
    the manifest, and one corpus' storage (its manifest, its pairs) as before."""
    tokenizer = SubwordTokenizer.load(demo_vocab)
    sources, targets = (Path(tmp_path / name) for name in ("distilled.en", "distilled.de"))
    original = [pair for pair in text_file_source(*demo_files).pairs()]
    distilled = [(source, " ".join(reversed(target.split()))) for source, target in original]
    distilled.append(("long " * 70_000, "lang"))
    sources.write_text("".join(source + "\n" for source, _ in distilled), encoding="utf-8")
    targets.write_text("".join(target + "\n" for _, target in distilled), encoding="utf-8")
    both = prepare(combined_source([text_file_source(*demo_files),
                                    text_file_source(sources, targets)]),
                   tmp_path / "both", tokenizer, shard_pairs=2000, seed=3)
    first, second = (corpus["pairs"] for corpus in both.manifest["corpora"])
    assert first == storage.manifest["pairs"] and "corpora" not in storage.manifest
    assert (second["read"], second["dropped"]["an empty side"]) == (len(original) + 1, 2)
    assert second["dropped"][f"a side over {token_storage.MAX_SIDE} ids"] == 1
    assert both.manifest["pairs"]["stored"] == first["stored"] + second["stored"]
    assert both.manifest["source"]["corpora"][1]["files"][0]["path"] == str(sources)
    kept = [pair for pair in distilled[:-1] if all(pair)]
    expected = _all_pairs(storage) + [
        (tuple(source), tuple(target)) for source, target in zip(
            *(tokenizer.tokenize(tf.constant(side)).to_list() for side in zip(*kept)))]
    assert sorted(_all_pairs(both)) == sorted(expected)


def test_an_epoch_is_every_pair_once_within_budget_and_counted_from_the_manifest(storage):
    plan = BatchPlan(storage, batch_tokens=1000, max_length=32, seed=0)
    seen, batches = [], 0
    for element, ((source, target_in), target_out) in plan.elements(0):
        if element == plan.batches_per_epoch:
            break
        batches += 1
        assert source.shape == target_in.shape == target_out.shape
        assert source.shape[0] * source.shape[1] <= 1000
        assert (target_in[:, 0] == BOS_ID).all()
        for row_source, row_out in zip(source, target_out):
            source_ids = row_source[row_source != PAD_ID]
            target_ids = row_out[row_out != PAD_ID]
            assert source_ids[-1] == EOS_ID and target_ids[-1] == EOS_ID
            seen.append((tuple(source_ids[:-1].tolist()), tuple(target_ids[:-1].tolist())))
    assert batches == plan.batches_per_epoch
    assert sorted(seen) == sorted(_all_pairs(storage))


def test_pairs_over_max_length_are_left_out_and_epochs_reshuffle(storage):
    plan = BatchPlan(storage, batch_tokens=1000, max_length=12, seed=0)
    stream = plan.elements(0)
    first = [next(stream)[1] for _ in range(plan.batches_per_epoch)]
    second = [next(stream)[1] for _ in range(plan.batches_per_epoch)]
    assert sum(len(batch[1]) for batch in first) == plan.pairs_per_epoch < storage.pairs
    assert max(batch[1].shape[1] for batch in first) <= 12
    assert [batch[1].shape for batch in first] != [batch[1].shape for batch in second]
    with pytest.raises(ValueError, match="batch_tokens=8 cannot hold"):
        BatchPlan(storage, batch_tokens=8, max_length=12, seed=0)


@pytest.mark.parametrize("where", ["early", "mid-epoch", "before an epoch's end",
                                   "in the third epoch"])
def test_a_resume_anywhere_gives_bit_identical_batches(storage, where):
    plan = BatchPlan(storage, batch_tokens=2000, max_length=32, seed=5)
    epoch = plan.batches_per_epoch
    first = {"early": 1, "mid-epoch": epoch // 2, "before an epoch's end": epoch - 3,
             "in the third epoch": 2 * epoch + 5}[where]
    reference = plan.elements(0)
    expected = [next(reference) for _ in range(first + 12)][first:]
    resumed = plan.elements(first)
    for element, batch in expected:
        got_element, got = next(resumed)
        assert got_element == element
        for want, have in zip(tf.nest.flatten(batch), tf.nest.flatten(got)):
            np.testing.assert_array_equal(want, have)


def test_word_dropout_replaces_inputs_at_its_rate_keeps_labels_and_specials_and_resumes(storage):
    rate = 0.3
    plain = BatchPlan(storage, batch_tokens=2000, max_length=32, seed=5)
    dropping = BatchPlan(storage, batch_tokens=2000, max_length=32, seed=5, word_dropout=rate)
    pieces = replaced = 0
    stream, expected = zip(plain.elements(0), dropping.elements(0)), []
    for _ in range(60):
        (element, ((source, target_in), target_out)), (same, batch) = next(stream)
        (dropped_source, dropped_target_in), dropped_target_out = batch
        assert same == element
        np.testing.assert_array_equal(dropped_target_out, target_out)
        for before, after in ((source, dropped_source), (target_in, dropped_target_in)):
            changed = before != after
            assert (after[changed] == UNK_ID).all() and (before[changed] > EOS_ID).all()
            pieces += int((before > EOS_ID).sum())
            replaced += int(changed.sum())
        expected.append((element, batch))
    assert abs(replaced / pieces - rate) < 0.02, (replaced, pieces)
    resumed = dropping.elements(40)
    for element, batch in expected[40:]:
        got_element, got = next(resumed)
        assert got_element == element
        for want, have in zip(tf.nest.flatten(batch), tf.nest.flatten(got)):
            np.testing.assert_array_equal(want, have)


def test_two_workers_read_disjoint_pairs_and_together_every_batch_once(storage, monkeypatch):
    plan = BatchPlan(storage, batch_tokens=1000, max_length=32, seed=1)
    reads: list[set] = []
    original = batch_plan.padded_batch

    def counted(shard, members, length):
        reads[-1].update((shard.ids.filename, int(start)) for start in shard.starts[members])
        return original(shard, members, length)

    monkeypatch.setattr(batch_plan, "padded_batch", counted)
    end, elements = plan.batches_per_epoch, []
    for worker in range(2):
        reads.append(set())
        stream = plan.elements(0, lambda element, worker=worker: element % 2 == worker)
        elements.append([next(stream)[0] for _ in range(worker, end, 2)])
    assert sorted(elements[0] + elements[1]) == list(range(end))
    assert not set(elements[0]) & set(elements[1])
    assert not reads[0] & reads[1]
    assert len(reads[0] | reads[1]) == plan.pairs_per_epoch
    assert 0.3 < len(reads[0]) / plan.pairs_per_epoch < 0.7


def test_storage_of_another_vocabulary_is_refused_naming_both(storage, demo_train, tmp_path):
    other = SubwordTokenizer.train(demo_train[0] + demo_train[1], 400, tmp_path)
    with pytest.raises(ValueError) as error:
        storage.check_vocabulary(other.model_proto, "the run's vocab/spm.model")
    message = str(error.value)
    assert storage.vocabulary_sha256[:16] in message and "the run's vocab/spm.model" in message
    assert token_storage.vocabulary_sha256(other.model_proto)[:16] in message


def _copy(storage: TokenStorage, directory: Path) -> Path:
    directory.mkdir()
    for path in Path(storage.directory).iterdir():
        (directory / path.name).write_bytes(path.read_bytes())
    return directory


def test_torn_shards_and_manifests_are_named(storage, tmp_path):
    torn = _copy(storage, tmp_path / "torn_shard")
    ids = torn / "shard-00004.ids"
    ids.write_bytes(ids.read_bytes()[:-6])
    with pytest.raises(ValueError, match=r"shard-00004\.ids: .*torn"):
        TokenStorage.open(torn)
    manifest = _copy(storage, tmp_path / "torn_manifest") / MANIFEST
    manifest.write_text(manifest.read_text()[:200])
    with pytest.raises(ValueError, match=r"manifest\.json: not a readable manifest"):
        TokenStorage.open(manifest.parent)
    manifest.unlink()
    with pytest.raises(ValueError, match="did not finish"):
        TokenStorage.open(manifest.parent)


def test_a_failed_preparation_leaves_no_manifest_and_is_redone(demo_files, demo_vocab,
                                                               tmp_path):
    tokenizer = SubwordTokenizer.load(demo_vocab)
    good = text_file_source(*demo_files)

    def failing_pairs():
        for number, pair in enumerate(good.pairs()):
            if number == 9000:
                raise OSError(28, "No space left on device")
            yield pair

    failing = type(good)(good.description, good.count, failing_pairs)
    with pytest.raises(OSError):
        prepare(failing, tmp_path, tokenizer, shard_pairs=2000)
    assert not (tmp_path / MANIFEST).exists()
    storage, reused = prepared(good, tmp_path, tokenizer)
    assert not reused and storage.pairs == 15_000
    assert prepared(good, tmp_path, tokenizer)[1]


def test_mismatched_files_are_refused_and_leave_no_manifest(demo_files, demo_vocab,
                                                                 tmp_path):
    short = tmp_path / "short.de"
    short.write_text("ein Satz\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"differ in line count: .*train\.src\.gz has 15002 "
                                         r"lines, .*short\.de has 1"):
        prepare(text_file_source(demo_files[0], short), tmp_path / "out",
                SubwordTokenizer.load(demo_vocab))
    assert not (tmp_path / "out" / MANIFEST).exists()


def test_a_seeded_sample_learns_the_vocabulary_and_small_corpora_are_taken_whole(demo_files):
    source = text_file_source(*demo_files)
    pairs = [pair for pair in source.pairs() if all(pair)]
    whole = list(sample_sentences(source, 10 ** 6, seed=0))
    assert whole == [text for text, _ in pairs] + [target for _, target in pairs]
    sample = list(sample_sentences(source, 2000, seed=0))
    assert sample == list(sample_sentences(source, 2000, seed=0))
    assert sample != list(sample_sentences(source, 2000, seed=1))
    half = len(sample) // 2  # 1,000 pairs drawn, those with an empty side left out
    assert len(sample) % 2 == 0 and 950 < half <= 1000 and sample[:half] != whole[:half]
    assert set(zip(sample[:half], sample[half:])) <= set(pairs)


def test_a_tfds_split_is_streamed_into_storage(demo_vocab, tmp_path):
    with tfds.testing.mock_data(num_examples=12):
        source = tfds_source("wmt14_translate/de-en", "train", "en", "de")
        storage = prepare(source, tmp_path, SubwordTokenizer.load(demo_vocab), shard_pairs=5)
    assert storage.manifest["pairs"]["read"] == 12 and len(storage.shards) == 3
    assert json.loads((tmp_path / MANIFEST).read_text())["source"]["tfds"] == (
        "wmt14_translate/de-en")


def test_bad_utf8_is_named_by_file_and_line_and_leaves_no_manifest(demo_files, demo_vocab,
                                                                   tmp_path):
    lines = Path(demo_files[1]).read_bytes().split(b"\n")
    lines[9876] = b"kaputt \xff\xfe"
    broken = tmp_path / "broken.de"
    broken.write_bytes(b"\n".join(lines))
    with pytest.raises(ValueError, match=r"broken\.de:9877: not valid UTF-8"):
        prepare(text_file_source(demo_files[0], broken), tmp_path / "out",
                SubwordTokenizer.load(demo_vocab), shard_pairs=2000)
    assert not (tmp_path / "out" / MANIFEST).exists()


def test_bpe_dropout_stores_seeded_samples_that_spell_the_same_text(demo_vocab, tmp_path):
    tokenizer = SubwordTokenizer.load(demo_vocab)
    pairs = [("I have forty-two apples", "ich habe zweiundvierzig Äpfel"),
             ("You saw three hundred and five birds", "du sahst dreihundertfünf Vögel")]
    source = ParallelSource({"pairs": "two"}, lambda: len(pairs), lambda: iter(pairs))
    storages = [prepare(source, tmp_path / name, tokenizer, seed=seed, subword_dropout=0.1,
                        samples=8) for name, seed in (("a", 0), ("b", 0), ("c", 1))]
    stored = [_all_pairs(storage) for storage in storages]
    assert len(stored[0]) == 16 and storages[0].manifest["segmentation"] == {
        "subword_dropout": 0.1, "samples": 8}
    assert sorted(stored[0]) == sorted(stored[1]) and sorted(stored[0]) != sorted(stored[2])
    texts = tokenizer.detokenize(tf.ragged.constant([side for pair in stored[0]
                                                     for side in pair])).numpy()
    assert {text.decode() for text in texts} == {text for pair in pairs for text in pair}
    deterministic = tokenizer.tokenize(tf.constant([pairs[0][0]])).to_list()[0]
    samples = {pair[0] for pair in stored[0] if len(pair[0]) >= len(deterministic) - 1}
    assert len(samples - {tuple(deterministic)}) >= 2
    with pytest.raises(ValueError, match="segmented with .*'subword_dropout': 0.1.*recipe says"):
        check_segmentation(storages[0], 0.0, 16)
