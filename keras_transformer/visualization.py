"""Attention heatmaps with the subword tokens on both axes (the paper's appendix figures)."""
from __future__ import annotations

import io
from dataclasses import dataclass

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from keras_transformer.data.tokenizer import SubwordTokenizer  # noqa: E402
from keras_transformer.model import Transformer  # noqa: E402
from keras_transformer.config import BOS_ID, EOS_ID  # noqa: E402

KINDS = ("encoder_self", "decoder_self", "encoder_decoder")
# Legible at the size TensorBoard shows an image (about 500 px wide): 16-pixel token cells and
# 10-pixel labels at DPI dots per inch.
DPI = 80
CELL_INCHES = 0.2
LABEL_POINTS = 9
COLORBAR_INCHES = 0.6  # a panel's colour scale and its labels


@dataclass(frozen=True)
class AttentionMap:
    """One layer's attention `[heads, queries, keys]` with the tokens of both axes."""

    kind: str
    layer: int
    probabilities: np.ndarray
    query_tokens: list[str]
    key_tokens: list[str]

    @property
    def name(self) -> str:
        return f"{self.kind}_layer{self.layer}"


def attention_maps(model: Transformer, tokenizer: SubwordTokenizer, source: str,
                   target: str) -> list[AttentionMap]:
    """Every layer's attention of each kind for one teacher-forced sentence pair."""
    source_ids = tokenizer.tokenize(tf.constant([source]))[0].numpy().tolist() + [EOS_ID]
    target_ids = [BOS_ID] + tokenizer.tokenize_target(tf.constant([target]))[0].numpy().tolist()
    limit = model.config.max_length
    source_ids, target_ids = source_ids[:limit], target_ids[:limit]
    probabilities = model.attention_probabilities(np.array([source_ids], "int32"),
                                                  np.array([target_ids], "int32"))
    source_tokens = [piece.decode("utf-8") for piece in tokenizer.source_pieces_of(
        tf.constant(source_ids, tf.int32)).numpy().tolist()]
    target_tokens = tokenizer.id_to_piece(target_ids)
    axes = {"encoder_self": (source_tokens, source_tokens),
            "decoder_self": (target_tokens, target_tokens),
            "encoder_decoder": (target_tokens, source_tokens)}
    return [AttentionMap(kind, layer, np.asarray(layer_probabilities)[0], *axes[kind])
            for kind in KINDS for layer, layer_probabilities in enumerate(probabilities[kind])]


def attention_figure(attention: AttentionMap, average_heads: bool = False) -> plt.Figure:
    """One heatmap per head, four to a row, or with `average_heads` one heatmap of the heads'
    mean (what TensorBoard shows: one panel stays legible at its display size); queries on
    the y axis, keys on the x axis, each panel with its colour scale (attention probabilities,
    0 to 1)."""
    probabilities = attention.probabilities
    panels = probabilities.mean(axis=0, keepdims=True) if average_heads else probabilities
    columns = min(len(panels), 4)
    rows = -(-len(panels) // columns)
    # Cells plus room for the longest labels (about 0.1 inch a character).
    labels = max(len(token) for token in attention.key_tokens + attention.query_tokens)
    width = CELL_INCHES * len(attention.key_tokens) + 0.1 * labels + 0.4 + COLORBAR_INCHES
    height = CELL_INCHES * len(attention.query_tokens) + 0.1 * labels + 0.6
    figure, axes = plt.subplots(rows, columns, figsize=(columns * width, rows * height),
                                squeeze=False)
    for head, axis in enumerate(axes.flat):
        if head >= len(panels):
            axis.axis("off")
            continue
        image = axis.imshow(panels[head], cmap="viridis", vmin=0.0, vmax=1.0)
        scale = figure.colorbar(image, ax=axis, fraction=0.05, pad=0.03)
        scale.ax.tick_params(labelsize=LABEL_POINTS)
        axis.set_title(f"mean of {len(attention.probabilities)} heads" if average_heads
                       else f"head {head}", fontsize=LABEL_POINTS)
        axis.set_xticks(range(len(attention.key_tokens)))
        axis.set_xticklabels(attention.key_tokens, rotation=90, fontsize=LABEL_POINTS)
        axis.set_yticks(range(len(attention.query_tokens)))
        axis.set_yticklabels(attention.query_tokens, fontsize=LABEL_POINTS)
    figure.suptitle(f"{attention.kind} attention, layer {attention.layer}",
                    fontsize=LABEL_POINTS + 1)
    figure.tight_layout()
    return figure


def figure_png(figure: plt.Figure) -> bytes:
    """The figure as PNG bytes; the figure is closed."""
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=DPI)
    plt.close(figure)
    return buffer.getvalue()
