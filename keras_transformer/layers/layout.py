"""Token layouts: the form in which the layers hold a batch's per-token tensors.

The position-wise computations (embeddings, projections, feed-forward, residual, layer norm,
dropout) work on tokens; attention's batched matmuls need them padded and heads first,
`[batch, heads, len, dim]`. A layout moves tensors between the two. `PADDED`, the layers'
default, keeps tokens `[batch, len, ...]`: its moves are transposes. A faster layout is passed
into the same layers (`fast.packed.TokenLayout` packs the real tokens alone), the way a decoding
step passes its cache.
"""
from __future__ import annotations

from typing import Optional, Protocol

import tensorflow as tf


class Layout(Protocol):
    """What the layers ask of a layout."""

    @property
    def token_positions(self) -> Optional[tf.Tensor]:
        """Each token's position in its sentence; None: the second axis is the position."""

    def pack(self, padded: tf.Tensor) -> tf.Tensor:
        """`[batch, len, ...]` (ids, say) -> the layout's tokens."""

    def unpack(self, tokens: tf.Tensor) -> tf.Tensor:
        """The layout's tokens -> `[batch, len, ...]`, zeros at padding."""

    def expand_heads(self, tokens: tf.Tensor) -> tf.Tensor:
        """The layout's tokens `[..., heads, dim]` -> `[batch, heads, len, dim]`."""

    def pack_heads(self, padded: tf.Tensor) -> tf.Tensor:
        """`[batch, heads, len, dim]` -> the layout's tokens `[..., heads, dim]`."""


class PaddedLayout:
    """Tokens stay `[batch, len, ...]`: every move is the identity or a transpose."""

    token_positions = None  # positions are the second axis

    def pack(self, padded: tf.Tensor) -> tf.Tensor:
        return padded

    def unpack(self, tokens: tf.Tensor) -> tf.Tensor:
        return tokens

    def expand_heads(self, tokens: tf.Tensor) -> tf.Tensor:
        """`[batch, len, heads, dim]` -> `[batch, heads, len, dim]`."""
        return tf.transpose(tokens, [0, 2, 1, 3])

    def pack_heads(self, padded: tf.Tensor) -> tf.Tensor:
        """`[batch, heads, len, dim]` -> `[batch, len, heads, dim]`."""
        return tf.transpose(padded, [0, 2, 1, 3])


PADDED = PaddedLayout()
