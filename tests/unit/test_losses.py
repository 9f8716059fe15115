"""Label-smoothed loss and the masked metrics against hand computations."""
import math

import numpy as np
import pytest

import keras_transformer as kt


def log_softmax(row):
    row = np.asarray(row, dtype=np.float64)
    return row - np.log(np.exp(row).sum())


def hand_loss(targets, logits, eps):
    """Mean over non-padding tokens of -sum_k q_k log p_k, q = (1-eps) one_hot + eps/V."""
    total, count = 0.0, 0
    for target_row, logit_row in zip(targets, logits):
        for target, token_logits in zip(target_row, logit_row):
            if target == 0:
                continue
            log_p = log_softmax(token_logits)
            q = np.full(len(log_p), eps / len(log_p))
            q[target] += 1.0 - eps
            total += -(q * log_p).sum()
            count += 1
    return total / count


TARGETS = np.array([[3, 1, 2], [2, 0, 0]], dtype=np.int32)
LOGITS = np.array([[[0.1, 0.2, 0.3, 2.0], [1.0, 3.0, -1.0, 0.0], [0.5, 0.5, 0.2, 0.1]],
                   [[0.0, 0.0, 4.0, 0.0], [9.0, -9.0, 9.0, 9.0], [5.0, 5.0, 5.0, -5.0]]],
                  dtype=np.float32)


@pytest.mark.parametrize("eps", [0.0, 0.1, 0.3])
def test_loss_equals_hand_computation(eps):
    loss = kt.LabelSmoothedCrossEntropy(eps)(TARGETS, LOGITS)
    assert float(loss) == pytest.approx(hand_loss(TARGETS, LOGITS, eps), rel=1e-5)


def test_padding_positions_do_not_count():
    changed = LOGITS.copy()
    changed[1, 1:] = np.random.default_rng(0).normal(size=changed[1, 1:].shape) * 10
    loss = kt.LabelSmoothedCrossEntropy(0.1)
    assert float(loss(TARGETS, changed)) == pytest.approx(float(loss(TARGETS, LOGITS)), rel=1e-6)


def test_metrics_ignore_padding():
    accuracy = kt.MaskedTokenAccuracy()
    accuracy.update_state(TARGETS, LOGITS)
    # argmax: [3, 1, 0] vs [3, 1, 2]; [2, ...] vs [2, pad, pad] -> 3 right out of 4.
    assert float(accuracy.result()) == pytest.approx(0.75)
    perplexity = kt.Perplexity()
    perplexity.update_state(TARGETS, LOGITS)
    assert float(perplexity.result()) == pytest.approx(math.exp(hand_loss(TARGETS, LOGITS, 0.0)),
                                                       rel=1e-5)


@pytest.mark.parametrize("eps", [0.0, 0.1])
def test_gradient_is_softmax_minus_smoothed_targets(eps):
    """D loss / d logits = (softmax(z) - q) / tokens on real tokens, 0 on padding."""
    import tensorflow as tf

    logits = tf.constant(LOGITS)
    with tf.GradientTape() as tape:
        tape.watch(logits)
        loss = kt.LabelSmoothedCrossEntropy(eps)(TARGETS, logits)
    gradient = tape.gradient(loss, logits).numpy()
    tokens = int((TARGETS != 0).sum())
    for (row, col), target in np.ndenumerate(TARGETS):
        expected = np.zeros(LOGITS.shape[-1])
        if target != 0:
            q = np.full(LOGITS.shape[-1], eps / LOGITS.shape[-1])
            q[target] += 1.0 - eps
            expected = (np.exp(log_softmax(LOGITS[row, col])) - q) / tokens
        np.testing.assert_allclose(gradient[row, col], expected, atol=1e-6)


