"""The MFU a training step could reach if it did nothing but its weight matmuls.

    python benchmarks/matmul_ceiling.py [--config base] [--source-tokens 3358]
        [--target-tokens 3603] [--fused-projections]

Runs every weight matmul of one training step of the config (forward `X W`, input gradient
`dY W^T` and weight gradient `X^T dY` of each attention projection, feed-forward layer and the
output projection, the gradients in the operand layouts of `heads_dense.linear`) on random data,
at the row counts of real (non-padding) tokens, in one `tf.function`, and reports their FLOP
rate against the best of square matmul chains (the peak that `training_speed.py` divides by). The
attention score/context products (<3% of `base` FLOPs at these lengths), and everything that is
not a matmul, are left out, so the result bounds from above what any implementation's MFU can be
at these shapes on this machine. The default token counts are the mean real tokens per batch of
`training_speed.py`'s 4,096-token batches.
"""
from __future__ import annotations

import argparse
import os
import sys
import time

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from training_speed import peak_worker  # noqa: E402  (the same peak as training_speed)


def weight_matmul_shapes(config, source_tokens: int, target_tokens: int,
                         fused: bool = False) -> list[tuple]:
    """(rows, inputs, outputs) of every forward weight matmul of a step; `fused`: Q, K and V
    (cross-attention: K and V) as one product."""
    d, h, dk, dv = config.d_model, config.num_heads, config.key_dim, config.value_dim
    attention = ([(d, h * (2 * dk + dv))] if fused else [(d, h * dk), (d, h * dk), (d, h * dv)])
    attention += [(h * dv, d)]
    feed_forward = [(d, config.d_ff), (config.d_ff, d)]
    encoder = [(source_tokens, *shape) for shape in attention + feed_forward]
    cross_key_value = ([(source_tokens, d, h * (dk + dv))] if fused
                       else [(source_tokens, d, h * dk), (source_tokens, d, h * dv)])
    decoder = ([(target_tokens, *shape) for shape in attention + feed_forward]
               + [(target_tokens, d, h * dk), (target_tokens, h * dv, d)]  # cross Q, O
               + cross_key_value)
    output = [(target_tokens, d, config.target_vocab_size)]
    return config.encoder_depth * encoder + config.decoder_depth * decoder + output


def seconds_of(function, repeats: int) -> float:
    function()
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        function()
        best = min(best, time.perf_counter() - start)
    return best


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--config", default="base")
    parser.add_argument("--vocab-size", type=int, default=32000)
    parser.add_argument("--source-tokens", type=int, default=3358)
    parser.add_argument("--target-tokens", type=int, default=3603)
    parser.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--fused-projections", action="store_true",
                        help="Q, K, V (cross-attention: K, V) as one matmul each")
    parser.add_argument("--peak-sizes", default=[1024, 2048, 4096],
                        type=lambda text: [int(size) for size in text.split(",")],
                        help="square matmul sizes tried for the peak (the best counts)")
    args = parser.parse_args(argv)
    sys.path.insert(0, REPO_ROOT)
    import tensorflow as tf

    from keras_transformer.config import TransformerConfig
    from keras_transformer.fast.twins import input_gradient, kernel_gradient

    config = TransformerConfig.preset(args.config, vocab_size=args.vocab_size)
    shapes = weight_matmul_shapes(config, args.source_tokens, args.target_tokens,
                                  args.fused_projections)
    dtype = tf.as_dtype(args.dtype)
    operands = [(tf.random.normal([m, k], dtype=dtype), tf.random.normal([k, n], dtype=dtype),
                 tf.random.normal([m, n], dtype=dtype)) for m, k, n in shapes]

    @tf.function
    def step():
        outputs = []
        for x, w, dy in operands:
            outputs += [tf.matmul(x, w), input_gradient(dy, w), kernel_gradient(x, dy)]
        return outputs

    step_flops = sum(3 * 2 * m * k * n for m, k, n in shapes)
    step_rate = step_flops / seconds_of(step, args.repeats) / 1e9
    peak = peak_worker({"dtype": args.dtype, "sizes": args.peak_sizes, "seconds": 1.5,
                        "repeats": args.repeats})
    print(f"{args.config} {args.dtype}: {len(shapes)} weight matmuls x 3"
          f"{' (fused projections)' if args.fused_projections else ''}, "
          f"{step_flops / 1e9:.1f} GFLOP per step at {args.source_tokens} source / "
          f"{args.target_tokens} target tokens")
    print(f"weight matmuls alone: {step_rate:.1f} GFLOP/s; square-chain peak: "
          f"{peak['gflops']:.1f} GFLOP/s ({peak['size']}^2; by size {peak['gflops_by_size']}); "
          f"ceiling MFU {100 * step_rate / peak['gflops']:.1f}%")


if __name__ == "__main__":
    main()
