"""Alignment read from the encoder-decoder attention: the layer and heads chosen, checked,
recorded in a run and carried by its export."""
import json

import numpy as np
import pytest
import tensorflow as tf

import keras_transformer as kt
from helpers import random_run
from keras_transformer.config import PAD_ID
from keras_transformer.decoding.alignment import (ALIGNMENT_FILE, AlignmentHeads,
                                                  attention_alignment, read_alignment_heads)
from keras_transformer.serving.export import export_translator
from keras_transformer.training.loaded_run import load_run


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
    attention = model.attention_weights(source, target_in)["encoder_decoder"]
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
    # The choice that differs most from the default on these lines.
    choices = [AlignmentHeads(layer, (head,)) for layer in range(2) for head in range(4)]
    outputs = [loaded.translator(alignment=choice).translate_with_alignment(text)["alignment"]
               .numpy() for choice in choices]
    differs = [int((output != default).sum()) for output in outputs]
    choice, expected = choices[int(np.argmax(differs))], outputs[int(np.argmax(differs))]
    assert max(differs) > 0
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
