"""Shared fixtures: the shared corpora (skipped when absent), a demo corpus, a tokenizer, a
dtype policy; the order of the test files and what each test process keeps out of its
collector's sight."""
from __future__ import annotations

import gc
import os
import zlib
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

# The implementation under test (CI runs the suite with each); fast unless KT_KERNELS says
# otherwise, so that no test waits for the auto probe. Child processes inherit it.
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
from helpers import train_vocab  # noqa: E402
from warm_commands import warm_commands  # noqa: E402

fast.active()  # installs the implementation KT_KERNELS names for the in-process tests

# Test processes side by side (`-n N`) each run TensorFlow's ops on their share of the cores: with
# pools of every core, two processes on two cores oversubscribe them (four of the costliest test
# files took 180 s against 197 s on a 2-core Intel Xeon). A process alone keeps the default.
_WORKERS = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
if _WORKERS > 1:
    import tensorflow as tf  # noqa: E402

    _THREADS = max(1, (os.cpu_count() or 1) // _WORKERS)
    tf.config.threading.set_intra_op_parallelism_threads(_THREADS)
    tf.config.threading.set_inter_op_parallelism_threads(_THREADS)


@pytest.fixture
def rng(request: pytest.FixtureRequest) -> np.random.Generator:
    """The test's own generator, seeded from its node id (a stable hash): its draws are the same
    whichever tests ran before it, and differ between tests and parameters."""
    return np.random.default_rng(zlib.crc32(request.node.nodeid.encode("utf-8")))


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


@pytest.fixture(scope="session")
def warm(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """The environment whose PATH starts `kt-*` commands and `kt-python -c` scripts warm: forks
    of one server per test process that imported TensorFlow and the commands once
    (`warm_commands`, `start_warm`)."""
    with warm_commands(tmp_path_factory.mktemp("warm")) as env:
        yield env


@pytest.fixture
def precision(request: pytest.FixtureRequest) -> Iterator[str]:
    """Global dtype policy set to the test's `precision` parameter (indirect parametrization);
    float32 again afterwards, which the other tests assume."""
    try:
        yield set_precision(request.param)
    finally:
        keras.config.set_dtype_policy("float32")


# Under `--dist loadfile` (the README's test command) each file runs whole in one worker, the
# files in collection order: the files that take minutes (measured with `--durations`) start
# first, so that the other worker takes the rest meanwhile instead of idling while the last
# long file ends. Stable: the other files keep their order.
LONGEST_FIRST = ("test_multilingual_serving.py", "test_distillation_pipeline.py",
                 "test_distributed.py", "test_stock_runtime.py", "test_fine_tuning.py",
                 "test_transformer_search.py", "test_imported_runs.py")


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--system", action="store_true",
                     help="also run the system tests (marker `system`: several processes, the "
                          "pipeline script, the stock runtime, a browser), which CI runs")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    system_folder = Path(__file__).parent / "system"
    misplaced = [item.nodeid for item in items
                 if bool(item.get_closest_marker("system")) != item.path.is_relative_to(
                     system_folder)]
    if misplaced:
        raise pytest.UsageError("the tests marked `system` are those of tests/system/ (and "
                                f"only those): {', '.join(misplaced)}")
    if not config.getoption("--system"):
        system = [item for item in items if item.get_closest_marker("system")]
        if system:
            config.hook.pytest_deselected(items=system)
            items[:] = [item for item in items if not item.get_closest_marker("system")]
    rank = {name: index for index, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))


@pytest.fixture(scope="module", autouse=True)
def freeze_what_outlives_the_module() -> Iterator[None]:
    """After each test file, what is still alive (TensorFlow's and Keras's caches, imported
    modules) moves to the collector's permanent generation: a test process only grows, and
    every later full collection (automatic ones, Keras's after each variable a layer drops,
    the tests' own) would walk it all again: 33 s each by the end of a worker's files.
    Peak memory is not raised (measured)."""
    yield
    gc.collect()
    gc.freeze()
