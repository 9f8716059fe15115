"""Analytic matmul FLOPs: a hand-worked example and TensorFlow's own count of a traced model."""
from __future__ import annotations

import math

import pytest
import tensorflow as tf

from keras_transformer.config import TransformerConfig
from keras_transformer.training.flops import forward_flops, training_flops
from keras_transformer.model import Transformer

# d_k, d_v, d_ff and the lengths all differ, so a swapped term changes the count.
TINY = TransformerConfig(vocab_size=50, num_layers=2, d_model=16, d_ff=24, num_heads=2,
                         key_dim=5, value_dim=3, dropout=0.0, max_length=16)
S, T = 7, 5


def test_forward_flops_by_hand():
    d, h, dk, dv, dff, vocab = 16, 2, 5, 3, 24, 50
    encoder_layer = (2 * S * d * h * dk        # Q   2240
                     + 2 * S * d * h * dk      # K   2240
                     + 2 * S * d * h * dv      # V   1344
                     + 2 * S * h * dv * d      # O   1344
                     + 2 * h * dk * S * S      # QK^T  980
                     + 2 * h * dv * S * S      # AV    588
                     + 2 * 2 * S * d * dff)    # FFN 10752
    decoder_self = (2 * T * d * h * (2 * dk + dv) + 2 * T * h * dv * d
                    + 2 * h * dk * T * T + 2 * h * dv * T * T)
    decoder_cross = (2 * T * d * h * dk        # Q on target tokens   1600
                     + 2 * S * d * h * dk      # K on source tokens   2240
                     + 2 * S * d * h * dv      # V on source tokens   1344
                     + 2 * T * h * dv * d      # O on target tokens    960
                     + 2 * h * dk * T * S      # scores                700
                     + 2 * h * dv * T * S)     # context               420
    decoder_layer = decoder_self + decoder_cross + 2 * 2 * T * d * dff
    expected = 2 * (encoder_layer + decoder_layer) + 2 * T * d * vocab
    assert (encoder_layer, decoder_self, decoder_cross, decoder_layer) == (19488, 5920, 7264,
                                                                           20864)
    assert expected == 88704
    assert forward_flops(TINY, [S], [T]) == expected
    assert training_flops(TINY, [S], [T]) == 3 * expected


def test_flops_add_over_pairs_and_check_lengths():
    assert forward_flops(TINY, [S, 3], [T, 9]) == (forward_flops(TINY, [S], [T])
                                                   + forward_flops(TINY, [3], [9]))
    assert forward_flops(TINY, [], []) == 0
    with pytest.raises(ValueError, match="target_lengths"):
        forward_flops(TINY, [S, S], [T])


def _product_flops(op: tf.Operation) -> int:
    """2 x multiply-adds of a matrix product, from its static shapes."""
    if op.type == "Einsum":
        equation = op.get_attr("equation").decode()
        inputs, _ = equation.split("->")
        assert "..." not in equation and len(inputs.split(",")) == 2, equation
        sizes = {}
        for letters, tensor in zip(inputs.split(","), op.inputs):
            sizes.update(zip(letters, tensor.shape.as_list()))
        return 2 * math.prod(sizes.values())
    a = op.inputs[0].shape.as_list()
    transposed = op.get_attr("transpose_a" if op.type == "MatMul" else "adj_x")
    contracted = a[-2] if transposed else a[-1]
    return 2 * op.outputs[0].shape.num_elements() * contracted


def _graph_matmul_flops(graph) -> int:
    """Sums `_product_flops` over a graph's products, nested function bodies included."""
    total = 0
    for op in graph.get_operations():
        if op.type in ("MatMul", "BatchMatMul", "BatchMatMulV2", "BatchMatMulV3", "Einsum"):
            total += _product_flops(op)
        for attr in ("f", "body", "then_branch", "else_branch"):
            try:
                name = op.get_attr(attr).name
            except (ValueError, AttributeError):
                continue
            nested = graph._get_function(name)  # noqa: SLF001 (no public accessor)
            # A function called from several ops would be counted once per call: as wanted.
            total += _graph_matmul_flops(nested.graph)
    return total


@pytest.mark.parametrize("overrides", [{}, {"tie_output": False},
                                       {"num_encoder_layers": 3, "num_decoder_layers": 1}])
def test_forward_flops_match_traced_graph(overrides):
    """Batch 1 with no padding: the traced graph's products are exactly the analytic ones."""
    config = TINY.replace(**overrides)
    model = Transformer(config)
    forward = tf.function(lambda source, target: model((source, target), training=False))
    graph = forward.get_concrete_function(tf.TensorSpec([1, S], tf.int32),
                                          tf.TensorSpec([1, T], tf.int32)).graph
    assert _graph_matmul_flops(graph) == forward_flops(config, [S], [T])
