"""The fast twins of the position-wise hooks: `linear` (the projections), `layer_norm`
and `dropout`. Each computes what the core's reference computes
(tests/unit/fast/test_twins.py checks values and gradients) with a faster backward pass or cheaper
random numbers."""
from __future__ import annotations

from typing import Optional

import tensorflow as tf

from keras_transformer.layers.dense import linear as reference_linear

_LEVELS = 1 << 16  # dropout masks compare 16-bit random integers against a threshold


def linear(rows: tf.Tensor, kernel: tf.Tensor, bias: Optional[tf.Tensor] = None,
         relu: bool = False) -> tf.Tensor:
    """The reference `linear` (matmul, bias, ReLU) with its float32 gradient products in
    oneDNN's faster layouts (`input_gradient`, `kernel_gradient`); other dtypes keep autodiff's
    (in bfloat16 the layouts run alike, so writing the gradient out only slowed the step:
    benchmarks/RESULTS.md, "Kernels")."""
    if rows.dtype != tf.float32:
        return reference_linear.reference(rows, kernel, bias, relu)

    @tf.custom_gradient
    def forward(rows, kernel, *bias_):
        outputs = reference_linear.reference(rows, kernel, *bias_, relu=relu)

        def gradient(upstream):
            if relu:
                upstream = tf.raw_ops.ReluGrad(gradients=upstream, features=outputs)
            d_bias = (tf.raw_ops.BiasAddGrad(out_backprop=upstream),) if bias_ else ()
            return (input_gradient(upstream, kernel), kernel_gradient(rows, upstream), *d_bias)

        return outputs, gradient

    return forward(rows, kernel, *(() if bias is None else (bias,)))


# In float32, oneDNN's CPU matmul runs a product with a transposed right operand, or with an
# output of fewer columns than rows over a long contraction, measurably slower than the same
# product in the other layout (the figures at `base` shapes: benchmarks/RESULTS.md, "Kernels");
# the gradients below pick the faster layout. In bfloat16 both layouts run alike.

def input_gradient(upstream: tf.Tensor, kernel: tf.Tensor) -> tf.Tensor:
    """`upstream @ kernel^T`; in float32 with a transposed copy of a kernel that has at least as
    many columns as rows (the copy is kernel-sized), not `transpose_b`."""
    in_size, out_size = kernel.shape
    if upstream.dtype == tf.float32 and out_size >= in_size:
        return tf.matmul(upstream, _transposed(kernel))
    return tf.matmul(upstream, kernel, transpose_b=True)


def kernel_gradient(rows: tf.Tensor, upstream: tf.Tensor) -> tf.Tensor:
    """`rows^T @ upstream`; in float32, for a kernel with more rows than columns, as the
    transpose of `upstream^T @ rows`."""
    if rows.dtype == tf.float32 and rows.shape[-1] > upstream.shape[-1]:
        return _transposed(tf.matmul(upstream, rows, transpose_a=True))
    return tf.matmul(rows, upstream, transpose_a=True)


def _transposed(matrix: tf.Tensor) -> tf.Tensor:
    """`matrix^T` as a copy. A 2-D `tf.transpose` feeding a matmul is folded back into the
    matmul's transpose flag by TensorFlow's graph optimizer; a transpose of a 3-D view is not."""
    rows, columns = matrix.shape
    return tf.reshape(tf.transpose(matrix[None], (0, 2, 1)), (columns, rows))


def layer_norm(x: tf.Tensor, gamma: tf.Tensor, beta: tf.Tensor, epsilon: float) -> tf.Tensor:
    """The reference `layer_norm` with the backward pass in closed form,
    `dx = inv * (g - mean(g) - x_hat * mean(g * x_hat))` with `g = dy * gamma`, instead of
    differentiating the dozen element-wise ops of the forward pass one by one."""
    dtype = x.dtype

    @tf.custom_gradient
    def normalize(x, gamma, beta):
        x = tf.cast(x, tf.float32)
        centered = x - tf.reduce_mean(x, axis=-1, keepdims=True)
        inv = tf.math.rsqrt(tf.reduce_mean(tf.square(centered), axis=-1, keepdims=True)
                            + epsilon)
        normalized = centered * inv

        def gradient(upstream):
            upstream = tf.cast(upstream, tf.float32)
            scaled = upstream * gamma
            dx = inv * (scaled - tf.reduce_mean(scaled, axis=-1, keepdims=True)
                        - normalized * tf.reduce_mean(scaled * normalized, axis=-1,
                                                      keepdims=True))
            return (tf.cast(dx, dtype), sum_of_rows(upstream * normalized),
                    sum_of_rows(upstream))

        return tf.cast(normalized * gamma + beta, dtype), gradient

    return normalize(x, tf.cast(gamma, tf.float32), tf.cast(beta, tf.float32))


def dropout(inputs: tf.Tensor, rate: float, seed: tf.Tensor) -> tf.Tensor:
    """Masks from 16 random bits, two per 32-bit Philox output, instead of a float32 uniform
    (random-number generation was two thirds of Keras's dropout time on CPU).

    The drop probability is the nearest multiple of 2^-16 (0.1 -> 0.100006) and kept values are
    scaled by the exact inverse of that keep probability, so the expectation is unchanged.
    The mask holds the kept values' scale, so that applying it (and its gradient) is one
    multiplication.
    """
    dropped = min(round(rate * _LEVELS), _LEVELS - 1)
    shape = tf.shape(inputs)
    size = tf.reduce_prod(shape)
    bits = tf.random.stateless_uniform(
        [(size + 1) // 2], seed=seed,
        minval=None, maxval=None, dtype=tf.uint32)
    levels = tf.reshape(tf.bitcast(bits, tf.uint16), [-1])[:size]
    scale = tf.constant(_LEVELS / (_LEVELS - dropped), inputs.dtype)
    mask = tf.where(tf.reshape(levels >= dropped, shape), scale, tf.zeros((), inputs.dtype))
    return _times_mask(inputs, mask)


@tf.custom_gradient
def _times_mask(inputs, mask):
    """`inputs * mask`, differentiated for `inputs` only (one multiplication, where autodiff of
    a product with dynamic shapes adds broadcast reductions)."""
    return inputs * mask, lambda upstream: (upstream * mask, None)


def sum_of_rows(values: tf.Tensor) -> tf.Tensor:
    """Sum over all but the last axis, as a matrix-vector product: two to three times as fast
    on CPU as `reduce_sum` over the leading axes (a column reduction)."""
    rows = tf.reshape(values, (-1, tf.shape(values)[-1]))
    return tf.linalg.matvec(rows, tf.ones(tf.shape(rows)[:1], rows.dtype), transpose_a=True)
