"""The position-wise dense projections of the model (attention's W^Q, W^K, W^V, W^O and the
feed-forward layer's two maps): `HeadsDense`, and the `linear` hook every one runs
through."""
from __future__ import annotations

import math
from collections.abc import Callable
from typing import Optional, Sequence

import keras
import tensorflow as tf
from keras import ops

from keras_transformer import compat
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


def lora_arguments(lora_rank: Optional[int], lora_alpha: Optional[float]) -> dict:
    """The `lora_rank` and `lora_alpha` keyword arguments a layer passes down to its
    `HeadsDense` projections (which then create LoRA adapters as they are built) and keeps in
    its config; {} without LoRA (`lora_rank` None or 0)."""
    return {"lora_rank": lora_rank, "lora_alpha": lora_alpha} if lora_rank else {}


@replaceable
def linear(rows: tf.Tensor, kernel: tf.Tensor, bias: Optional[tf.Tensor] = None,
           relu: bool = False) -> tf.Tensor:
    """`rows @ kernel (+ bias)`, then ReLU if `relu`, on 2-D `rows` (a hook: every
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

    Keras's LoRA and quantization API, as `keras.layers.Dense` offers it, on the kernel as the
    `[prod(in_dims), prod(out_dims)]` matrix the layer multiplies by:
    - `lora_rank=` here (the adapters created in `build`, with the other weights) or
      `enable_lora(rank)` on a built layer (Keras's idiom after `load_weights`; Keras offers no
      public way to add weights to a built layer: `compat.unlocked_state`) freezes the kernel
      and adds trainable adapters `lora_kernel_a` `[prod(in_dims), rank]` and `lora_kernel_b`
      `[rank, prod(out_dims)]` (`Transformer.merge_lora` folds them into plain kernels).
    - `quantize("int8")` (or an `int8_from_...` dtype policy) stores the kernel as int8 with a
      float scale per output column (`kernel_scale`) and multiplies int8 rows (each row
      quantized as it comes, unless the `keras.quantizers.Int8QuantizationConfig` says
      weights only) by it. Other modes raise NotImplementedError (which `Model.quantize` turns
      into a warning). The int8 product passes no gradient: it is for inference.
    `kernel` is the effective kernel in either case: the stored one dequantized, plus
    `(lora_alpha / lora_rank) lora_kernel_a @ lora_kernel_b`. `matrix()` reads it, hence the
    float `call` and the exports; an int8 layer's `call` (training-free passes and every
    decoding step alike) runs the int8 product.

    Unlike Keras's layers, saving keeps the adapters as they are (Keras saves the merged kernel
    and loads zeros into both adapters, whose gradients are then zero): a LoRA run's checkpoint
    reloads into a layer with LoRA enabled at the same rank and resumes exactly.
    """

    ACTIVATIONS = (None, "relu", *ACTIVATIONS)
    QUANTIZATION_MODES = ("int8",)

    def __init__(self, output_dims: Sequence[int], input_rank: int = 1, use_bias: bool = True,
                 activation: Optional[str] = None, lora_rank: Optional[int] = None,
                 lora_alpha: Optional[float] = None,
                 quantization_config: Optional[keras.quantizers.QuantizationConfig] = None,
                 **kwargs):
        super().__init__(**kwargs)
        if activation not in self.ACTIVATIONS:
            raise ValueError(f"activation: must be one of {self.ACTIVATIONS}, got {activation!r}")
        self.output_dims = tuple(int(dim) for dim in output_dims)
        self.input_rank = input_rank
        self.use_bias = use_bias
        self.activation = activation
        self.lora_rank = lora_rank
        self.lora_alpha = lora_alpha if lora_alpha is not None else lora_rank
        self.lora_enabled = False
        self.quantization_config = quantization_config

    def build(self, input_shape) -> None:
        kernel_shape = tuple(input_shape[-self.input_rank:]) + self.output_dims
        if self.quantization_mode is not None:
            self.quantized_build(kernel_shape, self.quantization_mode, self.quantization_config)
        else:
            self._kernel = self.add_weight(name="kernel", shape=kernel_shape,
                                           initializer="glorot_uniform")
        self.bias = (self.add_weight(name="bias", shape=self.output_dims, initializer="zeros")
                     if self.use_bias else None)
        if self.lora_rank:
            self._add_adapters(self.lora_rank, self.lora_alpha)

    @property
    def kernel(self):
        """The kernel the layer multiplies by, `in_dims + out_dims`: the weight itself, or its
        dequantized int8 values, plus the LoRA adapters' product when enabled."""
        if not self.built:
            raise AttributeError(f"{self.name}: the layer has no kernel before it is built")
        kernel = self._kernel
        if self.quantization_mode is not None:
            kernel = ops.divide(ops.cast(kernel, self.kernel_scale.dtype), self.kernel_scale)
        if self.lora_enabled:
            delta = ops.matmul(self.lora_kernel_a, self.lora_kernel_b)
            kernel = ops.add(kernel, ops.reshape(delta * (self.lora_alpha / self.lora_rank),
                                                 kernel.shape))
        return kernel

    def call(self, inputs):
        kernel, bias = self.matrix(inputs.dtype)
        return self._map_rows(inputs, lambda rows: linear(rows, kernel, bias,
                                                          relu=self.activation == "relu"))

    def matrix(self, dtype) -> tuple[tf.Tensor, Optional[tf.Tensor]]:
        """The kernel (`kernel`) as a `[prod(in_dims), prod(out_dims)]` matrix and the bias as a
        vector (None without one), in `dtype`: what `call` multiplies the flattened rows by."""
        kernel = ops.cast(ops.reshape(self.kernel, self._matrix_shape()), dtype)
        bias = None if self.bias is None else ops.cast(ops.reshape(self.bias, (-1,)), dtype)
        return kernel, bias

    def _matrix_shape(self) -> tuple[int, int]:
        """`(prod(in_dims), prod(out_dims))`."""
        return math.prod(self._kernel.shape[:self.input_rank]), math.prod(self.output_dims)

    def _map_rows(self, inputs, product: Callable[[tf.Tensor], tf.Tensor]):
        """`product` (matmul, bias, ReLU) of `inputs`' rows `[N, prod(in_dims)]`, then the
        other activations, shaped back to `[..., *out_dims]`."""
        leading = inputs.shape[:-self.input_rank]
        if None in leading[1:]:  # else the first alone is unknown: -1, no shape ops
            leading = ops.shape(inputs)[:-self.input_rank]
        else:
            leading = (-1, *leading[1:])
        outputs = product(ops.reshape(inputs, (-1, self._matrix_shape()[0])))
        if self.activation not in (None, "relu"):
            outputs = activate(outputs, self.activation)
        return ops.reshape(outputs, (*leading, *self.output_dims))

    # ---------------------------------------------------------------------------------- LoRA
    def enable_lora(self, rank: int, lora_alpha: Optional[float] = None,
                    a_initializer="he_uniform", b_initializer="zeros") -> None:
        """Freezes the kernel of this built layer and adds the trainable low-rank adapters
        `lora_kernel_a` `[prod(in_dims), rank]` and `lora_kernel_b` `[rank, prod(out_dims)]`
        (float32, initialized by `a_initializer` and `b_initializer`), whose product scaled by
        `lora_alpha / rank` the layer adds to its kernel (zero at first with
        `b_initializer="zeros"`). `rank`, the adapters' inner size, is a positive integer;
        `lora_alpha` is the scale's numerator (`rank` if None: a scale of 1). A layer given
        `lora_rank` creates them in `build` instead."""
        if not self.built:
            raise ValueError(f"{self.name}: cannot enable LoRA on a layer that is not built")
        if self.lora_enabled:
            raise ValueError(f"{self.name}: LoRA is already enabled (rank {self.lora_rank})")
        with compat.unlocked_state(self):
            self._add_adapters(rank, lora_alpha, a_initializer, b_initializer)

    def _add_adapters(self, rank: int, lora_alpha: Optional[float],
                      a_initializer="he_uniform", b_initializer="zeros") -> None:
        """`enable_lora`'s work, on a layer whose state is open to new weights (in `build`, or
        unlocked); arguments as `enable_lora`'s."""
        if self.quantization_mode is not None:
            raise ValueError(f"{self.name}: cannot enable LoRA on a {self.quantization_mode} "
                             "layer (its product passes no gradient): train the adapters "
                             "in float, merge them (Transformer.merge_lora), then quantize")
        if not isinstance(rank, int) or isinstance(rank, bool) or rank < 1:
            raise ValueError(f"rank: must be a positive integer, got {rank!r}")
        in_size, out_size = self._matrix_shape()
        self.lora_kernel_a = self.add_weight(
            name="lora_kernel_a", shape=(in_size, rank), dtype="float32",
            initializer=keras.initializers.get(a_initializer))
        self.lora_kernel_b = self.add_weight(
            name="lora_kernel_b", shape=(rank, out_size), dtype="float32",
            initializer=keras.initializers.get(b_initializer))
        self._kernel.trainable = False
        self.lora_enabled = True
        self.lora_rank = rank
        self.lora_alpha = lora_alpha if lora_alpha is not None else rank

    # -------------------------------------------------------------------------- quantization
    # Keras's hooks for quantizable layers (its guide "Writing quantization-compatible layers"):
    # `quantize` rewrites the weights and sets an `int8_from_...` dtype policy, under which
    # `Layer.__call__` runs `quantized_call`, hence `_int8_call`.
    def quantize(self, mode=None, type_check: bool = True, config=None) -> None:
        """Stores the kernel as int8 (`mode="int8"`, the one mode supported): per output
        column, `round(kernel * kernel_scale)` with `kernel_scale = 127 / max |column|` (or
        `config`'s weight quantizer), and quantizes each row of inputs at each call (or not, if
        `config` has no activation quantizer)."""
        if type_check and type(self) is not HeadsDense:
            raise NotImplementedError(f"{type(self).__name__} does not implement `quantize`")
        if not hasattr(keras.quantizers, "QuantizationConfig"):
            raise NotImplementedError(f"{self.name}: quantize needs keras.quantizers."
                                      f"QuantizationConfig, which Keras {keras.__version__} "
                                      "lacks (a newer Keras has it)")
        if mode not in self.QUANTIZATION_MODES:
            raise NotImplementedError(f"{self.name}: quantize supports the modes "
                                      f"{self.QUANTIZATION_MODES}, got mode={mode!r}")
        if self.lora_enabled:
            raise ValueError(f"{self.name}: LoRA is enabled; quantize the merged model "
                             "(Transformer.merge_lora) instead")
        quantizer = keras.quantizers.QuantizationConfig.weight_quantizer_or_default(
            config, keras.quantizers.AbsMaxQuantizer())
        kernel_shape = tuple(self._kernel.shape)
        values, scale = quantizer(ops.reshape(self._kernel, self._matrix_shape()), axis=0,
                                  to_numpy=True)
        compat.drop_variable(self, "_kernel")
        self.quantization_config = config
        self.quantized_build(kernel_shape, mode, config)
        self._kernel.assign(ops.reshape(values, kernel_shape))
        self.kernel_scale.assign(ops.reshape(scale, self.output_dims))
        if self.dtype_policy.quantization_mode is None:
            self.dtype_policy = keras.dtype_policies.get(f"{mode}_from_{self.dtype_policy.name}")

    def quantized_build(self, kernel_shape, mode, config=None) -> None:
        """Creates the `mode` ("int8") weights: `_kernel` (int8, `kernel_shape`) and
        `kernel_scale` (`out_dims`), both not trainable."""
        if mode not in self.QUANTIZATION_MODES:
            raise NotImplementedError(f"{self.name}: quantization mode {mode!r} is not one of "
                                      f"{self.QUANTIZATION_MODES}")
        self.inputs_quantizer = keras.quantizers.QuantizationConfig.activation_quantizer_or_default(
            config, keras.quantizers.AbsMaxQuantizer())
        self._kernel = self.add_weight(name="kernel", shape=kernel_shape, initializer="zeros",
                                       dtype="int8", trainable=False)
        self.kernel_scale = self.add_weight(name="kernel_scale", shape=self.output_dims,
                                            initializer="ones", trainable=False)
        self._is_quantized = True  # read by Keras's dtype-policy setter and `quantize` checks

    def _int8_call(self, inputs, training=None):
        """`call` with the int8 kernel: (int8 rows @ int8 kernel) / (row scale * column
        scale), or float rows @ int8 kernel / column scale with weights-only quantization."""
        def product(rows):
            kernel = ops.reshape(self._kernel, self._matrix_shape())
            scale = ops.reshape(self.kernel_scale, (-1,))
            if self.inputs_quantizer is not None:
                rows, row_scale = self.inputs_quantizer(rows, axis=-1)
                scale = ops.multiply(scale, row_scale)
            outputs = ops.divide(ops.cast(ops.matmul(rows, kernel), self.compute_dtype),
                                 ops.cast(scale, self.compute_dtype))
            if self.bias is not None:
                outputs = ops.add(outputs, ops.cast(ops.reshape(self.bias, (-1,)),
                                                    self.compute_dtype))
            return ops.relu(outputs) if self.activation == "relu" else outputs

        return self._map_rows(inputs, product)

    # ------------------------------------------------------------------------------- saving
    def _saved_variables(self) -> list:
        """The weights a saved file holds, in order: `kernel`, `bias` (if any), `kernel_scale`
        (if quantized), `lora_kernel_a` and `lora_kernel_b` (if LoRA is enabled)."""
        names = ["_kernel", "bias", "kernel_scale", "lora_kernel_a", "lora_kernel_b"]
        return [variable for variable in (getattr(self, name, None) for name in names)
                if variable is not None]

    def save_own_variables(self, store) -> None:
        """Writes `_saved_variables()` to `store` under "0", "1", ..."""
        for index, variable in enumerate(self._saved_variables()):
            store[str(index)] = variable

    def load_own_variables(self, store) -> None:
        """Reads `_saved_variables()` from `store`, refusing a store of another layout (with or
        without LoRA adapters, quantized or not) by name before assigning anything."""
        variables = self._saved_variables()
        if len(store.keys()) != len(variables):
            raise ValueError(
                f"layer {self.path!r}: the weights file holds {len(store.keys())} variables, "
                f"this layer has {len(variables)} ({', '.join(v.name for v in variables)}). A "
                "file saved with LoRA adapters loads into a model with LoRA enabled at the "
                "same rank (or save the merged model, Transformer.merge_lora); an int8 file "
                "into a model quantized the same way")
        for index, variable in enumerate(variables):
            variable.assign(store[str(index)])

    def get_config(self) -> dict:
        config = {**super().get_config(), "output_dims": self.output_dims,
                  "input_rank": self.input_rank, "use_bias": self.use_bias,
                  "activation": self.activation}
        if self.lora_rank:
            config.update(lora_rank=self.lora_rank, lora_alpha=self.lora_alpha)
        if self.quantization_config is not None:
            config["quantization_config"] = keras.saving.serialize_keras_object(
                self.quantization_config)
        return config

    @classmethod
    def from_config(cls, config: dict) -> "HeadsDense":
        quantization = config.get("quantization_config")
        return cls(**{**config, "quantization_config": quantization and
                      keras.saving.deserialize_keras_object(quantization)})
