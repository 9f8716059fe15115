"""Keras layers of the Transformer, each serializable with `get_config`."""
from keras_transformer.layers.attention import MultiHeadAttention
from keras_transformer.layers.decoder_layer import DecoderLayer
from keras_transformer.layers.dropout import Dropout
from keras_transformer.layers.embedding import ScaledEmbedding
from keras_transformer.layers.encoder_layer import EncoderLayer
from keras_transformer.layers.feed_forward import PositionwiseFeedForward
from keras_transformer.layers.heads_dense import HeadsDense
from keras_transformer.layers.layer_norm import LayerNormalization
from keras_transformer.layers.positional import (LearnedPositionalEmbedding,
                                                 SinusoidalPositionalEncoding)
from keras_transformer.layers.residual import ResidualNorm

__all__ = ["DecoderLayer", "Dropout", "EncoderLayer", "HeadsDense", "LayerNormalization",
           "LearnedPositionalEmbedding", "MultiHeadAttention", "PositionwiseFeedForward",
           "ResidualNorm", "ScaledEmbedding", "SinusoidalPositionalEncoding"]