def test_log_normalizer_is_stable_for_extreme_logits():
    """Logsumexp from the softmax at the argmax: exact where a naive exp would overflow or a
    tiny softmax underflow (masked -1e9 logits, spreads of thousands)."""
    import tensorflow as tf

    from keras_transformer.fast.loss import logit_statistics

    rng = np.random.default_rng(0)
    logits = np.concatenate([rng.normal(size=(3, 50)) * 3000,
                             np.full((1, 50), -1e9), rng.normal(size=(2, 50))]).astype("float32")
    logits[3, 7] = 0.0
    statistics = logit_statistics(tf.constant(logits))
    want = tf.reduce_logsumexp(tf.constant(logits, tf.float64), axis=-1).numpy()
    np.testing.assert_allclose(statistics.log_normalizer.numpy(), want, rtol=1e-6)
    np.testing.assert_array_equal(statistics.predictions.numpy(), logits.argmax(-1))
    np.testing.assert_allclose(statistics.probabilities.numpy().sum(-1), 1.0, rtol=1e-6)


@pytest.mark.parametrize("implementation, softmaxes", [("fast", 1), ("reference", 0)])
def test_loss_and_metrics_share_one_softmax_and_argmax(implementation, softmaxes):
    """In a traced step with fast kernels the loss, its gradient and both metrics read the
    logits' statistics once: one softmax and one argmax over `[tokens, vocab]` (reference:
    logsumexps and their autodiff, no softmax op; the accuracy's argmax)."""
    import tensorflow as tf

    from keras_transformer.fast import implementation_scope

    loss, accuracy, perplexity = (kt.LabelSmoothedCrossEntropy(0.1), kt.MaskedTokenAccuracy(),
                                  kt.Perplexity())

    @tf.function
    def step(logits):
        with tf.GradientTape() as tape:
            tape.watch(logits)
            value = loss(TARGETS, logits)
        accuracy.update_state(TARGETS, logits)
        perplexity.update_state(TARGETS, logits)
        return value, tape.gradient(value, logits)

    with implementation_scope(implementation):
        graph = step.get_concrete_function(tf.TensorSpec(LOGITS.shape, tf.float32)).graph
        value, _ = step(tf.constant(LOGITS))
    op_types = [op.type for op in graph.get_operations()]
    assert op_types.count("Softmax") == softmaxes and op_types.count("ArgMax") == 1
    assert float(value) == pytest.approx(hand_loss(TARGETS, LOGITS, 0.1), rel=1e-5)
    assert float(accuracy.result()) == pytest.approx(0.75)
    assert float(perplexity.result()) == pytest.approx(math.exp(hand_loss(TARGETS, LOGITS, 0.0)),
                                                       rel=1e-5)
    captured = tf.constant(LOGITS)  # an eager tensor captured by a traced function
    assert float(tf.function(lambda: loss(TARGETS, captured))()) == pytest.approx(float(value))


def _loss_and_factor_gradients(hidden, kernel, transposed, targets, weights, eps, factored):
    """Weighted label-smoothed loss of `hidden @ kernel` and its gradients, in one traced step;
    `factored=False` hides the factors from the loss (it then differentiates the logits)."""
    import tensorflow as tf

    from keras_transformer.fast import loss as fast_loss
    from keras_transformer.fast.loss import factor_logits

    @tf.function
    def step(hidden, kernel):
        with tf.GradientTape() as tape:
            tape.watch([hidden, kernel])
            factors = factor_logits(hidden, kernel, transposed)
            losses = (fast_loss.smoothed_cross_entropy_through_factors(targets, factors, eps)
                      if factored
                      else fast_loss.smoothed_cross_entropy(targets, factors.logits, eps))
            loss = tf.reduce_sum(tf.reshape(losses, tf.shape(weights)) * weights)
        return (loss, *tape.gradient(loss, [hidden, kernel]))

    graph = step.get_concrete_function(hidden, kernel).graph
    over_logits = [op.type for op in graph.get_operations()  # ops on [batch, len, vocab]
                   if any(t.shape.rank == 3 for t in op.inputs) or op.type == "OneHot"]
    return (*step(hidden, kernel), over_logits)


