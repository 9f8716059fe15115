"""Every use of a private Keras or TensorFlow API, in one place: the fast subpackage's (its
training steps, multi-worker `fit`) and the core's four (`unlocked_state`, for LoRA adapters
added to a built layer; `drop_variable`, for the float kernel `quantize` replaces;
`save_in_row_blocks`, for a large embedding written to a weights file;
`write_first_axis_block`, for a search's cache written in XLA and LiteRT); no other
module of the package uses any (tests/project/test_architecture.py).

Each was checked on the versions in `CHECKED_ON` (the ends of setup.py's declared range, both
tested in CI). Where a newer release lacks one, the caller gets a `CompatibilityError` naming
those versions, or falls back to a public path where one exists (said at each function).
"""
from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence

import keras
import numpy as np
import tensorflow as tf

CHECKED_ON = "TensorFlow 2.20-2.21 with Keras 3.10-3.15"


class CompatibilityError(RuntimeError):
    """A private API this package relies on is missing from the installed Keras/TensorFlow."""


def private_attribute(owner, name: str):
    """`owner.name`, or a `CompatibilityError` naming the versions it was checked on."""
    try:
        return getattr(owner, name)
    except AttributeError:
        raise CompatibilityError(
            f"{type(owner).__name__ if not isinstance(owner, type) else owner.__name__}.{name} "
            f"is missing from Keras {keras.__version__} / TensorFlow {tf.__version__}; "
            f"keras-transformer was checked on {CHECKED_ON}") from None


@contextlib.contextmanager
def unlocked_state(layer: keras.layers.Layer) -> Iterator[None]:
    """Lets the built `layer` create weights (`HeadsDense.enable_lora`). Keras locks a layer's
    state once it is built and offers no public way to add to it afterwards; its own
    `Dense.enable_lora` unlocks the layer's (private) tracker the same way. A layer that
    creates its weights in `build` needs none of this."""
    tracker = private_attribute(layer, "_tracker")
    locked = tracker.locked
    tracker.unlock()
    try:
        yield
    finally:
        if locked:
            tracker.lock()


def drop_variable(layer: keras.layers.Layer, name: str) -> None:
    """Removes the variable `layer.<name>` from `layer` and from its tracked weights, as
    `del layer.<name>` does, without the full garbage collection Keras's `Layer.__delattr__`
    runs after each variable it drops (`HeadsDense.quantize` drops its float kernel: a base
    model's 96 projections spent 97% of `quantize` in those collections). Keras's own
    `__delattr__` untracks through the same private method."""
    variable = getattr(layer, name)
    private_attribute(layer, "_untrack_variable")(variable)
    super(keras.layers.Layer, layer).__delattr__(name)


