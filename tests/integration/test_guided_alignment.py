"""Guided alignment training: Pharaoh word links carried to the pieces of prepared pairs, the
alignment targets of a batch, the loss (Garg et al. 2019) in the fast and the reference
training steps, a head that learns the links it is given, and kt-train's `--alignments`."""
import json
from pathlib import Path

import keras
import numpy as np
import pytest

import keras_transformer as kt
from keras_transformer import fast
from keras_transformer.data.batch_plan import BatchPlan, alignment_targets
from keras_transformer.data.prepare import check_alignments, prepare, text_file_source
from keras_transformer.data.sentencepiece_pair import vocabulary_pieces
from keras_transformer.data.tokenizer import SubwordTokenizer
from keras_transformer.data.word_links import (piece_kinds, piece_links, piece_words,
                                               read_pharaoh)
from keras_transformer.decoding.alignment import AlignmentHeads, alignment_error, attention_links
from keras_transformer.losses import GuidedAlignment, LabelSmoothedCrossEntropy

from helpers import demo_corpus, final_json, run_args

# Ids 4, 6, 7 begin a word, 8 is the word mark alone, the others are inside a word.
KINDS = piece_kinds(["<pad>", "<unk>", "<s>", "</s>", "\u2581a", "b", "\u2581c", "\u2581d",
                     "\u2581"])
BOTH = (KINDS, KINDS)


def test_the_mark_alone_begins_a_word_only_before_pieces_inside_one():
    # "a  c" with the extra space kept as a piece; the mark alone before byte pieces (5).
    assert piece_words(KINDS[[4, 8, 6, 8, 5, 8]]).tolist() == [0, -1, 1, 2, 2, -1]


def test_linked_words_link_every_piece_of_both_and_nothing_else():
    # Source words: [4 5] [6] ; target words: [7] [4 5 5]; ids 0-3 and the prefix start none.
    links = piece_links({(0, 1), (1, 0)}, (2, 2), ([4, 5, 6], [3, 7, 4, 5, 5]), BOTH, "a:1")
    assert sorted(map(tuple, links.tolist())) == [(0, 2), (0, 3), (0, 4), (1, 2), (1, 3),
                                                  (1, 4), (2, 1)]
    assert piece_links(set(), (2, 2), ([4, 5, 6], [7, 4]), BOTH, "a:1").shape == (0, 2)
    # An extra space (8) between two words is no word.
    assert piece_links({(1, 1)}, (2, 2), ([4, 8, 6], [7, 4]), BOTH, "a:1").tolist() == [[2, 1]]
    # Pieces that do not make the texts' words: the pair trains without links.
    assert piece_links({(0, 0)}, (3, 2), ([4, 5, 6], [7, 4]), BOTH, "a:1") is None
    with pytest.raises(ValueError, match=r"align.txt:7: the link 0-2 names target word 2 of a "
                                         r"2-word target sentence"):
        piece_links({(0, 2)}, (2, 2), ([4, 6], [7, 4]), BOTH, "align.txt:7")


def reversed_corpus(directory: Path, sentences: list[str]) -> dict[str, Path]:
    """`sentences`, their translations the same words in reverse order, and alignments linking
    source word i to target word i: links translation does not need (a reversed copy attends
    the other way), so a head aligns to them only if trained to."""
    sources = sentences
    targets = [" ".join(reversed(sentence.split())) for sentence in sentences]
    links = [" ".join(f"{i}-{i}" for i in range(len(sentence.split())))
             for sentence in sentences]
    files = {}
    for name, lines in (("src", sources), ("tgt", targets), ("align", links)):
        files[name] = directory / f"train.{name}"
        files[name].write_text("\n".join(lines) + "\n", encoding="utf-8")
    return files


