"""What each fast kernel buys over its reference twin, and whole training steps of the two sets
(and of another checkout of the code, e.g. the one before a change) in the same run.

    PYTHONPATH=. python benchmarks/kernel_speed.py [--config base] [--tokens 4096] \
        [--vocab-size 32000] [--repeats 7] [--steps 6] [--before-tree /tmp/before]

Kernels: each timed in a `tf.function` doing what a training step does with it (forward and
backward; an optimizer update), at the config's sizes on
`--tokens` tokens, fast and reference alternated, best of `--repeats`; the token layout through
a whole encoder layer (its moves cost more than the padded layout's transposes; what they buy is
the position-wise work skipped on padding), with the other kernels fast. Whole steps: each
(tree, implementation) in its own subprocess:
`keras_transformer.training.run.compiled_model(recipe)` trained with `train_on_batch` (forward,
loss, backward, Adam, metrics) on the same synthetic batches of 32-token rows with a quarter of
the positions padding, `--steps` timed steps after one warm-up step; target tokens/s of the best
step. A `--before-tree` worker runs that checkout's code (which may not read `KT_KERNELS`).
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
LENGTH = 32


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--config", default="base")
    parser.add_argument("--tokens", type=int, default=4096, help="positions per side and batch")
    parser.add_argument("--vocab-size", type=int, default=32000)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--steps", type=int, default=6, help="timed whole steps per worker")
    parser.add_argument("--precision", default="float32")
    parser.add_argument("--before-tree", help="another checkout whose whole step to time too")
    parser.add_argument("--rounds", type=int, default=1,
                        help="whole-step workers per (tree, implementation), alternated")
    parser.add_argument("--steps-only", action="store_true", help="skip the kernel table")
    parser.add_argument("--step-worker", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.step_worker:
        print(json.dumps(whole_step(json.loads(args.step_worker))))
        return
    settings = {"config": args.config, "tokens": args.tokens, "vocab_size": args.vocab_size,
                "steps": args.steps, "precision": args.precision}
    print(f"kernels at {args.config} sizes, {args.tokens} tokens, {args.precision}")
    if not args.steps_only:
        print("| kernel | reference ms | fast ms | reference / fast |\n"
              "| --- | ---: | ---: | ---: |")
        for name, reference_ms, fast_ms in kernel_rows(settings, args.repeats):
            print(f"| {name} | {reference_ms:.2f} | {fast_ms:.2f} | "
                  f"{reference_ms / fast_ms:.2f}x |")
    print("\n| whole step | target tok/s |\n| --- | ---: |")
    runs = [("reference kernels", ROOT, "reference"), ("fast kernels", ROOT, "fast")]
    if args.before_tree:
        runs.append((f"before ({args.before_tree})", Path(args.before_tree), "fast"))
    for label, tree, implementation in runs * args.rounds:
        result = run_worker(tree, implementation, settings)
        print(f"| {label} | {result['target_tokens_per_second']:.1f} |")


def run_worker(tree: Path, implementation: str, settings: dict) -> dict:
    environment = {**os.environ, "KT_KERNELS": implementation, "PYTHONPATH": str(tree)}
    completed = subprocess.run(
        [sys.executable, str(Path(__file__).resolve()), "--step-worker", json.dumps(settings)],
        cwd=tree, env=environment, capture_output=True, text=True, check=False)
    if completed.returncode:
        raise RuntimeError(completed.stderr[-3000:])
    return json.loads(completed.stdout.strip().splitlines()[-1])


def batch(rows: int, vocab: int, seed: int) -> np.ndarray:
    """`[rows, LENGTH]` ids, each row 50-100% real tokens (about a quarter padding)."""
    rng = np.random.default_rng(seed)
    ids = rng.integers(4, vocab, size=(rows, LENGTH)).astype("int32")
    lengths = rng.integers(LENGTH // 2, LENGTH + 1, size=rows)
    ids[np.arange(LENGTH)[None, :] >= lengths[:, None]] = 0
    return ids


def whole_step(settings: dict) -> dict:
    """Target tokens/s of this tree's compiled model trained with `train_on_batch`."""
    import keras
    import keras_transformer as kt
    from keras_transformer.precision import set_precision
    from keras_transformer.training.run import compiled_model
    try:
        from keras_transformer import fast
        fast.set_implementation(os.environ["KT_KERNELS"])
    except ImportError:
        pass  # a tree from before the fast subpackage reads KT_KERNELS itself

    set_precision(settings["precision"])
    # Trees from before the recipe split build the model from the flat config.
    settings_of = getattr(kt, "Recipe", kt.TransformerConfig).preset
    keras.utils.set_random_seed(0)
    model, _ = compiled_model(settings_of(settings["config"], vocab_size=settings["vocab_size"]))
    config = model.config
    rows = settings["tokens"] // LENGTH
    source, target = batch(rows, config.vocab_size, 1), batch(rows, config.vocab_size, 2)
    target_in = np.concatenate([np.full((rows, 1), kt.BOS_ID, "int32"), target[:, :-1]], 1)
    target_in[target == 0] = 0
    model.train_on_batch((source, target_in), target)
    best = float("inf")
    for _ in range(settings["steps"]):
        start = time.perf_counter()
        model.train_on_batch((source, target_in), target)
        best = min(best, time.perf_counter() - start)
    return {"target_tokens_per_second": int((target != 0).sum()) / best}


