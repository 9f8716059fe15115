"""Measured hardware choices: the decisions from injected figures, the cache, and one real run
of each probe."""
import os
import json

import pytest

from keras_transformer import fast
from keras_transformer.training import probes
from keras_transformer.precision import resolve_precision
from trainers.common import set_up_implementation


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
    # A100/H100-like: float16 a little faster than bfloat16; bfloat16 needs no loss scaling.
    ({"float32": 100.0, "bfloat16": 700.0, "float16": 800.0}, "mixed_bfloat16"),
    ({"float32": 100.0, "bfloat16": 110.0, "float16": 800.0}, "mixed_float16"),  # V100/T4-like
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
    assert probes.choose_implementation(measure=figures.get).choice == expected


def no_measuring(*args, **kwargs):
    raise AssertionError("measured")


def test_the_library_never_measures(monkeypatch):
    """Unset or auto, `KT_KERNELS` gives the reference set without a probe; "auto" is
    refused where a set or policy must be given."""
    monkeypatch.setattr(probes, "_training_steps_per_second", no_measuring)
    monkeypatch.setattr(probes, "_matmul_gflops", no_measuring)
    for environment in (None, "auto"):
        if environment is None:
            monkeypatch.delenv("KT_KERNELS", raising=False)
        else:
            monkeypatch.setenv("KT_KERNELS", environment)
        monkeypatch.setattr(fast.selection, "_active", None)
        assert fast.active() == "reference"
    with pytest.raises(ValueError, match="chosen by a run's set-up"):
        fast.set_implementation("auto")
    with pytest.raises(ValueError, match="chosen by a run's set-up"):
        resolve_precision("auto")


def test_a_commands_set_up_resolves_auto_without_measuring(monkeypatch, capsys):
    """`set_up_implementation` (commands that load a model to decode, score or export it): a named
    set as it is, else the run's recorded one, else the reference set; the training-step
    probe never runs, as decoding is the same under either set."""
    def no_measuring(*given):
        raise AssertionError("a command that does not train measured the implementations")

    monkeypatch.setattr(probes, "_training_steps_per_second", no_measuring)
    with fast.implementation_scope("fast"):
        assert set_up_implementation(requested="auto") == fast.active() == "reference"
        assert set_up_implementation(recorded="fast", requested="auto") == fast.active() == "fast"
        assert set_up_implementation(recorded="fast", requested="reference") == "reference"
        monkeypatch.setenv("KT_KERNELS", "fast")
        assert set_up_implementation() == fast.active() == "fast"
    assert capsys.readouterr().err == ""


@pytest.mark.slow
def test_the_probes_measure_and_cache(private_cache):
    """One real run of each probe at tiny sizes; the second call reads the cache."""
    precision = probes.choose_precision(d_model=64, d_ff=128, tokens=128)
    assert precision.choice in ("float32", "mixed_bfloat16")
    assert precision.figures["float32"] > 0 and not precision.cached
    implementation = probes.choose_implementation(d_model=32, d_ff=64, num_heads=2, tokens=128,
                                       vocab_size=50)
    assert set(implementation.figures) == {"fast", "reference"}
    assert all(value > 0 for value in implementation.figures.values())
    again = probes.choose_implementation(d_model=32, d_ff=64, num_heads=2, tokens=128,
                                         vocab_size=50)
    assert again.cached and again.choice == implementation.choice
    assert len(json.loads(private_cache.read_text())) == 2


def test_a_dtype_without_kernels_is_skipped():
    def measure(dtype):
        if dtype == "bfloat16":
            raise TypeError("no bfloat16 matmul")
        return 100.0

    result = probes.choose_precision(measure=measure)
    assert result.choice == "float32" and result.figures == {"float32": 100.0}


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


def test_gpus_that_tensorflow_cannot_see_are_named_before_training(tmp_path, monkeypatch,
                                                                     capsys):
    """`nvidia-smi` lists GPUs, TensorFlow sees none (a wheel without CUDA): kt-train says so
    and how to install, before it trains on the CPU; without `nvidia-smi`, nothing."""
    from trainers import train

    fake = tmp_path / "bin" / "nvidia-smi"
    fake.parent.mkdir()
    fake.write_text("#!/bin/sh\necho 'GPU 0: NVIDIA A100-SXM4-80GB (UUID: GPU-0a)'\n"
                    "echo 'GPU 1: NVIDIA A100-SXM4-80GB (UUID: GPU-1b)'\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{fake.parent}{os.pathsep}{os.environ['PATH']}")
    assert probes.gpus_tensorflow_cannot_see() == [
        "GPU 0: NVIDIA A100-SXM4-80GB (UUID: GPU-0a)",
        "GPU 1: NVIDIA A100-SXM4-80GB (UUID: GPU-1b)"]
    missing = str(tmp_path / "missing.en")
    argv = ["--train-src", missing, "--train-tgt", missing, "--dev-src", missing,
            "--dev-tgt", missing, "--precision", "float32", "--kernels", "fast",
            "--output-dir", str(tmp_path / "run")]
    assert train.main(argv) == 2  # the corpus is missing: stops right after the warning
    err = capsys.readouterr().err
    assert "nvidia-smi lists 2 GPU(s)" in err and 'tensorflow[and-cuda]' in err
    fake.unlink()
    assert probes.gpus_tensorflow_cannot_see() == []
