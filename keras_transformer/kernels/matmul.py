"""`rows @ kernel (+ bias)` then optionally ReLU, on 2-D rows: the position-wise projections."""
from __future__ import annotations

from typing import Optional

import tensorflow as tf


def reference(rows: tf.Tensor, kernel: tf.Tensor, bias: Optional[tf.Tensor] = None,
              relu: bool = False) -> tf.Tensor:
    """The ops TensorFlow fuses into one matmul kernel, differentiated by autodiff."""
    outputs = tf.matmul(rows, kernel)
    if bias is not None:
        outputs = tf.nn.bias_add(outputs, bias)
    return tf.nn.relu(outputs) if relu else outputs


def fast(rows: tf.Tensor, kernel: tf.Tensor, bias: Optional[tf.Tensor] = None,
         relu: bool = False) -> tf.Tensor:
    """`reference`, with the float32 gradient products in oneDNN's faster layouts
    (`input_gradient`, `kernel_gradient`); other dtypes keep autodiff's (bfloat16 steps ran 3%
    slower written out)."""
    if rows.dtype != tf.float32:
        return reference(rows, kernel, bias, relu)

    @tf.custom_gradient
    def forward(rows, kernel, *bias_):
        outputs = reference(rows, kernel, *bias_, relu=relu)

        def gradient(upstream):
            if relu:
                upstream = tf.raw_ops.ReluGrad(gradients=upstream, features=outputs)
            d_bias = (tf.raw_ops.BiasAddGrad(out_backprop=upstream),) if bias_ else ()
            return (input_gradient(upstream, kernel), kernel_gradient(rows, upstream), *d_bias)

        return outputs, gradient

    return forward(rows, kernel, *(() if bias is None else (bias,)))


# In float32, oneDNN's CPU matmul runs a product with a transposed right operand, or with an
# output of fewer columns than rows over a long contraction, 1.1-1.3x slower than the same product
# in the other layout (measured at `base` shapes, benchmarks/RESULTS.md); the gradients below
# pick the faster layout. In bfloat16 both layouts run alike.

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