def kernel_rows(settings: dict, repeats: int):
    """(kernel, reference ms, fast ms) for each kernel of the interface."""
    import keras
    import tensorflow as tf
    import keras_transformer as kt
    from keras_transformer import fast
    from keras_transformer.fast import loss, optimizers, packed, twins
    from keras_transformer.fast.loss import factor_logits
    from keras_transformer.layers import EncoderLayer
    from keras_transformer.layers.dense import linear
    from keras_transformer.layers.residual import dropout, layer_norm
    from keras_transformer.losses import smoothed_cross_entropy
    from keras_transformer.metrics import log_normalizer, predicted_ids
    from keras_transformer.precision import set_precision

    set_precision(settings["precision"])
    fast.set_implementation("fast")  # for the encoder layer's kernels other than the layout
    config = kt.TransformerConfig.preset(settings["config"], vocab_size=settings["vocab_size"])
    dtype = keras.config.dtype_policy().compute_dtype
    tokens, d, rng = settings["tokens"], config.d_model, np.random.default_rng(0)
    # Variables, not constants: the graph optimizer would fold a computation on constants.
    normal = lambda *shape: tf.Variable(tf.constant(rng.normal(size=shape) * 0.05, dtype))  # noqa: E731
    x, w, b = normal(tokens, d), normal(d, config.d_ff), normal(config.d_ff)
    gamma, beta = normal(d), normal(d)
    seed = keras.random.SeedGenerator(0)

    def backward(function, *variables):
        def run():
            operands = [tf.convert_to_tensor(variable) for variable in variables]
            with tf.GradientTape() as tape:
                tape.watch(operands)
                value = tf.reduce_sum(tf.cast(function(*operands), tf.float32))
            gradients = tape.gradient(value, operands)
            assert all(gradient is not None for gradient in gradients)
            return gradients
        return run

    ids = tf.Variable(batch(tokens // LENGTH, config.vocab_size, 0))
    padded_x = normal(tokens // LENGTH, LENGTH, d)
    layer = EncoderLayer(config.num_heads, config.key_dim, config.value_dim, config.d_ff,
                         dropout=0.0, attention_bias=False)
    layer.build((None, None, d))

    def encoder_layer(packs: bool):
        def run(values):  # one encoder layer, padded as the core runs it, or on packed tokens
            mask = tf.not_equal(ids, 0)[:, None, :]
            if not packs:
                return layer(values, padding_mask=mask)
            layout = packed.TokenLayout(tf.convert_to_tensor(ids))
            return layout.unpack(packed._encoder_layer(layer, layout.pack(values), mask, layout,
                                                       None))
        return run

    hidden, embedding = normal(tokens, d), normal(config.vocab_size, d)
    labels = tf.Variable(rng.integers(4, config.vocab_size, size=tokens).astype("int32"))
    def loss_and_metrics(metrics_kernels, loss):
        def run():  # the loss and its gradients, then what the two metrics read
            operands = [tf.convert_to_tensor(hidden), tf.convert_to_tensor(embedding)]
            with tf.GradientTape() as tape:
                tape.watch(operands)
                factors = factor_logits(*operands, True)
                value = tf.reduce_sum(loss(labels, factors, 0.1))  # the paper's eps_ls
            gradients = tape.gradient(value, operands)
            predictions, normalizer = metrics_kernels
            return gradients, predictions(factors.logits), normalizer(factors.logits)
        return run

    variables = [keras.Variable(rng.normal(size=(d, config.d_ff)).astype("float32"))
                 for _ in range(8)]
    gradients = [tf.Variable(rng.normal(size=(d, config.d_ff)).astype("float32"))
                 for _ in variables]

    def adam_step(make):
        optimizer = make(learning_rate=1e-4, beta_1=0.9, beta_2=0.98, epsilon=1e-9)
        optimizer.build(variables)
        return lambda: optimizer.apply(gradients, variables)

    cases = {
        "linear (FFN inner, ReLU)": lambda k: backward(
            lambda x, w, b: k["linear"](x, w, b, True), x, w, b),
        "layer_norm": lambda k: backward(lambda x: k["layer_norm"](x, gamma, beta, 1e-6), x),
        "dropout": lambda k: backward(lambda x: k["dropout"](x, 0.1, seed), x),
        "encoder layer in the token layout": lambda k: backward(k["layer"], padded_x),
        "loss through factors + 2 metrics": lambda k: k["loss"],
        "adam (8 x d_model x d_ff)": lambda k: k["adam"],
    }
    implementations = {
        "reference": {
            "linear": linear.reference, "layer_norm": layer_norm.reference,
            "dropout": dropout.reference, "layer": encoder_layer(False),
            "loss": loss_and_metrics((predicted_ids.reference, log_normalizer.reference),
                                     lambda y, factors, eps: (
                smoothed_cross_entropy.reference(y, factors.logits, eps))),
            "adam": adam_step(keras.optimizers.Adam)},
        "fast": {
            "linear": twins.linear, "layer_norm": twins.layer_norm,
            "dropout": twins.dropout, "layer": encoder_layer(True),
            "loss": loss_and_metrics((loss.predicted_ids, loss.log_normalizer),
                                     loss.smoothed_cross_entropy_through_factors),
            "adam": adam_step(optimizers.FusedAdam)}}
    for label, make in cases.items():
        functions = {name: tf.function(make(implementation))
                     for name, implementation in implementations.items()}
        for function in functions.values():
            function()
        best = {name: float("inf") for name in functions}
        for _ in range(repeats):
            for name, function in functions.items():
                start = time.perf_counter()
                tf.nest.map_structure(lambda t: t.numpy() if hasattr(t, "numpy") else t,
                                      function())
                best[name] = min(best[name], time.perf_counter() - start)
        yield label, 1e3 * best["reference"], 1e3 * best["fast"]


if __name__ == "__main__":
    main()
