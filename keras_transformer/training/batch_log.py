"""An audit of what a run trains on: `batches.tsv` in the run directory, one line per training
batch, `step<TAB>digest` (the global step that consumes it, from 1, and the first 16 hex digits
of the SHA-1 of its id tensors), appended as the input pipeline produces the batches (a few
ahead of training; Keras also reads a batch or two of a separate pass first, to build the
model, which appear as earlier lines). A resumed run appends the steps after its backup again,
so the last line of each step is the batch that step trained on; with several replicas on a
worker, the last lines of a step are its replicas' batches in replica order."""
from __future__ import annotations

import hashlib
import os

import numpy as np
import tensorflow as tf


def log_batches(batches: tf.data.Dataset, path: str | os.PathLike, first_step: int,
                per_step: int = 1) -> tf.data.Dataset:
    """`batches` unchanged, each element's step (from `first_step`, `per_step` elements a
    step: one per local replica) and digest appended to `path` as it is produced."""
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

    return batches.enumerate().map(lambda index, batch: tap(first_step + index // per_step,
                                                            batch))


def read_batch_log(path: str | os.PathLike, per_step: int = 1) -> dict[int, list[str]]:
    """Step -> digests of the batches that step trained on, `per_step` of them (one per local
    replica; the last lines of each step win)."""
    steps: dict[int, list[str]] = {}
    with open(path, encoding="utf-8") as log:
        for line in log:
            step, digest = line.split()
            steps[int(step)] = (steps.get(int(step), []) + [digest])[-per_step:]
    return steps
