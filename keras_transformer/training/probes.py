"""Hardware choices made by measuring this machine: the mixed-precision policy and the kernel
set.

Each probe times the candidates at the model's sizes for a few seconds, picks the fastest (a
reduced precision only when clearly faster), and caches the result per machine, TensorFlow
version and sizes in `$KT_CACHE_DIR/probes.json` (default `~/.cache/keras_transformer`), so a
machine is measured once. Device names and CPU flags only key the cache; they never decide.
"""
from __future__ import annotations

import json
import os
import platform
import shutil
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional

import numpy as np
import tensorflow as tf

from keras_transformer.data.atomic_files import write_atomic

# A reduced precision must beat float32 matmuls by this factor: its step-level gain is
# smaller, and its rounding is a cost.
REDUCED_PRECISION_MARGIN = 1.25
POLICY_OF_DTYPE = {"float32": "float32", "bfloat16": "mixed_bfloat16",
                   "float16": "mixed_float16"}


@dataclass
class ProbeResult:
    """What a probe chose, and the figures it chose from (larger is faster)."""
    choice: str
    figures: dict[str, float]
    unit: str
    cached: bool = field(default=False, compare=False)

    def describe(self) -> str:
        figures = ", ".join(f"{name} {value:,.1f}" for name, value in self.figures.items())
        return (f"{self.choice} (measured {self.unit}: {figures}"
                f"{'; cached' if self.cached else ''})")

    def to_dict(self) -> dict:
        return {"choice": self.choice, "figures": self.figures, "unit": self.unit}


def choose_precision(d_model: int = 512, d_ff: int = 2048, tokens: int = 2048,
                     measure: Optional[Callable[[str], float]] = None,
                     dtypes: Optional[list[str]] = None) -> ProbeResult:
    """The Keras dtype policy for training: `mixed_bfloat16` or `mixed_float16` when that
    dtype's matmuls (`[tokens, d_model] @ [d_model, d_ff]`, forward and backward shapes) run at
    least `REDUCED_PRECISION_MARGIN` times as fast as float32's here, else `float32`; bfloat16
    rather than a faster float16 unless float16 is that margin faster still.
    `dtypes` default: float32 and bfloat16, and float16 on GPUs only (on CPUs it is
    emulated). `measure(dtype)` -> GFLOP/s replaces the timing (for tests)."""
    if dtypes is None:
        dtypes = ["float32", "bfloat16"] + (["float16"] if tf.config.list_physical_devices("GPU")
                                            else [])

    def probe():
        timing = measure or (lambda dtype: _matmul_gflops(dtype, tokens, d_model, d_ff))
        figures = {}
        for dtype in dtypes:
            try:
                figures[dtype] = timing(dtype)
            except (tf.errors.OpError, TypeError, ValueError):
                pass  # no kernel for this dtype here
        best = max(figures, key=figures.get)
        if best == "float16" and figures.get("bfloat16", 0.0) * REDUCED_PRECISION_MARGIN >= (
                figures["float16"]):
            best = "bfloat16"  # float32's range: no loss scaling, no overflow to skip
        if figures[best] < REDUCED_PRECISION_MARGIN * figures["float32"]:
            best = "float32"
        return ProbeResult(POLICY_OF_DTYPE[best], figures, "GFLOP/s")

    return _cached(f"precision|{'/'.join(dtypes)}|{d_model}x{d_ff}x{tokens}", probe,
                   measure is None)


def choose_serving_dtype(d_model: int = 512, d_ff: int = 2048, rows: int = 128,
                         measure: Optional[Callable[[str], float]] = None) -> ProbeResult:
    """What an export should store and compute in: "bfloat16" when bfloat16 matmuls of a
    decoding step's size (`rows` = batch x beam hypotheses) run at least
    `REDUCED_PRECISION_MARGIN` times as fast as float32's here, else "float32" (the same
    measurement as `choose_precision`, at decoding's sizes)."""
    result = choose_precision(d_model, d_ff, rows, measure, dtypes=["float32", "bfloat16"])
    dtype = {policy: dtype for dtype, policy in POLICY_OF_DTYPE.items()}[result.choice]
    return ProbeResult(dtype, result.figures, result.unit, result.cached)


def choose_implementation(d_model: int = 512, d_ff: int = 2048, num_heads: int = 8,
                   tokens: int = 2048, vocab_size: int = 8000,
                   measure: Optional[Callable[[str], float]] = None) -> ProbeResult:
    """The implementation for training: the faster of `fast` and `reference` for a one-layer
    Transformer's training step (forward, loss, gradients) at these sizes on a bucketed batch
    of about `tokens` target tokens, in the current dtype policy; `reference` on a tie.
    `measure(implementation)` -> steps/s replaces the timing (for tests)."""
    import keras
    policy = keras.config.dtype_policy().name

    def probe():
        timing = measure or (lambda name: _training_steps_per_second(
            name, d_model, d_ff, num_heads, tokens, vocab_size))
        figures = {name: timing(name) for name in ("reference", "fast")}
        choice = "fast" if figures["fast"] > figures["reference"] else "reference"
        return ProbeResult(choice, figures, "training steps/s")

    return _cached(f"kernels|{policy}|{d_model}x{d_ff}x{num_heads}x{tokens}x{vocab_size}",
                   probe, measure is None)


