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
from keras_transformer.vocab_ids import BOS_ID, EOS_ID  # noqa: E402

KINDS = ("encoder_self", "decoder_self", "encoder_decoder")


@dataclass(frozen=True)
class AttentionMap:
    """One layer's attention `[heads, queries, keys]` with the tokens of both axes."""

    kind: str
    layer: int
    weights: np.ndarray
    query_tokens: list[str]
    key_tokens: list[str]

    @property
    def name(self) -> str:
        return f"{self.kind}_layer{self.layer}"


def attention_maps(model: Transformer, tokenizer: SubwordTokenizer, source: str,
                   target: str) -> list[AttentionMap]:
    """Every layer's attention of each kind for one teacher-forced sentence pair."""
    source_ids = tokenizer.tokenize(tf.constant([source]))[0].numpy().tolist() + [EOS_ID]
    target_ids = [BOS_ID] + tokenizer.tokenize(tf.constant([target]))[0].numpy().tolist()
    limit = model.config.max_length
    source_ids, target_ids = source_ids[:limit], target_ids[:limit]
    weights = model.attention_weights(np.array([source_ids], "int32"),
                                      np.array([target_ids], "int32"))
    source_tokens = tokenizer.id_to_piece(source_ids)
    target_tokens = tokenizer.id_to_piece(target_ids)
    axes = {"encoder_self": (source_tokens, source_tokens),
            "decoder_self": (target_tokens, target_tokens),
            "encoder_decoder": (target_tokens, source_tokens)}
    return [AttentionMap(kind, layer, np.asarray(layer_weights)[0], *axes[kind])
            for kind in KINDS for layer, layer_weights in enumerate(weights[kind])]


def attention_figure(attention: AttentionMap) -> plt.Figure:
    """One heatmap per head, side by side; queries on the y axis, keys on the x axis."""
    heads = attention.weights.shape[0]
    columns = min(heads, 4)
    rows = -(-heads // columns)
    size = 0.22 * max(len(attention.key_tokens), len(attention.query_tokens)) + 1.5
    figure, axes = plt.subplots(rows, columns, figsize=(columns * size, rows * size),
                                squeeze=False)
    for head, axis in enumerate(axes.flat):
        if head >= heads:
            axis.axis("off")
            continue
        axis.imshow(attention.weights[head], cmap="viridis", vmin=0.0, vmax=1.0)
        axis.set_title(f"head {head}", fontsize=8)
        axis.set_xticks(range(len(attention.key_tokens)))
        axis.set_xticklabels(attention.key_tokens, rotation=90, fontsize=6)
        axis.set_yticks(range(len(attention.query_tokens)))
        axis.set_yticklabels(attention.query_tokens, fontsize=6)
    figure.suptitle(f"{attention.kind} attention, layer {attention.layer}", fontsize=9)
    figure.tight_layout()
    return figure


def figure_png(figure: plt.Figure) -> bytes:
    """The figure as PNG bytes; the figure is closed."""
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=80)
    plt.close(figure)
    return buffer.getvalue()
