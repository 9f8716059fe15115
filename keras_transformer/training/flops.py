"""Analytic matmul FLOPs of the Transformer, for throughput and MFU figures.

A multiply-add counts as 2 FLOPs. Only matrix products are counted: the attention projections,
the score and context products, the feed-forward layers and the pre-softmax projection.
Embedding lookups (gathers), softmax, layer normalization, bias adds and the loss are not.
Lengths are the real (non-padding) lengths of each sentence pair: the products a padded batch
computes on padding positions are waste, not model FLOPs.
"""
from __future__ import annotations

from collections.abc import Iterable

from keras_transformer.config import TransformerConfig


def _length_sums(source_lengths: Iterable[int],
                 target_lengths: Iterable[int]) -> tuple[int, int, int, int, int]:
    """Sums of S, S^2, T, T^2 and T*S over the pairs (every count below is linear in these)."""
    sources, targets = [int(n) for n in source_lengths], [int(n) for n in target_lengths]
    if len(sources) != len(targets):
        raise ValueError(f"source_lengths has {len(sources)} entries but target_lengths "
                         f"has {len(targets)}")
    if any(n < 0 for n in sources + targets):
        raise ValueError("lengths must be non-negative")
    return (sum(sources), sum(s * s for s in sources), sum(targets),
            sum(t * t for t in targets), sum(s * t for s, t in zip(sources, targets)))


def forward_flops(config: TransformerConfig, source_lengths: Iterable[int],
                  target_lengths: Iterable[int]) -> int:
    """Matmul FLOPs of one forward pass over sentence pairs of the given real lengths.

    With d = d_model, h heads of sizes d_k/d_v, S source and T target tokens of a pair:

    * encoder layer: Q, K, V projections ``2 S d (2 h d_k + h d_v)``, output projection
      ``2 S h d_v d``, scores ``2 h d_k S^2``, context ``2 h d_v S^2``, FFN ``4 S d d_ff``;
    * decoder layer: the same self-attention with T; cross-attention with Q and O on the
      T target tokens (``2 T d h d_k + 2 T h d_v d``), K and V on the S encoder outputs
      (``2 S d h (d_k + d_v)``), scores ``2 h d_k T S``, context ``2 h d_v T S``;
      FFN ``4 T d d_ff``;
    * output projection ``2 T d V`` with V the output vocabulary.
    """
    s, s2, t, t2, ts = _length_sums(source_lengths, target_lengths)
    d, h, dk, dv = config.d_model, config.num_heads, config.key_dim, config.value_dim
    qkv_per_token = 2 * d * h * (2 * dk + dv)
    out_per_token = 2 * h * dv * d
    ffn_per_token = 4 * d * config.d_ff
    pair_products = 2 * h * (dk + dv)  # scores + context, per (query, key) pair
    encoder_layer = (qkv_per_token + out_per_token + ffn_per_token) * s + pair_products * s2
    decoder_self = (qkv_per_token + out_per_token) * t + pair_products * t2
    decoder_cross = (2 * d * h * dk + out_per_token) * t + 2 * d * h * (dk + dv) * s \
        + pair_products * ts
    decoder_layer = decoder_self + decoder_cross + ffn_per_token * t
    output = 2 * d * config.target_vocab_size * t
    return config.encoder_depth * encoder_layer + config.decoder_depth * decoder_layer + output


def training_flops(config: TransformerConfig, source_lengths: Iterable[int],
                   target_lengths: Iterable[int]) -> int:
    """Matmul FLOPs of a training step: forward plus a backward pass of twice its cost
    (gradients with respect to activations and to weights), the usual 3x convention."""
    return 3 * forward_flops(config, source_lengths, target_lengths)
