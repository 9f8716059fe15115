"""Alignment read from the encoder-decoder attention: the layer and heads chosen, checked,
recorded in a run and carried by its export."""
import json

import numpy as np
import pytest
import tensorflow as tf

import keras_transformer as kt
from helpers import random_run
from keras_transformer.config import EOS_ID, PAD_ID
from keras_transformer.decoding.alignment import (ALIGNMENT_FILE, AlignmentHeads,
                                                  alignment_error, attention_alignment,
                                                  attention_links, read_alignment_heads,
                                                  word_alignment)
from keras_transformer.serving.export import export_translator
from keras_transformer.training.loaded_run import load_run
from trainers import align


def test_alignment_is_the_argmax_of_the_chosen_heads_mean():
    rng = np.random.default_rng(3)
    model = kt.Transformer(kt.TransformerConfig.preset("tiny", vocab_size=60, num_layers=2))
    model.set_weights([weight + rng.normal(size=weight.shape).astype("float32")
                       for weight in model.get_weights()])
    source = rng.integers(4, 60, (3, 7)).astype("int32")
    source[1, 5:] = PAD_ID
    target = rng.integers(4, 60, (3, 6)).astype("int32")
    target[2, 4:] = PAD_ID
    target_in = np.concatenate([np.full((3, 1), kt.config.BOS_ID, "int32"), target[:, :-1]], 1)
    attention = model.attention_probabilities(source, target_in)["encoder_decoder"]
    for choice in (AlignmentHeads(0), AlignmentHeads(1, (2,)), AlignmentHeads(1, (0, 3))):
        heads = list(range(model.config.num_heads)) if choice.heads is None else choice.heads
        expected = np.asarray(attention[choice.layer])[:, heads].mean(axis=1).argmax(-1)
        expected = np.where(target != PAD_ID, expected, -1)
        got = attention_alignment(model, tf.constant(source), tf.constant(target), choice)
        np.testing.assert_array_equal(got.numpy(), expected)
    # The heads differ: a choice of one head is not every head's mean.
    assert not all(np.array_equal(
        attention_alignment(model, source, target, AlignmentHeads(1, (head,))).numpy(),
        attention_alignment(model, source, target, AlignmentHeads(1)).numpy())
        for head in range(model.config.num_heads))


@pytest.mark.parametrize("choice, message", [
    (AlignmentHeads(2), "alignment layer: 2 is not a layer of a 2-layer decoder"),
    (AlignmentHeads(0, (4,)), r"alignment heads: \[4\] are not distinct heads of 4"),
    (AlignmentHeads(0, (1, 1)), r"alignment heads: \[1, 1\]"),
    (AlignmentHeads(0, ()), r"alignment heads: \[\]")])
def test_a_choice_the_model_lacks_is_refused_by_name(choice, message):
    config = kt.TransformerConfig.preset("tiny", vocab_size=60, num_layers=2)
    with pytest.raises(ValueError, match=message):
        choice.check(config)


def test_a_runs_recorded_choice_is_what_its_export_aligns_with(demo_vocab, tmp_path):
    run = random_run(demo_vocab, tmp_path / "run", num_layers=2)
    loaded = load_run(run.root)
    assert read_alignment_heads(run.root, loaded.model.config) == AlignmentHeads(1)
    text = tf.constant(["they have sold nineteen cats", "we see six books"])
    default = loaded.translator().translate_with_alignment(text)["alignment"].numpy()
    # The single head whose alignment of the lines (teacher-forced as their own translation)
    # differs most from the default's; its alignment of the translations differs too.
    ids = loaded.tokenizer.tokenize(text).to_tensor()
    choices = [AlignmentHeads(layer, (head,)) for layer in range(2) for head in range(4)]
    choice = max(choices, key=lambda choice: int((attention_alignment(
        loaded.model, ids, ids, choice) != attention_alignment(
        loaded.model, ids, ids, AlignmentHeads(1))).numpy().sum()))
    expected = loaded.translator(alignment=choice).translate_with_alignment(text)[
        "alignment"].numpy()
    assert (expected != default).any()
    run.write_json(ALIGNMENT_FILE, choice.to_json())
    assert read_alignment_heads(run.root, loaded.model.config) == choice
    np.testing.assert_array_equal(
        load_run(run.root).translator().translate_with_alignment(text)["alignment"].numpy(),
        expected)
    export = export_translator(loaded.model, loaded.tokenizer, "aligned", tmp_path / "exports",
                               alignment=read_alignment_heads(run.root, loaded.model.config))
    signature = tf.saved_model.load(export).signatures["translate_with_alignment"]
    np.testing.assert_array_equal(signature(text=text)["alignment"].numpy(), expected)


def test_a_recorded_choice_the_model_lacks_names_the_file(demo_vocab, tmp_path):
    run = random_run(demo_vocab, tmp_path / "run")
    (run.root / ALIGNMENT_FILE).write_text(json.dumps({"layer": 3, "heads": None}))
    with pytest.raises(ValueError, match=rf"{ALIGNMENT_FILE}: not an alignment choice of this "
                                         "model .alignment layer: 3 is not a layer"):
        read_alignment_heads(run.root, load_run(run.root).model.config)


