"""The output of every decoder."""
from typing import NamedTuple

import tensorflow as tf


class DecodeResult(NamedTuple):
    """n-best hypotheses per sentence, best first.

    ids: `[batch, n, length]` int32 without BOS; EOS (when emitted) then PAD.
    scores: `[batch, n]` float32, sum of token log-probs / `length_divisor(lengths, alpha)`;
        -inf for slots left empty.
    lengths: `[batch, n]` int32, emitted tokens including EOS.
    """

    ids: tf.Tensor
    scores: tf.Tensor
    lengths: tf.Tensor


def make_result(sequences: tf.Tensor, scores: tf.Tensor, lengths: tf.Tensor) -> DecodeResult:
    """Drops the BOS column of `sequences` `[batch, n, 1 + T]` and the columns after the
    longest hypothesis."""
    longest = tf.reduce_max(tf.concat([[0], tf.reshape(lengths, [-1])], axis=0))
    return DecodeResult(sequences[:, :, 1:longest + 1], scores, lengths)
