"""Attention heatmaps: one map per kind and layer, token labels on both axes, PNG output."""
import numpy as np
import pytest
import tensorflow as tf

import keras_transformer as kt
from keras_transformer.visualization import KINDS, attention_figure, attention_maps, figure_png


@pytest.fixture
def model(demo_tokenizer):
    config = kt.TransformerConfig.preset("tiny", vocab_size=demo_tokenizer.vocab_size,
                                         d_model=32, d_ff=64, num_layers=2, num_heads=2)
    return kt.Transformer(config)


def test_maps_cover_every_layer_with_tokens_on_both_axes(model, demo_tokenizer):
    maps = attention_maps(model, demo_tokenizer, "I have two dogs", "ich habe zwei Hunde")
    assert [(m.kind, m.layer) for m in maps] == [(kind, layer) for kind in KINDS
                                                 for layer in range(2)]
    source = demo_tokenizer.id_to_piece(
        demo_tokenizer.tokenize(np.array(["I have two dogs"]))[0].numpy().tolist())
    target = demo_tokenizer.id_to_piece(
        demo_tokenizer.tokenize(np.array(["ich habe zwei Hunde"]))[0].numpy().tolist())
    by_kind = {m.kind: m for m in maps if m.layer == 0}
    assert by_kind["encoder_self"].key_tokens == source + ["</s>"]
    assert by_kind["decoder_self"].query_tokens == ["<s>"] + target
    cross = by_kind["encoder_decoder"]
    assert cross.query_tokens == ["<s>"] + target and cross.key_tokens == source + ["</s>"]
    assert cross.probabilities.shape == (2, len(target) + 1, len(source) + 1)
    np.testing.assert_allclose(cross.probabilities.sum(-1), 1.0, rtol=1e-5)
    decoder_self = by_kind["decoder_self"].probabilities
    assert np.all(np.triu(decoder_self[0], k=1) == 0)  # causal: no look-ahead


def test_figure_renders_png_with_a_panel_per_head(model, demo_tokenizer):
    attention = attention_maps(model, demo_tokenizer, "one cat", "eine Katze")[0]
    figure = attention_figure(attention)
    panels = [axis for axis in figure.axes if axis.get_images()]
    assert len(panels) == 2
    assert [label.get_text() for label in panels[0].get_xticklabels()] == attention.key_tokens
    assert figure_png(figure).startswith(b"\x89PNG")


def test_tensorboard_figure_is_one_legible_panel(model, demo_tokenizer):
    """The heads' mean in one panel, about TensorBoard's display width for a 20-token
    sentence, with token labels at least 10 pixels tall and no taller than their cells."""
    from keras_transformer.visualization import CELL_INCHES, DPI, LABEL_POINTS

    source = "I have forty-two apples and she has seventeen green pears today"
    attention = attention_maps(model, demo_tokenizer, source, "ich habe Äpfel")[0]
    assert len(attention.key_tokens) >= 12
    figure = attention_figure(attention, average_heads=True)
    panels = [axis for axis in figure.axes if axis.get_images()]
    assert len(panels) == 1
    np.testing.assert_allclose(panels[0].get_images()[0].get_array(),
                               attention.probabilities.mean(axis=0), rtol=1e-6)
    label_pixels = LABEL_POINTS * DPI / 72
    assert 10 <= label_pixels <= CELL_INCHES * DPI
    width, height = tf.io.decode_png(figure_png(figure)).shape[1::-1]
    assert 200 <= width <= 700 and height <= 700


@pytest.mark.parametrize("average_heads", [True, False])
def test_every_panel_has_a_colour_scale_from_0_to_1(model, demo_tokenizer, average_heads):
    attention = attention_maps(model, demo_tokenizer, "one cat", "eine Katze")[0]
    figure = attention_figure(attention, average_heads=average_heads)
    panels = [axis for axis in figure.axes if axis.get_images()]
    scales = [image.colorbar for panel in panels for image in panel.get_images()]
    assert len(panels) == (1 if average_heads else 2) and None not in scales
    assert all(scale.mappable.get_clim() == (0.0, 1.0) for scale in scales)
    assert all(scale.ax in figure.axes for scale in scales)