def save_in_row_blocks(store, variables: Sequence[keras.Variable], rows_bytes: int) -> None:
    """A layer's `save_own_variables`: `store[str(index)] = variable` for each of
    `variables`, except that in Keras's `.weights.h5` store (`H5IOStore`, private) a float32
    variable larger than `rows_bytes` is written a block of rows at a time: Keras converts a
    variable whole (`np.array`: a copy beside it, 1 GB more for NLLB-200's embedding, twice
    that for a variable TensorFlow reads in copy-on-read mode, as one assigned in blocks is);
    here its dataset is created in the store's group and filled from `tf.gather`s of row
    ranges. Any other store (a sharded one, the `.npz` one), or a Keras without these
    attributes, takes each variable whole (the public path); the file reads back the same."""
    from keras.src.saving import saving_lib

    in_blocks = type(store) is saving_lib.H5IOStore and all(
        hasattr(store, name) for name in ("_h5_entry_initialized", "_create_h5_group",
                                          "_h5_entry_path"))
    for index, variable in enumerate(variables):
        shape = tuple(variable.shape)
        row_bytes = 4 * int(np.prod(shape[1:]))
        if (not in_blocks or not shape or variable.dtype != "float32"
                or row_bytes * shape[0] <= rows_bytes):
            store[f"{index}"] = variable
            continue
        if not store._h5_entry_initialized:
            store._create_h5_group(store._h5_entry_path)
        dataset = store._h5_entry_group.create_dataset(f"{index}", shape, dtype="float32")
        step = max(1, rows_bytes // row_bytes)
        for start in range(0, shape[0], step):
            rows = tf.range(start, min(start + step, shape[0]))
            dataset[start:start + step] = tf.gather(variable.value, rows).numpy()


def in_xla_context() -> bool:
    """Whether the graph being built is compiled by XLA (`jit_compile=True`) or sits inside
    such a graph. TensorFlow's `control_flow_util` is private; without it, True (callers then
    take the ops that run under XLA and everywhere else)."""
    try:
        from tensorflow.python.framework import ops as tf_ops
        from tensorflow.python.ops import control_flow_util
    except ImportError:
        return True
    return control_flow_util.GraphOrParentsInXlaContext(tf_ops.get_default_graph())


def write_first_axis_block(buffer: tf.Tensor, block: tf.Tensor, index: tf.Tensor) -> tf.Tensor:
    """`buffer` with `block` (its shape but 1 on the first axis) written at `index` (scalar int32)
    of the first axis: XLA's DynamicUpdateSlice (`gen_xla_ops`, private), which XLA runs in place
    and the LiteRT converter takes as its builtin DYNAMIC_UPDATE_SLICE (one copy of the buffer at
    most, where a scatter costs the LiteRT interpreter several passes over it); without it, the
    public scatter (the same values)."""
    try:
        from tensorflow.compiler.tf2xla.ops import gen_xla_ops
    except ImportError:
        return tf.tensor_scatter_nd_update(buffer, tf.reshape(index, [1, 1]), block)
    start = tf.concat([tf.reshape(index, [1]), tf.zeros([len(buffer.shape) - 1], tf.int32)], 0)
    return gen_xla_ops.xla_dynamic_update_slice(buffer, block, start)


def in_multi_worker_mode(strategy: tf.distribute.Strategy) -> bool:
    """Whether `strategy` is a `MultiWorkerMirroredStrategy` spanning several workers."""
    if not isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy):
        return False
    return private_attribute(strategy.extended, "_in_multi_worker_mode")()


def adam_moments(optimizer: keras.optimizers.Adam,
                 variable: keras.Variable) -> tuple[keras.Variable, keras.Variable]:
    """The first and second moment slots Keras's `Adam` keeps for `variable`."""
    index = private_attribute(optimizer, "_get_variable_index")(variable)
    return (private_attribute(optimizer, "_momentums")[index],
            private_attribute(optimizer, "_velocities")[index])


def loss_tracker(model: keras.Model) -> keras.metrics.Metric:
    """The `Mean` metric that `Model.fit` reports as "loss" (a custom `train_step` that
    computes the loss itself updates it, as Keras's own `train_step` does)."""
    return private_attribute(model, "_loss_tracker")


class LocalBatchSymbolicBuild:
    """A `keras.Model` mixin: compiled state (metrics, optimizer) is built from one replica's
    local batch.

    Keras 3 all-reduces a distributed batch eagerly in `Model._maybe_symbolic_build` only to
    learn its shapes, which fails under `MultiWorkerMirroredStrategy` (a PerReplica batch
    cannot be converted); the local shapes are all `_symbolic_build` needs.
    """

    def _maybe_symbolic_build(self, iterator=None, data_batch=None):
        parent = private_attribute(super(), "_maybe_symbolic_build")
        strategy = private_attribute(self, "_distribute_strategy")
        if strategy is None or iterator is None:
            return parent(iterator=iterator, data_batch=data_batch)
        for _, _, batches in iterator:
            data_batch = keras.tree.map_structure(self._first_local_value, next(batches))
            break
        with self.distribute_strategy.scope():
            private_attribute(self, "_symbolic_build")(data_batch=data_batch)

    def _first_local_value(self, value):
        if isinstance(value, tf.distribute.DistributedValues):
            return self.distribute_strategy.experimental_local_results(value)[0]
        return value
