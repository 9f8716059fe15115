"""The residual wrapper around every sub-layer (section 3.1: post-norm as in the paper, or
pre-norm), with its layer normalization and dropout."""
from __future__ import annotations

import keras
import tensorflow as tf

from keras_transformer.config import renamed
from keras_transformer.hooks import replaceable


@replaceable
def layer_norm(x: tf.Tensor, gamma: tf.Tensor, beta: tf.Tensor, epsilon: float) -> tf.Tensor:
    """`(x - mean) / sqrt(var + epsilon) * gamma + beta` over the last axis, in float32, returned
    in `x`'s dtype (a hook), as `keras.layers.LayerNormalization` computes it."""
    dtype = x.dtype
    x = tf.cast(x, tf.float32)
    mean, variance = tf.nn.moments(x, axes=[-1], keepdims=True)
    normalized = (x - mean) * tf.math.rsqrt(variance + epsilon)
    return tf.cast(normalized * tf.cast(gamma, tf.float32) + tf.cast(beta, tf.float32), dtype)


@replaceable
def dropout(inputs: tf.Tensor, rate: float, seed: tf.Tensor) -> tf.Tensor:
    """Training-time dropout of `inputs` at `rate` > 0 with the int32 `[2]` stateless `seed`
    (`replica_seed`), as `keras.layers.Dropout` runs it (a hook)."""
    return tf.nn.experimental.stateless_dropout(inputs, rate, seed=seed)


def replica_seed(seed_generator: keras.random.SeedGenerator) -> tf.Tensor:
    """The next seed of `seed_generator` as the int32 `[2]` seed stateless random ops take,
    different on every replica of a `tf.distribute` strategy (and every worker).

    The generator's state is one variable, mirrored: alone, every replica would draw the same
    seed and so the same dropout mask. Replica `r > 0` folds its global id in
    (`stateless_fold_in`); replica 0, and a run without a strategy, draw what Keras's own
    dropout draws from the same generator, so a one-device run's masks do not change.
    """
    state = seed_generator.next()
    seed = tf.cast(tf.math.floormod(state, tf.int32.max - 1), tf.int32)  # Keras's rule
    replica = tf.distribute.get_replica_context()
    if replica is None or replica.num_replicas_in_sync == 1:
        return seed
    replica_id = tf.cast(replica.replica_id_in_sync_group, tf.int32)
    folded = tf.random.experimental.stateless_fold_in(seed, replica_id)
    return tf.where(tf.equal(replica_id, 0), seed, tf.cast(folded, tf.int32))


@keras.saving.register_keras_serializable(package="keras_transformer")
class LayerNorm(keras.layers.LayerNormalization):
    """`keras.layers.LayerNormalization` (same arguments, weights and values) whose usual form,
    over the last axis, centered and scaled, runs the `layer_norm` hook."""

    def call(self, inputs):
        if self.axis != [-1] or not (self.center and self.scale) or self.rms_scaling:
            return super().call(inputs)
        return layer_norm(inputs, self.gamma, self.beta, self.epsilon)


@keras.saving.register_keras_serializable(package="keras_transformer")
class HookDropout(keras.layers.Dropout):
    """`keras.layers.Dropout` (same arguments, seeding and inference behaviour) whose training
    masks come from the `dropout` hook, seeded apart on each replica (`replica_seed`). With
    `noise_shape` Keras's own implementation runs (one mask for all replicas)."""

    def call(self, inputs, training=False):
        if not training or self.rate == 0 or self.noise_shape is not None:
            return super().call(inputs, training=training)
        return dropout(inputs, self.rate, replica_seed(self.seed_generator))


@keras.saving.register_keras_serializable(package="keras_transformer")
class ResidualNorm(keras.layers.Layer):
    """Post-norm: `LayerNorm(x + Dropout(f(x)))` (section 5.4). Pre-norm:
    `x + Dropout(f(LayerNorm(x)))`.

    `normalize_input(x)` is the sub-layer's input, `call(x, f_output)` the block's output.
    """

    def __init__(self, norm: str = "post", dropout: float = 0.0,
                 layer_norm_epsilon: float = 1e-6,
                 **kwargs):
        super().__init__(**kwargs)
        self.norm = norm
        self.dropout = dropout
        self.layer_norm_epsilon = layer_norm_epsilon
        self.layer_norm = LayerNorm(epsilon=layer_norm_epsilon, name="layer_norm")
        self.dropout_layer = HookDropout(dropout)

    def build(self, input_shape) -> None:
        self.layer_norm.build(input_shape)

    def normalize_input(self, x):
        return self.layer_norm(x) if self.norm == "pre" else x

    def call(self, x, sublayer_output, training=None):
        summed = x + self.dropout_layer(sublayer_output, training=training)
        return self.layer_norm(summed) if self.norm == "post" else summed

    def get_config(self) -> dict:
        return {**super().get_config(), "norm": self.norm, "dropout": self.dropout,
                "layer_norm_epsilon": self.layer_norm_epsilon}

    @classmethod
    def from_config(cls, config: dict) -> "ResidualNorm":
        return cls(**renamed(config, {"epsilon": "layer_norm_epsilon"}))
