"""The batches a run trains on: one stream of per-replica batches, the same whatever the
layout of replicas, so that a run on 2 workers trains on what one process with 2 replicas
does, and a resumed run continues the stream where its restored step left it.

Step `s` (from 1) of a run with `R` replicas in sync trains replica `r` (numbered worker by
worker, then within a worker) on element `(s - 1) * R + r` of the stream (from 0). Each
replica's batch is a whole element, never a slice of a bigger one, so the token budget is per
replica (`per_replica_tokens`).
"""
from __future__ import annotations

import os
from typing import Callable, Optional

import tensorflow as tf

from keras_transformer.training.batch_log import log_batches


def per_replica_tokens(batch_tokens: int, replicas: int) -> int:
    """The budget of one replica's batch: the recipe's `batch_tokens` is a step's, over all
    replicas."""
    return max(1, batch_tokens // replicas)


def training_batches(strategy: tf.distribute.Strategy,
                     stream: Callable[[int, Optional[Callable[[int], bool]]], tf.data.Dataset],
                     restored_step: int, log_path: Optional[str | os.PathLike] = None):
    """What `fit` takes: the elements of `stream` from those of step `restored_step + 1` on
    (`restored_step`: the step the run resumes after, 0 for a new run); with several replicas of
    `strategy`, the run's distribution strategy, a distributed dataset in which each worker reads
    only its replicas' elements and each replica gets its own.

    `stream(first, wanted)` is the endless dataset of per-replica batches from element `first` on,
    holding the elements `wanted` accepts (None: all), e.g. `BatchPlan.dataset`. The elements'
    digests are logged to `log_path` (`batch_log`, numbered by the step that trains them).
    """
    replicas = strategy.num_replicas_in_sync
    if replicas == 1:
        batches = stream(restored_step, None)
        return batches if log_path is None else log_batches(batches, log_path,
                                                           restored_step + 1)

    def worker_batches(context: tf.distribute.InputContext) -> tf.data.Dataset:
        local = context.num_replicas_in_sync // context.num_input_pipelines
        worker = context.input_pipeline_id
        mine = stream(restored_step * replicas,
                      lambda element: element % replicas // local == worker)
        return mine if log_path is None else log_batches(mine, log_path, restored_step + 1,
                                                         per_step=local)

    return strategy.distribute_datasets_from_function(worker_batches)