@pytest.fixture(scope="module")
def reversed_storage(tmp_path_factory: pytest.TempPathFactory, demo_train, demo_vocab):
    """1,200 demo sentences and their reversed copies prepared with their alignments, and the
    demo vocabulary."""
    directory = tmp_path_factory.mktemp("reversed")
    files = reversed_corpus(directory, demo_train[0][:1200])
    texts = [files[side].read_text(encoding="utf-8").splitlines() for side in ("src", "tgt")]
    storage = prepare(text_file_source(files["src"], files["tgt"], files["align"]),
                      directory / "prepared", SubwordTokenizer.load(demo_vocab), seed=1)
    return storage, demo_vocab, files, texts


def test_prepared_pairs_carry_their_pieces_links_into_alignment_targets(reversed_storage):
    storage, vocab, files, texts = reversed_storage
    tokenizer = SubwordTokenizer.load(vocab)
    kinds = tuple(map(piece_kinds, vocabulary_pieces(tokenizer)))
    links = read_pharaoh(files["align"])
    by_ids = {}
    for source, target, pair_links in zip(*texts, links):
        ids = tuple(tokenizer.encode_batch([text], side)[0]
                    for text, side in ((source, "source"), (target, "target")))
        by_ids[tuple(map(tuple, ids))] = piece_links(
            pair_links, (len(source.split()), len(target.split())), ids, kinds, "")
    assert storage.has_links and storage.manifest["pairs"]["without_links"]["pairs"] == 0
    shard = storage.load_shard(0)
    members = np.arange(min(40, len(shard.lengths)))
    for member in members.tolist():
        ids = tuple(tuple(side.tolist()) for side in shard.pair(member))
        np.testing.assert_array_equal(shard.links(member), by_ids[ids])
    length = int(shard.lengths[members].max()) + 1
    targets = alignment_targets(shard, members, length)
    for row, member in enumerate(members.tolist()):
        target_length = int(shard.lengths[member][1])
        # Every real target piece is linked here: its row sums to 1; EOS and padding to 0.
        np.testing.assert_allclose(targets[row].sum(axis=1),
                                   (np.arange(length) < target_length).astype(float))
        for source_piece, target_piece in shard.links(member).tolist():
            assert targets[row, target_piece, source_piece] > 0
    plan = BatchPlan(storage, 256, 32, seed=0)
    (source, target_in), target_out, batch_targets = next(iter(plan.dataset()))
    assert batch_targets.shape == (*target_out.shape, source.shape[1])


def test_alignments_of_another_length_are_refused_naming_the_file(reversed_storage, tmp_path):
    _, vocab, files, _ = reversed_storage
    short = tmp_path / "short.align"
    short.write_text("".join(files["align"].read_text().splitlines(True)[:-1]))
    source = text_file_source(files["src"], files["tgt"], short)
    with pytest.raises(ValueError, match=rf"{short}: 1,199 lines of word alignments for the "
                                         r"1,200 pairs of .*train.src"):
        check_alignments(source)
    with pytest.raises(ValueError, match=rf"{short}: ends at line 1,199, before the pairs"):
        prepare(source, tmp_path / "prepared", SubwordTokenizer.load(vocab))
    assert not (tmp_path / "prepared" / "manifest.json").exists()


def guided_model(alignment: GuidedAlignment | None, optimizer) -> fast.FastTransformer:
    config = kt.TransformerConfig.preset("tiny", vocab_size=500, dropout=0.0, num_heads=2,
                                         d_model=32, d_ff=64, max_length=32)
    model = fast.FastTransformer(config)
    model.compile(optimizer=optimizer, loss=LabelSmoothedCrossEntropy(0.1))
    model.guided_alignment = alignment
    return model


