"""Keras layers of the Transformer, each serializable with `get_config`."""
from keras_transformer.layers.attention import MultiHeadAttention, scaled_dot_product_attention
from keras_transformer.layers.dense import HeadsDense
from keras_transformer.layers.embedding import (LearnedPositionalEmbedding, ScaledEmbedding,
                                                SinusoidalPositionalEncoding)
from keras_transformer.layers.encoder_decoder import DecoderLayer, EncoderLayer
from keras_transformer.layers.feed_forward import PositionwiseFeedForward
from keras_transformer.layers.residual import HookDropout, LayerNorm, ResidualNorm

__all__ = ["DecoderLayer", "EncoderLayer", "HeadsDense", "HookDropout", "LayerNorm",
           "LearnedPositionalEmbedding", "MultiHeadAttention", "PositionwiseFeedForward",
           "ResidualNorm", "ScaledEmbedding", "SinusoidalPositionalEncoding",
           "scaled_dot_product_attention"]