def gpus_tensorflow_cannot_see() -> list[str]:
    """The GPUs `nvidia-smi -L` lists when TensorFlow sees none (a TensorFlow without its CUDA
    libraries trains on the CPU without a word); empty when TensorFlow sees a GPU, or there is
    no `nvidia-smi`, or it lists none."""
    if tf.config.list_physical_devices("GPU"):
        return []
    tool = shutil.which("nvidia-smi")
    if tool is None:
        return []
    try:
        listed = subprocess.run([tool, "-L"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    return [line.strip() for line in listed.splitlines() if line.startswith("GPU ")]


def cache_path() -> Path:
    """Where probe results are kept."""
    root = os.environ.get("KT_CACHE_DIR") or Path.home() / ".cache" / "keras_transformer"
    return Path(root) / "probes.json"


def _machine_key() -> str:
    """This machine as the cache knows it: CPU model, the cores this process may run on (a
    run pinned with `taskset` is measured apart), accelerators, TensorFlow."""
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as handle:
            cpu = next((line.split(":", 1)[1].strip() for line in handle
                        if line.startswith("model name")), cpu)
    except OSError:
        pass
    devices = ",".join(sorted(device.name for device in tf.config.list_physical_devices()))
    cores = (len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity")
             else os.cpu_count())
    return f"{cpu}|{cores} cores|{devices}|tf {tf.__version__}"


def _cached(key: str, probe: Callable[[], ProbeResult], use_cache: bool) -> ProbeResult:
    if not use_cache:
        return probe()
    path, key = cache_path(), f"{_machine_key()}|{key}"
    try:
        entries = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        entries = {}
    if key in entries:
        return ProbeResult(**entries[key], cached=True)
    result = probe()
    entries[key] = result.to_dict()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(path, json.dumps(entries, indent=1))
    except OSError:
        pass  # an unwritable cache only costs a new measurement next time
    return result


def _best_rate(run: Callable[[], tf.Tensor], work: float, repeats: int = 5,
               calls: int = 1) -> float:
    """`work` per second of `run`: the fastest of `repeats` timings of `calls` calls in a row
    (after one warm-up), each timing waiting for the last call's result only, so that an
    accelerator's queue stays full and the figure is its compute, not the host's dispatch."""
    run().numpy()
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(calls - 1):
            run()
        run().numpy()
        best = min(best, (time.perf_counter() - start) / calls)
    return work / best


def _matmul_gflops(dtype: str, tokens: int, d_model: int, d_ff: int) -> float:
    """GFLOP/s of the three products of a dense layer's training step in `dtype`."""
    rng = np.random.default_rng(0)
    x = tf.constant(rng.normal(size=(tokens, d_model)), dtype)
    w = tf.constant(rng.normal(size=(d_model, d_ff)) * 0.05, dtype)
    g = tf.constant(rng.normal(size=(tokens, d_ff)), dtype)

    @tf.function
    def step():
        return (tf.reduce_sum(tf.matmul(x, w)[:1, :1])
                + tf.reduce_sum(tf.matmul(g, w, transpose_b=True)[:1, :1])
                + tf.reduce_sum(tf.matmul(x, g, transpose_a=True)[:1, :1]))

    return _best_rate(step, 3 * 2 * tokens * d_model * d_ff / 1e9, calls=4)


def _training_steps_per_second(implementation: str, d_model: int, d_ff: int, num_heads: int,
                               tokens: int, vocab_size: int) -> float:
    """`fit`'s training steps per second (with an Adam update that moves nothing) of a
    one-layer Transformer under `implementation`, on a batch of 32-token sentences a quarter of
    whose positions are padding."""
    from keras_transformer import fast
    from keras_transformer.config import TransformerConfig
    from keras_transformer.losses import LabelSmoothedCrossEntropy
    from keras_transformer.optimization import adam

    length = 32
    rows = max(1, tokens * 4 // 3 // length)
    rng = np.random.default_rng(0)
    ids = rng.integers(4, vocab_size, size=(rows, length)).astype("int32")
    lengths = rng.integers(length // 2, length + 1, size=rows)
    ids[np.arange(length)[None, :] >= lengths[:, None]] = 0
    batch = ((tf.constant(ids), tf.constant(ids)), tf.constant(ids))
    with fast.implementation_scope(implementation):
        config = TransformerConfig.preset(
            "base", num_layers=1, d_model=d_model, d_ff=d_ff, num_heads=num_heads,
            vocab_size=vocab_size)
        model = fast.FastTransformer(config)
        model.compile(optimizer=adam(learning_rate=0.0),
                      loss=LabelSmoothedCrossEntropy())
        step = tf.function(model.train_step)
        return _best_rate(lambda: step(batch)["loss"], 1.0, repeats=3, calls=2)
