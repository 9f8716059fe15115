"""Shared fixtures: the shared corpora (skipped when absent), a demo corpus, a tokenizer, a
dtype policy."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

# The kernel set under test (CI runs the suite with each); fast unless KT_KERNELS says otherwise,
# so that no test waits for the auto probe. Child processes inherit it.
os.environ.setdefault("KT_KERNELS", "fast")
# oneDNN's CPU allocator keeps every large block it ever allocated in a pool of its own, which
# never shrinks: a test process would hold its peak for good (test_config.py's paper-size models:
# 2.6 GB kept, 1.4 GB with the system allocator). The system allocator returns freed blocks to
# the machine; the kernels and their results are the same. Set before TensorFlow loads, and
# inherited by the command lines the tests start.
os.environ.setdefault("TF_ONEDNN_USE_SYSTEM_ALLOCATOR", "1")

import keras_transformer  # noqa: F401,E402  (selects the TensorFlow backend before keras loads)
import keras  # noqa: E402
from keras_transformer import fast  # noqa: E402
from keras_transformer.data import (  # noqa: E402
    SubwordTokenizer,
    read_parallel,
    shared_data_dir,
    write_demo_corpus,
)
from keras_transformer.precision import set_precision  # noqa: E402

fast.active()  # installs the kernel set KT_KERNELS names for the in-process tests


def run_script_json(script: str, timeout: int = 300) -> dict:
    """Runs `script` in a fresh Python process (its own TensorFlow devices) from the project
    root and returns the JSON object its last output line holds."""
    completed = subprocess.run([sys.executable, "-c", script], cwd=Path(__file__).parents[1],
                               capture_output=True, text=True, timeout=timeout)
    assert completed.returncode == 0, completed.stderr[-3000:]
    return json.loads(completed.stdout.strip().splitlines()[-1])


def final_json(output: str) -> dict:
    """The JSON summary a command line prints last (TensorFlow may still log after it)."""
    output = "\n" + output  # the summary may be the only output
    summary, _ = json.JSONDecoder().raw_decode(output[output.rindex("\n{\n") + 1:])
    return summary


def final_weights(run_dir: Path) -> list:
    """The trainable weights (numpy arrays) a finished kt-train run saved in `run_dir`."""
    import keras_transformer as kt
    from keras_transformer.training.run_dir import RunDir

    model = kt.Transformer(RunDir(run_dir).load_recipe().architecture)
    model.load_weights(run_dir / "model.weights.h5")
    return [variable.numpy() for variable in model.trainable_weights]


def random_run(vocab: Path, root: Path, **overrides):
    """A run directory (`RunDir`) of a random one-layer `tiny` model on `vocab`, its weights
    spread out so that its translations and samples vary."""
    import shutil

    import numpy as np

    import keras_transformer as kt
    from keras_transformer.training.checkpoints import save_weights_atomic
    from keras_transformer.training.run_dir import RunDir

    recipe = kt.Recipe.preset("tiny", vocab_size=SubwordTokenizer.load(vocab).vocab_size,
                              **{"num_layers": 1, "max_length": 24, "beam_size": 1,
                                 **overrides})
    run_dir = RunDir(root)
    run_dir.write_json("config.json", recipe.to_dict())
    shutil.copytree(vocab, run_dir.vocab)
    model = kt.Transformer(recipe.architecture)
    rng = np.random.default_rng(0)
    model.set_weights([weight + rng.normal(size=weight.shape).astype("float32") * 0.3
                       for weight in model.get_weights()])
    save_weights_atomic(model, run_dir.final_weights)
    return run_dir


def train_vocab(pairs: tuple[list[str], list[str]], size: int, directory: Path) -> Path:
    """Learns a shared vocabulary of `size` pieces from both sides of `pairs` into `directory`."""
    sources, targets = pairs
    SubwordTokenizer.train(sources + targets, size, directory)
    return directory


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """The read-only shared data folder; skips the test when it is absent."""
    path = shared_data_dir()
    if not path.is_dir():
        pytest.skip(f"shared data not found at {path} (set KT_SHARED_DATA)")
    return path


@pytest.fixture(scope="session")
def multi30k(shared_data: Path) -> Path:
    """The Multi30k folder of the shared data; skips the test when it is absent."""
    path = shared_data / "multi30k"
    if not (path / "train.en.gz").is_file():
        pytest.skip(f"Multi30k not found in {path}")
    return path


@pytest.fixture(scope="session")
def multi30k_train(multi30k: Path) -> tuple[list[str], list[str]]:
    """Multi30k train as (English, German) sentence lists."""
    return read_parallel(multi30k / "train.en.gz", multi30k / "train.de.gz")


@pytest.fixture(scope="session")
def multi30k_vocab(
    multi30k_train: tuple[list[str], list[str]], tmp_path_factory: pytest.TempPathFactory
) -> Path:
    """Directory of an 8000-piece shared vocabulary learned once from Multi30k train."""
    return train_vocab(multi30k_train, 8000, tmp_path_factory.mktemp("vocab"))


@pytest.fixture
def multi30k_tokenizer(multi30k_vocab: Path) -> SubwordTokenizer:
    """The Multi30k vocabulary, loaded per test (a test's seeding cannot invalidate it)."""
    return SubwordTokenizer.load(multi30k_vocab)


@pytest.fixture(scope="session")
def demo_train(tmp_path_factory: pytest.TempPathFactory) -> tuple[list[str], list[str]]:
    """The demo corpus train split as (English, German) sentence lists."""
    return read_parallel(*write_demo_corpus(tmp_path_factory.mktemp("demo"))["train"])


@pytest.fixture(scope="session")
def demo_vocab(
    demo_train: tuple[list[str], list[str]], tmp_path_factory: pytest.TempPathFactory
) -> Path:
    """Directory of a 500-piece shared vocabulary learned once from the demo train split."""
    return train_vocab(demo_train, 500, tmp_path_factory.mktemp("demo_vocab"))


@pytest.fixture
def demo_tokenizer(demo_vocab: Path) -> SubwordTokenizer:
    """The demo vocabulary, loaded per test (a test's seeding cannot invalidate it)."""
    return SubwordTokenizer.load(demo_vocab)


@pytest.fixture(params=["core", "lean"])
def step_builder(request: pytest.FixtureRequest):
    """Each cached decoding step a search can run, as its `step_builder`: the core's
    (`transformer_search.cached_step`, given as None, the default) and the fast subpackage's
    `lean_step`."""
    return None if request.param == "core" else fast.lean_step


@pytest.fixture
def precision(request: pytest.FixtureRequest) -> Iterator[str]:
    """Global dtype policy set to the test's `precision` parameter (indirect parametrization);
    float32 again afterwards, which the other tests assume."""
    try:
        yield set_precision(request.param)
    finally:
        keras.config.set_dtype_policy("float32")


class FakeClock:
    """A clock the test moves."""

    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now
