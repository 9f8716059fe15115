"""Starting a command line (`kt-train`, ..., or `python -m trainers COMMAND`) with a quiet start.

TensorFlow prints its C++ start-up lines (oneDNN, CUDA stubs, CPU features, absl's "before
InitializeLog" notice) while it is imported, before any log level applies. The launcher imports
it with them captured and dropped, unless `--verbose` is on the command line or the user set
`TF_CPP_MIN_LOG_LEVEL` (if the import fails, they are replayed before the error), then imports
the command's module and runs its `main`. Importing `trainers` or a command's module has no
such effect (`python -m trainers.train` runs too, without the quiet start).
"""
from __future__ import annotations

import importlib
import os
import sys
import tempfile
from typing import Optional, Sequence

QUIET_LOG_LEVEL = "3"  # C++ INFO, WARNING and ERROR lines off (Python errors still raise)


def import_tensorflow_quietly(argv: Optional[Sequence[str]] = None) -> None:
    """Imports TensorFlow with its C++ start-up output captured (see the module docstring)."""
    argv = sys.argv if argv is None else argv
    if ("--verbose" in argv or "TF_CPP_MIN_LOG_LEVEL" in os.environ
            or "tensorflow" in sys.modules):
        return
    os.environ["TF_CPP_MIN_LOG_LEVEL"] = QUIET_LOG_LEVEL
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as captured:
        os.dup2(captured.fileno(), 2)
        try:
            import tensorflow  # noqa: F401
        except BaseException:
            os.dup2(saved, 2)
            captured.seek(0)
            sys.stderr.write(captured.read().decode("utf-8", "replace"))
            raise
        finally:
            os.dup2(saved, 2)
            os.close(saved)


# The commands `python -m trainers COMMAND` runs; the `kt-*` ones are console scripts too.
COMMANDS = ("train", "prepare", "evaluate", "average_checkpoints", "export", "translate",
            "translate_corpus", "prepare_parsing", "moses_form", "plot_attention",
            "import_model")


def launch(command: str, argv: Optional[Sequence[str]] = None) -> int:
    """Runs `trainers.<command>`'s `main` with `argv` (default: the process's arguments)
    after a quiet TensorFlow import; returns its exit status."""
    if command not in COMMANDS:
        print(f"trainers: unknown command {command!r}; choose from {', '.join(COMMANDS)}",
              file=sys.stderr)
        return 2
    import_tensorflow_quietly(sys.argv if argv is None else argv)
    return importlib.import_module(f"trainers.{command}").main(argv)


def train() -> int:
    """`kt-train`."""
    return launch("train")


def prepare() -> int:
    """`kt-prepare`."""
    return launch("prepare")


def evaluate() -> int:
    """`kt-evaluate`."""
    return launch("evaluate")


def average_checkpoints() -> int:
    """`kt-average-checkpoints`."""
    return launch("average_checkpoints")


def export() -> int:
    """`kt-export`."""
    return launch("export")


def translate() -> int:
    """`kt-translate`."""
    return launch("translate")


def translate_corpus() -> int:
    """`kt-translate-corpus`."""
    return launch("translate_corpus")


def plot_attention() -> int:
    """`kt-plot-attention`."""
    return launch("plot_attention")


def import_model() -> int:
    """`kt-import`."""
    return launch("import_model")
