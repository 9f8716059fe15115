"""A reduction that TensorFlow's CPU kernels compute faster in another form (used by the fast
kernels' written-out gradients)."""
import tensorflow as tf


def sum_of_rows(values: tf.Tensor) -> tf.Tensor:
    """Sum over all but the last axis, as a matrix-vector product: two to three times as fast
    on CPU as `reduce_sum` over the leading axes (a column reduction)."""
    rows = tf.reshape(values, (-1, tf.shape(values)[-1]))
    return tf.linalg.matvec(rows, tf.ones(tf.shape(rows)[:1], rows.dtype), transpose_a=True)
