"""How fast a one-sentence decoding step's weight products can stream their kernels: a chain of
`--kernels` products `[4, 512] x [512, 2048]` (4 rows: one sentence's beam) in `--dtype`, as a
graph or XLA-compiled, with `--threads` intra-op threads; best of `--repeats`, in GB/s of kernel
bytes. XLA reads `XLA_FLAGS` from the environment (e.g. its CPU library-fusion flags).

    python benchmarks/weight_streaming.py --threads 1 --mode xla [--transposed] [--dtype bfloat16]
"""
from __future__ import annotations

import argparse
import time

import numpy as np
import tensorflow as tf


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--mode", choices=("graph", "xla"), default="xla")
    parser.add_argument("--kernels", type=int, default=24)
    parser.add_argument("--repeats", type=int, default=30)
    parser.add_argument("--dtype", choices=("float32", "bfloat16"), default="float32",
                        help="what the kernels are stored in and the products compute in")
    parser.add_argument("--transposed", action="store_true",
                        help="store each kernel as [2048, 512] and multiply by its transpose")
    args = parser.parse_args()
    tf.config.threading.set_intra_op_parallelism_threads(args.threads)
    tf.config.threading.set_inter_op_parallelism_threads(1)
    shape = (2048, 512) if args.transposed else (512, 2048)
    kernels = [tf.constant(np.random.rand(*shape).astype("float32"), args.dtype)
               for _ in range(args.kernels)]

    @tf.function(jit_compile=args.mode == "xla")
    def chain(rows):
        for kernel in kernels:  # each product's first 512 columns feed the next
            rows = tf.matmul(rows, kernel, transpose_b=args.transposed)[:, :512] * 0.01
        return rows

    rows = tf.random.normal([4, 512], dtype=args.dtype)
    chain(rows).numpy()
    seconds = []
    for _ in range(args.repeats):
        start = time.perf_counter()
        chain(rows).numpy()
        seconds.append(time.perf_counter() - start)
    gigabytes = args.kernels * 512 * 2048 * kernels[0].dtype.size / 1e9
    print(f"{args.mode}, {args.dtype}, {args.threads} thread(s), "
          f"{'transposed' if args.transposed else 'plain'}"
          f": {min(seconds) * 1e3:.2f} ms, {gigabytes / min(seconds):.1f} GB/s")


if __name__ == "__main__":
    main()
