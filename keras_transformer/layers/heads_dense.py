"""A dense layer between per-head and model-width tensors, computed as one 2-D matmul."""
from __future__ import annotations

import math
from typing import Optional, Sequence

import keras
import tensorflow as tf
from keras import ops

ACTIVATIONS = (None, "relu")


@keras.saving.register_keras_serializable(package="keras_transformer")
class HeadsDense(keras.layers.Layer):
    """`[..., *in_dims] -> [..., *out_dims]`: contracts the last `input_rank` axes with a kernel
    of shape `in_dims + out_dims`, adds a bias of shape `out_dims` (unless `use_bias=False`) and
    applies `activation` (None or "relu").

    E.g. the query projection maps `[batch, len, d_model]` to `[batch, len, heads, d_k]`
    (`input_rank=1`, `output_dims=(heads, d_k)`) and W^O maps `[batch, len, heads, d_v]` back
    (`input_rank=2`, `output_dims=(d_model,)`). The leading axes are flattened into the rows of a
    single matmul: an einsum with a batch axis would broadcast the kernel over the batch and
    make its gradient a batched matmul followed by a sum over the batch.
    """

    def __init__(self, output_dims: Sequence[int], input_rank: int = 1, use_bias: bool = True,
                 activation: Optional[str] = None, **kwargs):
        super().__init__(**kwargs)
        if activation not in ACTIVATIONS:
            raise ValueError(f"activation: must be one of {ACTIVATIONS}, got {activation!r}")
        self.output_dims = tuple(int(dim) for dim in output_dims)
        self.input_rank = input_rank
        self.use_bias = use_bias
        self.activation = activation

    def build(self, input_shape) -> None:
        input_dims = tuple(input_shape[-self.input_rank:])
        self.kernel = self.add_weight(name="kernel", shape=input_dims + self.output_dims,
                                      initializer="glorot_uniform")
        self.bias = (self.add_weight(name="bias", shape=self.output_dims, initializer="zeros")
                     if self.use_bias else None)

    def call(self, inputs):
        in_size = math.prod(self.kernel.shape[:self.input_rank])
        out_size = math.prod(self.output_dims)
        leading = ops.shape(inputs)[:-self.input_rank]
        rows = ops.reshape(inputs, (-1, in_size))
        kernel = ops.cast(ops.reshape(self.kernel, (in_size, out_size)), rows.dtype)
        bias = None if self.bias is None else ops.cast(ops.reshape(self.bias, (-1,)), rows.dtype)
        outputs = linear(rows, kernel, bias, relu=self.activation == "relu")
        return ops.reshape(outputs, (*leading, *self.output_dims))

    def get_config(self) -> dict:
        return {**super().get_config(), "output_dims": self.output_dims,
                "input_rank": self.input_rank, "use_bias": self.use_bias,
                "activation": self.activation}


def linear(rows: tf.Tensor, kernel: tf.Tensor, bias: Optional[tf.Tensor] = None,
           relu: bool = False) -> tf.Tensor:
    """`rows @ kernel (+ bias)`, then ReLU if `relu`, on 2-D `rows`: the ops TensorFlow fuses
    into one matmul kernel. In float32 the gradient is written out with `input_gradient` and
    `kernel_gradient`; other dtypes keep autodiff's (bfloat16 steps ran 3% slower written out)."""
    if rows.dtype != tf.float32:
        return _linear_forward(rows, kernel, bias, relu)

    @tf.custom_gradient
    def forward(rows, kernel, *bias_):
        outputs = _linear_forward(rows, kernel, *bias_, relu=relu)

        def gradient(upstream):
            if relu:
                upstream = tf.raw_ops.ReluGrad(gradients=upstream, features=outputs)
            d_bias = (tf.raw_ops.BiasAddGrad(out_backprop=upstream),) if bias_ else ()
            return (input_gradient(upstream, kernel), kernel_gradient(rows, upstream), *d_bias)

        return outputs, gradient

    return forward(rows, kernel, *(() if bias is None else (bias,)))


def _linear_forward(rows, kernel, bias=None, relu=False):
    outputs = tf.matmul(rows, kernel)
    if bias is not None:
        outputs = tf.nn.bias_add(outputs, bias)
    return tf.nn.relu(outputs) if relu else outputs


# In float32, oneDNN's CPU matmul runs a product with a transposed right operand, or with an
# output of fewer columns than rows over a long contraction, 1.1-1.3x slower than the same product
# in the other layout (measured at `base` shapes, RESULTS.md session 8); the gradients below pick
# the faster layout. In bfloat16 both layouts run alike: autodiff's are kept.

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
