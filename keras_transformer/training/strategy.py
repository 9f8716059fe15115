"""Picks the `tf.distribute` strategy for a run (section 5.2: one machine, 8 GPUs).

Call `configure_cpu_replicas` before TensorFlow touches a device; `make_strategy` afterwards.
"""
from __future__ import annotations

import json
import os

import keras
import tensorflow as tf


def configure_cpu_replicas(count: int) -> None:
    """Splits the CPU into `count` logical devices so the mirrored path runs without GPUs."""
    if count < 1:
        raise ValueError(f"--cpu-replicas: must be at least 1, got {count}")
    cpus = tf.config.list_physical_devices("CPU")
    try:
        tf.config.set_logical_device_configuration(
            cpus[0], [tf.config.LogicalDeviceConfiguration() for _ in range(count)])
    except RuntimeError as error:
        raise RuntimeError("--cpu-replicas: TensorFlow was initialized before the logical "
                           f"devices could be configured ({error})") from None


def make_strategy(cpu_replicas: int = 0) -> tf.distribute.Strategy:
    """MultiWorkerMirroredStrategy under `TF_CONFIG`; else MirroredStrategy over the GPUs,
    or over `cpu_replicas` logical CPUs (when > 0); else the default one-device strategy."""
    if os.environ.get("TF_CONFIG"):
        _check_tf_config(os.environ["TF_CONFIG"])
        return tf.distribute.MultiWorkerMirroredStrategy()
    if cpu_replicas > 0:
        configure_cpu_replicas(cpu_replicas)
        devices = [device.name for device in tf.config.list_logical_devices("CPU")]
        return tf.distribute.MirroredStrategy(
            devices, cross_device_ops=tf.distribute.ReductionToOneDevice())
    gpus = tf.config.list_logical_devices("GPU")
    if gpus:
        return tf.distribute.MirroredStrategy([device.name for device in gpus])
    return tf.distribute.get_strategy()


def _check_tf_config(text: str) -> None:
    try:
        config = json.loads(text)
    except json.JSONDecodeError as error:
        raise ValueError(f"TF_CONFIG: not valid JSON ({error})") from None
    if "cluster" not in config or "task" not in config:
        raise ValueError("TF_CONFIG: needs 'cluster' and 'task' entries")


def worker_count(strategy: tf.distribute.Strategy) -> int:
    """How many workers train together (1 outside a multi-worker cluster)."""
    resolver = getattr(strategy, "cluster_resolver", None)
    if resolver is None or not resolver.cluster_spec().as_dict():
        return 1
    return resolver.cluster_spec().num_tasks("worker")


def is_chief(strategy: tf.distribute.Strategy) -> bool:
    """Whether this process is the cluster's chief (its "chief" task, else worker 0); True
    outside a multi-worker cluster."""
    resolver = getattr(strategy, "cluster_resolver", None)
    if worker_count(strategy) == 1 or resolver is None:
        return True
    if "chief" in resolver.cluster_spec().as_dict():
        return resolver.task_type == "chief"
    return resolver.task_type == "worker" and resolver.task_id == 0


def chief_values(strategy: tf.distribute.Strategy, values: list[int]) -> list[int]:
    """The chief's `values` on every worker (a collective: every worker must call it, with as
    many values); `values` themselves outside a cluster."""
    if worker_count(strategy) == 1:
        return list(values)
    row = [int(is_chief(strategy)), *values]
    rows = strategy.gather(strategy.experimental_distribute_values_from_function(
        lambda context: tf.constant([row], tf.int64)), axis=0).numpy()  # a row per replica
    return [int(value) for value in rows[int(rows[:, 0].argmax()), 1:]]


def smallest_across_workers(strategy: tf.distribute.Strategy, value: int) -> int:
    """The smallest of every worker's `value` (a collective: every worker must call it)."""
    if worker_count(strategy) == 1:
        return value
    values = strategy.experimental_distribute_values_from_function(
        lambda context: tf.constant([value], tf.int64))
    return int(tf.reduce_min(strategy.gather(values, axis=0)).numpy())


def any_across_workers(strategy: tf.distribute.Strategy, flag: bool) -> bool:
    """Whether any worker's `flag` is set (a collective: every worker must call it)."""
    return smallest_across_workers(strategy, 0 if flag else 1) == 0


def local_sum(strategy: tf.distribute.Strategy, variable: keras.Variable) -> float:
    """The sum of a summed metric variable over this process's replicas, read without talking
    to other workers: reading it whole all-reduces across the cluster, a collective every worker
    must issue in the same order, so what reads on its own clock (progress lines) reads this."""
    return float(sum(part.numpy().sum() for part in
                     strategy.experimental_local_results(variable.value)))
