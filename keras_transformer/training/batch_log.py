"""An audit of what a run trains on: `batches.tsv` in the run directory, one line per training
batch, `step<TAB>digest` (the global step that consumes it, from 1, and the first 16 hex digits
of the SHA-1 of its id tensors), appended as the input pipeline produces the batches (a few
ahead of training). A resumed run appends the steps after its backup again, so the last line
of each step is the batch that step trained on."""
from __future__ import annotations

import hashlib
import os

import numpy as np
import tensorflow as tf


def log_batches(batches: tf.data.Dataset, path: str | os.PathLike,
                first_step: int) -> tf.data.Dataset:
    """`batches` unchanged, each element's step (from `first_step`) and digest appended to
    `path` as it is produced."""
    path = os.fspath(path)

    def write(step: tf.Tensor, *tensors: tf.Tensor) -> np.int64:
        digest = hashlib.sha1()
        for tensor in tensors:
            digest.update(np.ascontiguousarray(tensor.numpy()).tobytes())
        with open(path, "a", encoding="utf-8") as log:
            log.write(f"{int(step)}\t{digest.hexdigest()[:16]}\n")
        return np.int64(step)

    def tap(step: tf.Tensor, batch):
        written = tf.py_function(write, [step, *tf.nest.flatten(batch)], Tout=tf.int64)
        with tf.control_dependencies([written]):
            return tf.nest.map_structure(tf.identity, batch)

    return batches.enumerate(start=first_step).map(tap)


def read_batch_log(path: str | os.PathLike) -> dict[int, str]:
    """Step -> digest of the batch that step trained on (the last line of each step wins)."""
    steps: dict[int, str] = {}
    with open(path, encoding="utf-8") as log:
        for line in log:
            step, digest = line.split()
            steps[int(step)] = digest
    return steps
