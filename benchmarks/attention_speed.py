"""The attention products of a training step: ours against `keras.ops.dot_product_attention`.

    python benchmarks/attention_speed.py [--config base] [--batch-tokens 4096]
        [--lengths 32,64,128] [--dtypes float32,bfloat16] [--rounds 9]

For each padded length T of a bucketed batch (batch = batch_tokens / T sentences, the last 10%
of each row's positions padding), times forward + backward (gradients with respect to Q, K and
V) of the three kinds of attention of a Transformer layer: encoder self-attention (padding mask),
decoder self-attention (causal + padding) and cross-attention. Every implementation takes Q, K
and V as the projections give them, `[batch, len, heads, dim]`, and returns the context in the
same layout:

- ours: `keras_transformer.layers.attention.scaled_dot_product_attention` (heads first, batched
  matmuls, additive mask penalty, float32 softmax) between transposes to and from heads first (in
  the model's training step, the moves between packed tokens and the padded layout do those);
- keras: `keras.ops.dot_product_attention` (the TensorFlow backend has no fused kernel: einsums
  over `[batch, len, heads, dim]`, `tf.where` mask);
- either under XLA (`jit_compile=True`).

Outputs and gradients are checked against ours before timing. Reports medians over rounds, the
products' FLOP rate, and each implementation's time for all attention products of one training step
of the config (each kind times the layers that have it). Attention dropout is off: the paper's
models have none, and `keras.ops.dot_product_attention` has no dropout of the weights.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import keras_transformer  # noqa: E402  (sets the TensorFlow backend first)
import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from keras_transformer.layers.attention import scaled_dot_product_attention  # noqa: E402

KINDS = ("encoder self", "decoder self", "cross")


def ours(query, key, value, mask):
    query, key, value = (tf.transpose(x, [0, 2, 1, 3]) for x in (query, key, value))
    return tf.transpose(scaled_dot_product_attention(query, key, value, mask)[0], [0, 2, 1, 3])


def keras_ops(query, key, value, mask):
    return keras.ops.dot_product_attention(query, key, value, mask=mask[:, None])


def masks(batch: int, length: int) -> dict[str, tf.Tensor]:
    """Boolean `[batch, query_len, key_len]` masks of each kind; the last 10% of every row's
    positions are padding (at least one)."""
    real = tf.sequence_mask(tf.fill([batch], length - max(1, length // 10)), length)
    padding = tf.broadcast_to(real[:, None, :], [batch, length, length])
    causal = tf.linalg.band_part(tf.ones([length, length], tf.bool), -1, 0)
    return {"encoder self": padding, "decoder self": padding & causal[None],
            "cross": padding}


def training_step(attention, jit_compile: bool):
    """A `tf.function` returning the output and d(sum(output * upstream))/d(Q, K, V)."""
    @tf.function(jit_compile=jit_compile)
    def step(query, key, value, mask, upstream):
        with tf.GradientTape() as tape:
            tape.watch([query, key, value])
            output = attention(query, key, value, mask)
            loss = tf.reduce_sum(tf.cast(output, tf.float32) * upstream)
        return (output, *tape.gradient(loss, [query, key, value]))

    return step


def median_seconds(step, arguments, rounds: int) -> float:
    step(*arguments)  # trace and warm up
    times = []
    for _ in range(rounds):
        start = time.perf_counter()
        results = step(*arguments)
        _ = results[0].numpy()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--config", default="base")
    parser.add_argument("--batch-tokens", type=int, default=4096)
    parser.add_argument("--lengths", default="32,64,128")
    parser.add_argument("--dtypes", default="float32,bfloat16")
    parser.add_argument("--rounds", type=int, default=9)
    args = parser.parse_args(argv)

    config = keras_transformer.TransformerConfig.preset(args.config, vocab_size=32000)
    heads, key_dim, value_dim = config.num_heads, config.key_dim, config.value_dim
    implementations = {"ours": (ours, False), "keras": (keras_ops, False),
                       "ours XLA": (ours, True), "keras XLA": (keras_ops, True)}
    steps = {name: training_step(function, jit) for name, (function, jit)
             in implementations.items()}
    print(f"# {args.config}: h={heads}, d_k={key_dim}, d_v={value_dim}, "
          f"{args.batch_tokens}-token batches, TensorFlow {tf.__version__}, "
          f"Keras {keras.__version__}")
    print("| dtype | T | batch | kind | " + " | ".join(f"{name} ms" for name in steps)
          + " | ours GFLOP/s |")
    print("| --- | ---: | ---: | --- |" + " ---: |" * (len(steps) + 1))
    rng = np.random.default_rng(0)
    for dtype in args.dtypes.split(","):
        per_step = {name: [] for name in steps}
        for length in map(int, args.lengths.split(",")):
            batch = args.batch_tokens // length
            for kind, mask in masks(batch, length).items():
                def tensor(dim):
                    return tf.constant(rng.standard_normal([batch, length, heads, dim]), dtype)
                arguments = (tensor(key_dim), tensor(key_dim), tensor(value_dim), mask,
                             tf.constant(rng.standard_normal([batch, length, heads, value_dim]),
                                         tf.float32))
                reference = steps["ours"](*arguments)
                tolerance = 1e-4 if dtype == "float32" else 0.1
                for name, step in steps.items():
                    for expected, actual in zip(reference, step(*arguments)):
                        error = float(tf.reduce_max(tf.abs(
                            tf.cast(expected, tf.float32) - tf.cast(actual, tf.float32))))
                        scale = float(tf.reduce_max(tf.abs(tf.cast(expected, tf.float32))))
                        if error > tolerance * max(1.0, scale):
                            raise SystemExit(f"{name} differs from ours ({kind}, T={length}, "
                                             f"{dtype}): max abs error {error:.3g}")
                seconds = {name: median_seconds(step, arguments, args.rounds)
                           for name, step in steps.items()}
                depth = config.encoder_depth if kind == "encoder self" else config.decoder_depth
                for name in steps:
                    per_step[name].append(depth * seconds[name])
                flops = 3 * 2 * batch * heads * length * length * (key_dim + value_dim)
                print(f"| {dtype} | {length} | {batch} | {kind} | "
                      + " | ".join(f"{1e3 * s:.2f}" for s in seconds.values())
                      + f" | {flops / seconds['ours'] / 1e9:.1f} |", flush=True)
        # One training step of the config: every encoder layer has one encoder self-attention,
        # every decoder layer the two others, at one length; the mean over the lengths stands
        # for a mix of buckets.
        lengths = len(args.lengths.split(","))
        totals = {name: sum(times) / lengths
                  for name, times in per_step.items()}
        print(f"\n{dtype}: all attention products of one {args.config} step (mean over "
              "lengths): " + ", ".join(f"{name} {1e3 * total:.0f} ms"
                                       for name, total in totals.items())
              + f"; keras/ours {totals['keras'] / totals['ours']:.2f}x\n", flush=True)


if __name__ == "__main__":
    main()
