"""Loss + perplexity cost per training step under three formulations of the same loss.

    PYTHONPATH=. python benchmarks/loss_speed.py [--shape 64,32,32000]

Times, inside one tf.function, the label-smoothed loss with its gradient plus the unsmoothed
pass the Perplexity metric makes, alternating the formulations: a full log-softmax, logsumexp
with a gather of the true logit (whose gradient is a scatter over `[tokens, vocab]`), and the
fused softmax cross-entropy kernels the library uses. Default shape: a 2,048-token batch of a
32k vocabulary, as in the training-speed benchmark; `64,64,8000` is a `small` preset batch.
"""
import argparse
import time

import tensorflow as tf
from keras import ops

import keras_transformer  # noqa: F401  (selects the TensorFlow backend)
from keras_transformer.losses import smoothed_token_losses


def log_softmax_losses(y_true, logits, eps):
    """Materializes `[batch, len, vocab]` log-probabilities."""
    log_probs = ops.log_softmax(ops.cast(logits, "float32"), axis=-1)
    true = ops.squeeze(ops.take_along_axis(log_probs, ops.expand_dims(y_true, -1), axis=-1), -1)
    return -((1 - eps) * true + eps * ops.mean(log_probs, axis=-1))


def gathered_logsumexp_losses(y_true, logits, eps):
    """`logsumexp(z) - (1 - eps) z_y - eps mean(z)`, `z_y` gathered."""
    true = ops.squeeze(ops.take_along_axis(logits, ops.expand_dims(y_true, -1), axis=-1), -1)
    return ops.logsumexp(logits, axis=-1) - (1 - eps) * true - eps * ops.mean(logits, axis=-1)


def make_step(losses, logits, targets):
    @tf.function
    def step():
        with tf.GradientTape() as tape:
            tape.watch(logits)
            loss = tf.reduce_mean(losses(targets, logits, 0.1))
        return tape.gradient(loss, logits), tf.reduce_mean(losses(targets, logits, 0.0))
    return step


def main(rounds: int = 4, repeats: int = 5) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--shape", default="64,32,32000", help="batch,length,vocab")
    batch, length, vocab = (int(size) for size in parser.parse_args().shape.split(","))
    logits = tf.random.normal([batch, length, vocab])
    targets = tf.random.uniform([batch, length], 4, vocab, tf.int32)
    steps = {"log_softmax + gather": make_step(log_softmax_losses, logits, targets),
             "logsumexp + gather": make_step(gathered_logsumexp_losses, logits, targets),
             "written-out gradient (library)": make_step(smoothed_token_losses, logits, targets)}
    for step in steps.values():
        step()
    times = {name: [] for name in steps}
    for _ in range(rounds):
        for name, step in steps.items():
            start = time.perf_counter()
            for _ in range(repeats):
                step()
            times[name].append((time.perf_counter() - start) / repeats * 1000)
    print(f"logits {[batch, length, vocab]}")
    for name, values in times.items():
        print(f"{name}: median {sorted(values)[len(values) // 2]:.1f} ms per step "
              f"(rounds: {', '.join(f'{v:.0f}' for v in values)})")


if __name__ == "__main__":
    main()
