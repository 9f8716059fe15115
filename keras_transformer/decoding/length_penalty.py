"""GNMT length penalty (Wu et al., 2016), used by the paper's beam search (section 6.1)."""
import tensorflow as tf


def length_divisor(length, alpha: float) -> tf.Tensor:
    """((5 + length) / 6) ** alpha; a hypothesis' score is its log-probability divided by this."""
    length = tf.cast(length, tf.float32)
    return tf.pow((5.0 + length) / 6.0, tf.cast(alpha, tf.float32))
