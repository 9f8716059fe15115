"""Which int8 matrix product, among the ops stock TensorFlow has, could speed up a decoding
step: each candidate against float32 and bfloat16 `tf.matmul` at the products of one `base`
decoding step (rows = batch x beam), timed in a `tf.function`, best of `--repeats`, with its
error against float32.

    PYTHONPATH=. python benchmarks/int8_matmul.py [--rows 128] [--vocab-size 8000]

Candidates (weights quantized once, per output column, symmetric; activations per row at each
call, as a decoding step would have to):
- `int8 matmul`: `tf.linalg.matmul(int8, int8, output_type=int32)` (BatchMatMulV3), scales
  applied after;
- `QuantizedMatMul`: the quint8 x quint8 -> qint32 op of TF's quantization kernels;
- `QuantizedMatMulWithBiasAndDequantize`: oneDNN's fused int8 product with float output.
A candidate that fails to run here is reported with its error.
"""
from __future__ import annotations

import argparse
import time
from typing import Callable

import numpy as np
import tensorflow as tf


def quantize_rows(x: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
    """Symmetric int8 per row: (int8 values, float scale per row)."""
    scale = tf.maximum(tf.reduce_max(tf.abs(x), axis=-1, keepdims=True), 1e-8) / 127.0
    return tf.cast(tf.round(x / scale), tf.int8), scale


def quantize_columns(w: np.ndarray) -> tuple[tf.Tensor, tf.Tensor]:
    """Symmetric int8 per output column of a `[in, out]` weight."""
    scale = np.maximum(np.abs(w).max(axis=0, keepdims=True), 1e-8) / 127.0
    return tf.constant(np.round(w / scale).astype(np.int8)), tf.constant(scale, tf.float32)


def candidates(w: np.ndarray) -> dict[str, Callable[[tf.Tensor], tf.Tensor]]:
    w32 = tf.constant(w)
    w16 = tf.constant(w, tf.bfloat16)
    w8, w_scale = quantize_columns(w)
    w_min, w_max = float(w.min()), float(w.max())
    wu8 = tf.quantization.quantize(w32, w_min, w_max, tf.quint8).output
    wq8 = tf.quantization.quantize(w32, -float(np.abs(w).max()), float(np.abs(w).max()),
                                   tf.qint8).output
    bias = tf.zeros([w.shape[1]], tf.float32)

    def int8_matmul(x):
        x8, x_scale = quantize_rows(x)
        product = tf.linalg.matmul(x8, w8, output_type=tf.int32)
        return tf.cast(product, tf.float32) * x_scale * w_scale

    def quantized_matmul(x):
        x_min, x_max = tf.reduce_min(x), tf.reduce_max(x)
        xq = tf.quantization.quantize(x, x_min, x_max, tf.quint8)
        out = tf.raw_ops.QuantizedMatMul(a=xq.output, b=wu8, min_a=xq.output_min,
                                         max_a=xq.output_max, min_b=w_min, max_b=w_max,
                                         Toutput=tf.qint32)
        return tf.quantization.dequantize(out.out, out.min_out, out.max_out)

    def fused_dequantize(x):
        x_min, x_max = tf.reduce_min(x), tf.reduce_max(x)
        xq = tf.quantization.quantize(x, x_min, x_max, tf.quint8)
        limit = float(np.abs(w).max())
        return tf.raw_ops.QuantizedMatMulWithBiasAndDequantize(
            a=xq.output, b=wq8, bias=bias, min_a=xq.output_min, max_a=xq.output_max,
            min_b=-limit, max_b=limit, min_freezed_output=-1.0, max_freezed_output=1.0,
            Toutput=tf.float32)

    return {"float32 matmul": lambda x: tf.matmul(x, w32),
            "bfloat16 matmul": lambda x: tf.cast(tf.matmul(tf.cast(x, tf.bfloat16), w16),
                                                 tf.float32),
            "int8 matmul": int8_matmul,
            "QuantizedMatMul": quantized_matmul,
            "QuantizedMatMulWithBiasAndDequantize": fused_dequantize}


def best_seconds(function: Callable, x: tf.Tensor, repeats: int, calls: int = 20) -> float:
    function(x)
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(calls):
            result = function(x)
        result.numpy()
        best = min(best, (time.perf_counter() - start) / calls)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=128, help="batch x beam")
    parser.add_argument("--d-model", type=int, default=512)
    parser.add_argument("--d-ff", type=int, default=2048)
    parser.add_argument("--vocab-size", type=int, default=8000)
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    shapes = {"attention projection": (args.d_model, args.d_model),
              "FFN in": (args.d_model, args.d_ff), "FFN out": (args.d_ff, args.d_model),
              "logits": (args.d_model, args.vocab_size)}
    print(f"rows {args.rows}; microseconds per product (error vs float32: max abs / max |y|)")
    print("| product | " + " | ".join(candidates(np.zeros((2, 2), np.float32))) + " |")
    for name, (inner, outer) in shapes.items():
        w = rng.normal(0, inner ** -0.5, (inner, outer)).astype(np.float32)
        x = tf.constant(rng.normal(0, 1, (args.rows, inner)).astype(np.float32))
        expected = (x.numpy() @ w)
        cells = []
        for function in candidates(w).values():
            compiled = tf.function(function)
            try:
                seconds = best_seconds(compiled, x, args.repeats)
                error = np.abs(compiled(x).numpy() - expected).max() / np.abs(expected).max()
                cells.append(f"{seconds * 1e6:,.0f} ({error:.1e})")
            except (tf.errors.OpError, TypeError, ValueError) as failure:
                cells.append("fails: " + str(failure).split("\n")[0][:60])
        print(f"| {name} [{args.rows}x{inner}]x[{inner}x{outer}] | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
