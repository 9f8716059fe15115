"""The position-wise dense projections of the model (attention's W^Q, W^K, W^V, W^O and the
feed-forward layer's two maps): `HeadsDense`, and the `linear` kernel hook every one runs
through."""
from __future__ import annotations

import math
from typing import Optional, Sequence

import keras
import tensorflow as tf
from keras import ops

from keras_transformer.hooks import replaceable


ACTIVATIONS = ("swish", "gelu", "gelu_sigmoid")


def activate(x: tf.Tensor, activation: str) -> tf.Tensor:
    """A feed-forward activation other than ReLU: `swish` x sigmoid(x), `gelu` x Phi(x) (the
    exact form), `gelu_sigmoid` x sigmoid(1.702 x) (Marian's approximation)."""
    if activation == "swish":
        return tf.nn.silu(x)
    if activation == "gelu":
        return tf.nn.gelu(x, approximate=False)
    if activation == "gelu_sigmoid":
        return x * tf.sigmoid(tf.cast(1.702, x.dtype) * x)
    raise ValueError(f"activation: must be one of {ACTIVATIONS}, got {activation!r}")


@replaceable
def linear(rows: tf.Tensor, kernel: tf.Tensor, bias: Optional[tf.Tensor] = None,
           relu: bool = False) -> tf.Tensor:
    """`rows @ kernel (+ bias)`, then ReLU if `relu`, on 2-D `rows` (a kernel hook: every
    position-wise projection of the model runs through it)."""
    outputs = tf.matmul(rows, kernel)
    if bias is not None:
        outputs = tf.nn.bias_add(outputs, bias)
    return tf.nn.relu(outputs) if relu else outputs


@keras.saving.register_keras_serializable(package="keras_transformer")
class HeadsDense(keras.layers.Layer):
    """`[..., *in_dims] -> [..., *out_dims]`: contracts the last `input_rank` axes with a kernel
    of shape `in_dims + out_dims`, adds a bias of shape `out_dims` (unless `use_bias=False`) and
    applies `activation` (None, "relu" (fused into the `linear` hook) or one of `activate`'s).

    E.g. the query projection maps `[batch, len, d_model]` to `[batch, len, heads, d_k]`
    (`input_rank=1`, `output_dims=(heads, d_k)`) and W^O maps `[batch, len, heads, d_v]` back
    (`input_rank=2`, `output_dims=(d_model,)`). The leading axes are flattened into the rows of a
    single matmul: an einsum with a batch axis would broadcast the kernel over the batch and
    make its gradient a batched matmul followed by a sum over the batch.
    """

    ACTIVATIONS = (None, "relu", *ACTIVATIONS)

    def __init__(self, output_dims: Sequence[int], input_rank: int = 1, use_bias: bool = True,
                 activation: Optional[str] = None, **kwargs):
        super().__init__(**kwargs)
        if activation not in self.ACTIVATIONS:
            raise ValueError(f"activation: must be one of {self.ACTIVATIONS}, got {activation!r}")
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
        kernel, bias = self.matrix(inputs.dtype)
        leading = ops.shape(inputs)[:-self.input_rank]
        rows = ops.reshape(inputs, (-1, kernel.shape[0]))
        outputs = linear(rows, kernel, bias, relu=self.activation == "relu")
        if self.activation not in (None, "relu"):
            outputs = activate(outputs, self.activation)
        return ops.reshape(outputs, (*leading, *self.output_dims))

    def matrix(self, dtype) -> tuple[tf.Tensor, Optional[tf.Tensor]]:
        """The kernel as a `[prod(in_dims), prod(out_dims)]` matrix and the bias as a vector
        (None without one), in `dtype`: what `call` multiplies the flattened rows by."""
        in_size = math.prod(self.kernel.shape[:self.input_rank])
        kernel = ops.cast(ops.reshape(self.kernel, (in_size, math.prod(self.output_dims))), dtype)
        bias = None if self.bias is None else ops.cast(ops.reshape(self.bias, (-1,)), dtype)
        return kernel, bias

    def get_config(self) -> dict:
        return {**super().get_config(), "output_dims": self.output_dims,
                "input_rank": self.input_rank, "use_bias": self.use_bias,
                "activation": self.activation}
