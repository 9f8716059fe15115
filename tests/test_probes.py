"""Measured hardware choices: the decisions from injected figures, the cache, and one real run
of each probe."""
import json

import pytest

from keras_transformer import kernels, probes
from keras_transformer.training.precision import resolve_precision


@pytest.fixture(autouse=True)
def private_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("KT_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache" / "probes.json"


@pytest.mark.parametrize("figures, expected", [
    ({"float32": 300.0, "bfloat16": 160.0}, "float32"),  # bf16 at half speed (the Xeon)
    ({"float32": 215.0, "bfloat16": 405.0}, "mixed_bfloat16"),  # native bf16 (the EPYC)
    ({"float32": 200.0, "bfloat16": 230.0}, "float32"),  # not clearly faster
    ({"float32": 200.0}, "float32"),  # float32 only
    ({"float32": 100.0, "bfloat16": 400.0, "float16": 800.0}, "mixed_float16"),
])
def test_precision_follows_the_measured_matmul_speed(figures, expected):
    def measure(dtype):
        if dtype not in figures:
            raise TypeError(f"no {dtype} kernel")
        return figures[dtype]

    result = probes.choose_precision(measure=measure,
                                     dtypes=["float32", "bfloat16", "float16"][:len(figures)])
    assert result.choice == expected
    assert result.figures == figures
    assert result.describe().startswith(expected)


@pytest.mark.parametrize("figures, expected", [
    ({"fast": 3.0, "reference": 2.0}, "fast"),
    ({"fast": 1.9, "reference": 2.0}, "reference"),  # e.g. a GPU where the tricks do not pay
    ({"fast": 2.0, "reference": 2.0}, "reference"),
])
def test_kernel_set_follows_the_measured_step_speed(figures, expected):
    assert probes.choose_kernels(measure=figures.get).choice == expected


def test_auto_resolves_through_the_probe(monkeypatch):
    monkeypatch.setattr(probes, "_matmul_gflops",
                        lambda dtype, *sizes: {"float32": 300.0, "bfloat16": 150.0}[dtype])
    assert resolve_precision("auto", d_model=64, d_ff=128, tokens=64) == "float32"
    monkeypatch.setattr(probes, "_training_steps_per_second", lambda name, *sizes: {
        "fast": 1.0, "reference": 5.0}[name])
    with kernels.kernels_scope("auto") as chosen:
        assert chosen == kernels.active() == "reference"


@pytest.mark.slow
def test_the_probes_measure_and_cache(private_cache):
    """One real run of each probe at tiny sizes; the second call reads the cache."""
    precision = probes.choose_precision(d_model=64, d_ff=128, tokens=128)
    assert precision.choice in ("float32", "mixed_bfloat16")
    assert precision.figures["float32"] > 0 and not precision.cached
    kernel_set = probes.choose_kernels(d_model=32, d_ff=64, num_heads=2, tokens=128,
                                       vocab_size=50)
    assert set(kernel_set.figures) == {"fast", "reference"}
    assert all(value > 0 for value in kernel_set.figures.values())
    again = probes.choose_kernels(d_model=32, d_ff=64, num_heads=2, tokens=128, vocab_size=50)
    assert again.cached and again.choice == kernel_set.choice
    assert len(json.loads(private_cache.read_text())) == 2


def test_a_dtype_without_kernels_is_skipped():
    def measure(dtype):
        if dtype == "bfloat16":
            raise TypeError("no bfloat16 matmul")
        return 100.0

    result = probes.choose_precision(measure=measure)
    assert result.choice == "float32" and result.figures == {"float32": 100.0}


def test_auto_resolves_eagerly_when_first_needed_while_tracing(monkeypatch):
    """The first kernel call of a program may come while a function is traced: the probe then
    still measures eagerly."""
    import tensorflow as tf

    def measure(name, *sizes):
        assert tf.executing_eagerly()
        return {"fast": 2.0, "reference": 1.0}[name]

    monkeypatch.setattr(probes, "_training_steps_per_second", measure)
    monkeypatch.setenv("KT_KERNELS", "auto")
    monkeypatch.setattr(kernels.selection, "_active", None)
    assert tf.function(lambda: tf.constant(kernels.active() == "fast"))().numpy()


@pytest.mark.parametrize("figures, expected", [
    ({"float32": 300.0, "bfloat16": 160.0}, "float32"),
    ({"float32": 150.0, "bfloat16": 390.0}, "bfloat16"),
    ({"float32": 200.0, "bfloat16": 230.0}, "float32"),
])
def test_serving_dtype_follows_the_measured_matmul_speed(figures, expected):
    """Never float16, even where it would measure fastest (e.g. on a GPU)."""
    result = probes.choose_serving_dtype(measure=lambda dtype: {**figures, "float16": 1e4}[dtype])
    assert (result.choice, result.figures) == (expected, figures)


def test_a_process_pinned_to_fewer_cores_is_measured_apart(monkeypatch):
    keys = []
    for cores in ({0, 1}, {0}, {1}):
        monkeypatch.setattr(probes.os, "sched_getaffinity", lambda pid, cores=cores: cores,
                            raising=False)
        keys.append(probes._machine_key())
    assert keys[0] != keys[1] == keys[2]