@pytest.mark.parametrize("transposed", [True, False])
@pytest.mark.parametrize("eps", [0.0, 0.1])
def test_loss_through_logit_factors_equals_loss_of_logits(transposed, eps):
    """Differentiated through `hidden @ kernel`, the loss and its gradients equal those of the
    logits' own gradient (and the hand loss), with non-uniform and zero token weights, and the
    step takes no one-hot and no mean of the logits."""
    import tensorflow as tf

    rng = np.random.default_rng(1)
    vocab, d_model = 37, 8
    hidden = tf.constant(rng.normal(size=(2, 5, d_model)), tf.float32)
    kernel = tf.constant(rng.normal(size=(vocab, d_model) if transposed else (d_model, vocab)),
                         tf.float32)
    targets = tf.constant(rng.integers(0, vocab, size=(2, 5)), tf.int32)
    weights = tf.constant(rng.uniform(size=(2, 5)) * (rng.uniform(size=(2, 5)) > 0.2), tf.float32)
    *fused, fused_ops = _loss_and_factor_gradients(hidden, kernel, transposed, targets, weights,
                                                   eps, factored=True)
    *plain, plain_ops = _loss_and_factor_gradients(hidden, kernel, transposed, targets, weights,
                                                   eps, factored=False)
    for got, want in zip(fused, plain):
        np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-5, atol=1e-6)
    logits = np.einsum("btd,vd->btv", hidden.numpy(),
                       kernel.numpy() if transposed else kernel.numpy().T)
    hand = sum(w * hand_loss([[t]], [[z]], eps) for w, t, z in zip(
        weights.numpy().ravel(), targets.numpy().ravel(), logits.reshape(-1, vocab)) if t)
    hand += sum(w * hand_loss([[1]], [[np.roll(z, 1)]], eps) for w, t, z in zip(
        weights.numpy().ravel(), targets.numpy().ravel(), logits.reshape(-1, vocab)) if not t)
    assert float(fused[0]) == pytest.approx(hand, rel=1e-5)
    assert "OneHot" not in fused_ops and "OneHot" in plain_ops
    assert "Mean" not in fused_ops and ("Mean" in plain_ops or not eps)


@pytest.mark.parametrize("transposed", [True, False])
def test_loss_through_bfloat16_factors_keeps_autodiffs_accuracy(transposed):
    """With bfloat16 factors the gradients stay within 2x of autodiff's distance from the
    float32 gradients of the same inputs (about 1% RMS both), for confident predictions, where
    the one-hot term nearly cancels the rounded label probability: the softmax and `u hidden`
    enter the products rounded, where autodiff rounds `u (softmax - q)` once."""
    import tensorflow as tf

    rng = np.random.default_rng(2)
    vocab, d_model = 300, 16
    table = rng.normal(size=(vocab, d_model))
    targets = rng.integers(1, vocab, size=(4, 6))
    hidden = tf.cast(table[targets] + rng.normal(size=(4, 6, d_model)) * 0.3, tf.bfloat16)
    kernel = tf.cast(table if transposed else table.T, tf.bfloat16)
    targets = tf.constant(targets, tf.int32)
    weights = tf.constant(rng.uniform(size=(4, 6)), tf.float32)
    run = lambda h, k, factored: _loss_and_factor_gradients(  # noqa: E731
        h, k, transposed, targets, weights, 0.1, factored)[1:3]
    exact = run(tf.cast(hidden, tf.float32), tf.cast(kernel, tf.float32), True)

    def error(gradients):  # the larger relative RMS error of the two gradients
        return max(float(tf.norm(tf.cast(g, tf.float32) - e) / tf.norm(e))
                   for g, e in zip(gradients, exact))

    fused, plain = error(run(hidden, kernel, True)), error(run(hidden, kernel, False))
    assert fused <= 2 * plain and fused < 1.5e-2