def test_attention_links_are_each_pairs_word_links_alone(demo_vocab, tmp_path):
    """The links of a batch of pairs are each pair's own (padding changes nothing), made of
    `attention_alignment`'s piece alignment as markup is placed (`word_alignment`)."""
    loaded = load_run(random_run(demo_vocab, tmp_path / "run", num_layers=2).root)
    sources = ["they have sold nineteen cats", "we see six books .", "a"]
    targets = ["sie haben neunzehn Katzen verkauft", "wir sehen sechs", "ein Buch ."]
    choices = [AlignmentHeads(1), AlignmentHeads(0, (1,))]
    links = attention_links(loaded.model, loaded.tokenizer, sources, targets, choices)
    for row, (source, target) in enumerate(zip(sources, targets)):
        alone = attention_links(loaded.model, loaded.tokenizer, [source], [target], choices)
        ids = [np.array([loaded.tokenizer.tokenize(tf.constant([text]))[0].numpy().tolist()
                         + [EOS_ID]], "int32") for text in (source, target)]
        pieces = [loaded.tokenizer.id_to_piece(row_ids[0]) for row_ids in ids]
        for choice in choices:
            assert links[choice][row] == alone[choice][0]
            words = word_alignment(pieces[1], pieces[0], attention_alignment(
                loaded.model, *ids, choice)[0].numpy(), len(target.split()),
                len(source.split()))
            assert links[choice][row] == {(word, index) for index, word in enumerate(words)
                                          if word >= 0}
    assert links[choices[0]] != links[choices[1]]


def test_words_start_at_the_word_mark_even_alone():
    """A bare word mark before byte pieces (a character the vocabulary lacks) starts a word;
    byte pieces a translation starts with make no word (the page cannot tell them from text:
    the words miscount, and markup falls back to positions)."""
    source = ["▁they", "▁see", "</s>"]
    assert word_alignment(["▁P", "▁", "<0xC3>", "<0xBC>", "</s>"], source, [1, 0, 0, 0, 2],
                          2, 2) == [1, 0]
    assert word_alignment(["<2de>", "▁P", "</s>"], source, [1, 0, 2], 1, 2) == [0]
    assert word_alignment(["<0x50>", "<0x50>", "▁see", "</s>"], source, [0, 0, 1, 2], 2,
                          2) is None


def test_alignment_error_is_och_and_neys_with_every_link_sure():
    found = [{(0, 0), (1, 1), (2, 1)}, {(0, 0)}]
    reference = [{(0, 0), (1, 1), (2, 2)}, {(0, 0), (1, 1)}]
    both, found_links, reference_links = 3, 4, 5
    assert alignment_error(found, reference) == pytest.approx({
        "precision": both / found_links, "recall": both / reference_links,
        "aer": 1 - 2 * both / (found_links + reference_links)})
    assert alignment_error(reference, reference)["aer"] == 0


def test_kt_align_ranks_every_layer_and_head_and_records_the_best(demo_vocab, tmp_path,
                                                                  capsys):
    run = random_run(demo_vocab, tmp_path / "run", num_layers=2)
    loaded = load_run(run.root)
    sources = ["they have sold nineteen cats", "we see six books", "they have seen nine"]
    targets = ["sie haben neunzehn Katzen verkauft", "wir sehen sechs Bücher",
               "sie haben neun gesehen"]
    # The reference: head 2 of layer 0's own links, which that choice then matches exactly.
    wanted = AlignmentHeads(0, (2,))
    reference = attention_links(loaded.model, loaded.tokenizer, sources, targets, [wanted])
    files = {}
    for name, lines in (("src", sources), ("tgt", targets), ("align", [
            " ".join(f"{i}-{j}" for i, j in sorted(links)) for links in reference[wanted]])):
        files[name] = tmp_path / name
        files[name].write_text("\n".join(lines) + "\n", encoding="utf-8")
    argv = [str(run.root), "--src", str(files["src"]), "--tgt", str(files["tgt"]),
            "--alignments", str(files["align"])]
    assert align.main(argv + ["--record"]) == 0
    table = capsys.readouterr().out.splitlines()
    assert table[0] == "layer\theads\tprecision\trecall\tAER"
    assert len(table) == 1 + 2 * (1 + 4)
    assert table[1].split("\t")[:2] == ["0", "2"] and table[1].endswith("\t0.000")
    assert read_alignment_heads(run.root, loaded.model.config) == wanted
    # Bad files are named with their line.
    files["align"].write_text("0-0\n0-9\n1-1\n", encoding="utf-8")
    assert align.main(argv) == 2
    assert (f"{files['align']}:2: link 0-9 is past the line's 4 source and 4 target words"
            in capsys.readouterr().err)
    files["align"].write_text("0-0\n0:1\n1-1\n", encoding="utf-8")
    assert align.main(argv) == 2
    assert f"{files['align']}:2: '0:1' is not a link i-j" in capsys.readouterr().err
    files["align"].write_text("0-0\n", encoding="utf-8")
    assert align.main(argv) == 2
    assert "have 3, 3 and 1 lines" in capsys.readouterr().err
