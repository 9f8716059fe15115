"""Loss + perplexity cost per training step: full log-softmax (before) vs logsumexp (now).

    PYTHONPATH=. python benchmarks/loss_speed.py

Times, inside one tf.function, the label-smoothed loss with its gradient plus the unsmoothed
pass the Perplexity metric makes, on logits of shape [64, 64, 8000] (a 4,096-token batch of the
`small` preset's vocabulary), alternating the two formulations.
"""
import time

import tensorflow as tf
from keras import ops

import keras_transformer  # noqa: F401  (selects the TensorFlow backend)
from keras_transformer.losses import smoothed_token_losses


def log_softmax_losses(y_true, logits, eps):
    """The earlier formulation: materializes [batch, len, vocab] log-probabilities."""
    log_probs = ops.log_softmax(ops.cast(logits, "float32"), axis=-1)
    true = ops.squeeze(ops.take_along_axis(log_probs, ops.expand_dims(y_true, -1), axis=-1), -1)
    return -((1 - eps) * true + eps * ops.mean(log_probs, axis=-1))


def make_step(losses, logits, targets):
    @tf.function
    def step():
        with tf.GradientTape() as tape:
            tape.watch(logits)
            loss = tf.reduce_mean(losses(targets, logits, 0.1))
        return tape.gradient(loss, logits), tf.reduce_mean(losses(targets, logits, 0.0))
    return step


def main(rounds: int = 4, repeats: int = 20) -> None:
    logits = tf.random.normal([64, 64, 8000])
    targets = tf.random.uniform([64, 64], 4, 8000, tf.int32)
    steps = {"log_softmax (before)": make_step(log_softmax_losses, logits, targets),
             "logsumexp (now)": make_step(smoothed_token_losses, logits, targets)}
    for step in steps.values():
        step()
    times = {name: [] for name in steps}
    for _ in range(rounds):
        for name, step in steps.items():
            start = time.perf_counter()
            for _ in range(repeats):
                step()
            times[name].append((time.perf_counter() - start) / repeats * 1000)
    for name, values in times.items():
        print(f"{name}: median {sorted(values)[len(values) // 2]:.1f} ms per step "
              f"(rounds: {', '.join(f'{v:.0f}' for v in values)})")


if __name__ == "__main__":
    main()
