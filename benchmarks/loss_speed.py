"""Loss + metrics cost per training step under five formulations of the same loss.

    PYTHONPATH=. python benchmarks/loss_speed.py [--shape 64,32,32000] [--d-model 512]

Times, inside one tf.function, the tied output projection `hidden @ E^T` and the label-smoothed
loss with their gradients (for `hidden` and `E`) plus what the Perplexity (unsmoothed
cross-entropy) and token-accuracy (argmax) metrics compute, alternating the formulations: a
full log-softmax; logsumexp with a gather of the true logit (whose gradient is a scatter over
`[tokens, vocab]`); the gradient `softmax(z) - q` written out but the softmax recomputed in the
backward pass, logsumexp again for perplexity and Keras's argmax; one
softmax and one argmax shared by all of them (`fast.loss.logit_statistics`); and the
fast kernel now, which also differentiates through the factors `hidden @ E^T`
(`fast.loss.smoothed_cross_entropy_through_factors`) instead of materializing the gradient of the
logits.
Default shape: a 2,048-token batch of a 32k vocabulary; `1,3600,32000` is the real target
tokens of a 4,096-token `base` batch.
"""
import argparse
import time

import tensorflow as tf
from keras import ops

import keras_transformer  # noqa: F401  (selects the TensorFlow backend)
from keras_transformer.fast import loss as fast_loss
from keras_transformer.fast.loss import factor_logits, log_normalizer, predicted_ids


def log_softmax_losses(y_true, logits, eps):
    """Materializes `[batch, len, vocab]` log-probabilities."""
    log_probs = ops.log_softmax(ops.cast(logits, "float32"), axis=-1)
    true = ops.squeeze(ops.take_along_axis(log_probs, ops.expand_dims(y_true, -1), axis=-1), -1)
    return -((1 - eps) * true + eps * ops.mean(log_probs, axis=-1))


def gathered_logsumexp_losses(y_true, logits, eps):
    """`logsumexp(z) - (1 - eps) z_y - eps mean(z)`, `z_y` gathered."""
    true = ops.squeeze(ops.take_along_axis(logits, ops.expand_dims(y_true, -1), axis=-1), -1)
    return ops.logsumexp(logits, axis=-1) - (1 - eps) * true - eps * ops.mean(logits, axis=-1)


def recomputed_softmax_losses(y_true, logits, eps):
    """Session 3's library: logsumexp forward, `softmax(z) - q` recomputed in the gradient."""
    @tf.custom_gradient
    def losses(logits):
        log_normalizer = tf.reduce_logsumexp(logits, axis=-1)
        value = (log_normalizer - (1.0 - eps) * tf.gather(logits, y_true, batch_dims=2)
                 - eps * tf.reduce_mean(logits, axis=-1))

        def gradient(upstream):
            vocab = logits.shape[-1]
            targets = tf.one_hot(y_true, vocab, on_value=1.0 - eps + eps / vocab,
                                 off_value=eps / vocab)
            return (tf.exp(logits - log_normalizer[..., None]) - targets) * upstream[..., None]

        return value, gradient

    return losses(logits)


def make_step(losses, predictions, hidden, table, targets, factored=False):
    """A traced step; unless `factored`, the loss sees the logits only (not their factors)."""
    @tf.function
    def step():
        with tf.GradientTape() as tape:
            tape.watch([hidden, table])
            factors = factor_logits(hidden, table, transposed=True)
            logits = factors.logits
            loss = tf.reduce_mean(
                fast_loss.smoothed_cross_entropy_through_factors(targets, factors, 0.1)
                if factored else losses(targets, logits, 0.1))
        accuracy = tf.reduce_mean(tf.cast(tf.equal(predictions(logits), targets), tf.float32))
        perplexity_loss = log_normalizer(logits) - tf.gather(logits, targets, batch_dims=2)
        return tape.gradient(loss, [hidden, table]), tf.reduce_mean(perplexity_loss), accuracy
    return step


def main(rounds: int = 4, repeats: int = 5) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--shape", default="64,32,32000", help="batch,length,vocab")
    parser.add_argument("--d-model", type=int, default=512)
    args = parser.parse_args()
    batch, length, vocab = (int(size) for size in args.shape.split(","))
    hidden = tf.random.normal([batch, length, args.d_model])
    table = tf.random.normal([vocab, args.d_model], stddev=args.d_model ** -0.5)
    targets = tf.random.uniform([batch, length], 4, vocab, tf.int32)
    keras_argmax = lambda z: ops.cast(ops.argmax(z, axis=-1), "int32")  # noqa: E731
    data = (hidden, table, targets)
    steps = {
        "log_softmax + gather": make_step(log_softmax_losses, keras_argmax, *data),
        "logsumexp + gather": make_step(gathered_logsumexp_losses, keras_argmax, *data),
        "written-out gradient, softmax recomputed": make_step(
            recomputed_softmax_losses, keras_argmax, *data),
        "shared softmax and argmax": make_step(
            fast_loss.smoothed_cross_entropy, predicted_ids, *data),
        "through the logit factors (fast kernel)": make_step(
            fast_loss.smoothed_cross_entropy, predicted_ids, *data, factored=True),
    }
    for step in steps.values():
        step()
    times = {name: [] for name in steps}
    for _ in range(rounds):
        for name, step in steps.items():
            start = time.perf_counter()
            for _ in range(repeats):
                step()
            times[name].append((time.perf_counter() - start) / repeats * 1000)
    print(f"logits {[batch, length, vocab]}, d_model {args.d_model}")
    for name, values in times.items():
        print(f"{name}: median {sorted(values)[len(values) // 2]:.1f} ms per step "
              f"(rounds: {', '.join(f'{v:.0f}' for v in values)})")


if __name__ == "__main__":
    main()