def test_the_step_adds_the_alignment_loss_the_same_in_both_kernel_sets(reversed_storage):
    """One SGD step of learning rate 1 moves each weight by its gradient: equal after the fast
    and the reference steps from the same weights; the logged alignment loss is the formula's
    of the core model's attention; and without guidance the step moves the weights
    otherwise."""
    storage, *_ = reversed_storage
    (source, target_in), target_out, targets = next(iter(BatchPlan(storage, 256, 32, 0)
                                                         .dataset()))
    guided = GuidedAlignment(layer=1, head=1, weight=0.5)
    stepped = {}
    for kernels, alignment in (("fast", guided), ("reference", guided), ("fast", None)):
        keras.utils.set_random_seed(3)
        model = guided_model(alignment, keras.optimizers.SGD(1.0))
        model((source, target_in))
        attention = model.attention_probabilities(source, target_in)["encoder_decoder"][1]
        with fast.implementation_scope(kernels):
            logs = model.train_step(((source, target_in), target_out)
                                    + ((targets,) if alignment else ()))
        stepped[kernels, alignment] = [weight.numpy() for weight in model.trainable_weights]
        if alignment is not None:
            probabilities = np.maximum(attention.numpy()[:, 1], 1e-9)
            linked = targets.numpy().sum()  # rows of linked pieces sum to 1
            expected = 0.5 * -(targets.numpy() * np.log(probabilities)).sum() / linked
            assert float(logs["alignment_loss"]) == pytest.approx(expected, rel=1e-5)
    for ours, reference in zip(stepped["fast", guided], stepped["reference", guided]):
        np.testing.assert_allclose(ours, reference, rtol=1e-4, atol=1e-6)
    assert any(not np.allclose(with_guide, without) for with_guide, without
               in zip(stepped["fast", guided], stepped["fast", None]))
    with pytest.raises(ValueError, match="prepare the data with word alignments"):
        guided_model(guided, "sgd").train_step(((source, target_in), target_out))


def test_a_guided_head_learns_the_links_it_is_given(reversed_storage):
    """Trained toward links translation does not need (source word i to target word i of a
    reversed copy), the guided head aligns to them; the model's other heads do not."""
    storage, vocab, files, texts = reversed_storage
    guided = AlignmentHeads(1, (0,))
    keras.utils.set_random_seed(5)
    model = guided_model(GuidedAlignment(layer=1, head=0, weight=1.0),
                         keras.optimizers.Adam(3e-3))
    # One padded length (a bucket as wide as max_length): the step is traced once or twice.
    model.fit(BatchPlan(storage, 512, 32, seed=0, bucket_width=32).dataset(),
              steps_per_epoch=150, epochs=1, verbose=0)
    choices = [AlignmentHeads(layer, (head,)) for layer in range(2) for head in range(2)]
    found = attention_links(model, SubwordTokenizer.load(vocab), texts[0][:200],
                            texts[1][:200], choices)
    reference = read_pharaoh(files["align"])[:200]
    errors = {choice: alignment_error(found[choice], reference)["aer"] for choice in choices}
    assert errors[guided] < 0.4, errors
    assert min(error for choice, error in errors.items() if choice != guided) > 0.6, errors


def test_kt_train_trains_a_head_on_alignments_and_records_it(tmp_path, capsys):
    from trainers import train

    data = demo_corpus(tmp_path / "data", train_lines=300)
    sources, targets = (Path(path).read_text(encoding="utf-8").splitlines()
                        for path in data["train"])
    align = tmp_path / "train.align"
    align.write_text("\n".join(" ".join(f"{i}-{i}" for i in range(min(len(s.split()),
                                                                       len(t.split()))))
                               for s, t in zip(sources, targets)) + "\n")
    run_dir = tmp_path / "run"
    argv = run_args(data, run_dir, "--alignments", str(align), "--set", "num_layers=2")
    assert train.main(argv + ["--steps", "2"]) == 0
    summary = final_json(capsys.readouterr().out)
    assert summary["steps"] == 2
    # Two decoder layers: the last one's first head (AlignmentHeads.default's layer).
    recorded = json.loads((run_dir / "alignment.json").read_text(encoding="utf-8"))
    assert (recorded["layer"], recorded["heads"]) == (1, [0])
    bad = tmp_path / "bad.align"
    bad.write_text("0-0\n")
    assert train.main(run_args(data, tmp_path / "other", "--alignments", str(bad))) == 2
    assert f"{bad}: 1 line of word alignments for the 300 pairs" in capsys.readouterr().err
