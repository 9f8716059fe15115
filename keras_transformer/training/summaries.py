"""TensorBoard summaries written with core TensorFlow ops only.

`tf.summary.scalar`/`image` live in the `tensorboard` package, which viewing the logs needs
but training should not; these write the same records (scalars and PNG images, tagged for
TensorBoard's scalar and image plugins) through `tf.summary.write`.
"""
from __future__ import annotations

import tensorflow as tf
from tensorflow.core.framework import summary_pb2


def _metadata(plugin: str) -> bytes:
    metadata = summary_pb2.SummaryMetadata()
    metadata.plugin_data.plugin_name = plugin
    return metadata.SerializeToString()


def write_scalar(tag: str, value: float, step: int) -> None:
    """A scalar for TensorBoard's Scalars tab (call under `writer.as_default()`)."""
    tf.summary.write(tag, tf.constant(float(value), tf.float32), step=step,
                     metadata=_metadata("scalars"))


def write_png(tag: str, png: bytes, width: int, height: int, step: int) -> None:
    """A PNG image for TensorBoard's Images tab (the images plugin's [w, h, png] layout)."""
    tensor = tf.constant([str(width).encode(), str(height).encode(), png])
    tf.summary.write(tag, tensor, step=step, metadata=_metadata("images"))
