"""Starting a command line (`kt-train`, ..., or `python -m trainers COMMAND`) with a quiet start.

TensorFlow prints its C++ start-up lines (oneDNN, CUDA stubs, CPU features, absl's "before
InitializeLog" notice) while it is imported, before any log level applies. The launcher imports
it with them captured and dropped, unless `--verbose` is on the command line; where the user set
`TF_CPP_MIN_LOG_LEVEL`, the lines of that severity and above are printed (if the import fails,
all are replayed before the error), then imports the command's module and runs its `main`.
Importing `trainers` or a command's module has no such effect (`python -m trainers.train` runs
too, without the quiet start).

A command line asking for help (`-h`, `--help`) is answered from the command's grammar alone
(`trainers.arguments`) before TensorFlow or the model is imported: in well under a second.
"""
from __future__ import annotations

import importlib
import importlib.util
import os
import re
import sys
import tempfile
from typing import Optional, Sequence

QUIET_LOG_LEVEL = "3"  # C++ INFO, WARNING and ERROR lines off (Python errors still raise)
# The severities of TensorFlow's C++ log lines, by their letter: absl's start with it
# (`I0000 00:00:...`), TensorFlow 2.20's own follow a time stamp (`2026-01-01 00:00:00.1: I ...`).
SEVERITIES = {"I": 0, "W": 1, "E": 2, "F": 3}
SEVERITY = re.compile(r"([IWEF])\d{4} |\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d+: ([IWEF]) ")


def lines_at_level(text: str, level: int) -> str:
    """The lines of TensorFlow's start-up output `text` of severity `level` and above (0
    INFO, 1 WARNING, 2 ERROR, as `TF_CPP_MIN_LOG_LEVEL` counts); a line without a severity of
    its own continues the one before it."""
    kept, severity = [], 0
    for line in text.splitlines(keepends=True):
        if line.startswith("WARNING: All log messages before absl::InitializeLog()"):
            severity = SEVERITIES["W"]
        elif SEVERITY.match(line):
            severity = SEVERITIES[next(filter(None, SEVERITY.match(line).groups()))]
        if severity >= level:
            kept.append(line)
    return "".join(kept)


def import_tensorflow_quietly(argv: Optional[Sequence[str]] = None) -> None:
    """Imports TensorFlow with its C++ start-up output captured (see the module docstring)."""
    argv = sys.argv if argv is None else argv
    if "--verbose" in argv or "tensorflow" in sys.modules:
        return
    users_level = os.environ.get("TF_CPP_MIN_LOG_LEVEL")
    if users_level is None:
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
        if users_level is not None:
            captured.seek(0)
            level = int(users_level) if users_level.isdigit() else 0
            sys.stderr.write(lines_at_level(captured.read().decode("utf-8", "replace"), level))


# The commands `python -m trainers COMMAND` runs; the `kt-*` ones are console scripts too.
COMMANDS = ("train", "prepare", "evaluate", "average_checkpoints", "export", "translate",
            "translate_corpus", "prepare_parsing", "moses_form", "plot_attention",
            "import_model", "score", "align")


def launch(command: str, argv: Optional[Sequence[str]] = None) -> int:
    """Runs `trainers.<command>`'s `main` with `argv` (default: the process's arguments)
    after a quiet TensorFlow import; returns its exit status."""
    if command not in COMMANDS:
        print(f"trainers: unknown command {command!r}; choose from {', '.join(COMMANDS)}",
              file=sys.stderr)
        return 2
    arguments = sys.argv[1:] if argv is None else list(argv)
    if asks_for_help(arguments):
        print_help(command, arguments)
    import_tensorflow_quietly(arguments)
    return importlib.import_module(f"trainers.{command}").main(argv)


def asks_for_help(argv: Sequence[str]) -> bool:
    """Whether `argv` holds `-h` or `--help` (before a `--`, after which all is positional)."""
    for argument in argv:
        if argument == "--":
            return False
        if argument in ("-h", "--help"):
            return True
    return False


def print_help(command: str, argv: Sequence[str]) -> None:
    """Parses `argv` with `command`'s grammar (`trainers.arguments.PARSERS`), which prints its
    help and exits. The grammar reads only `keras_transformer.config`, which imports nothing
    heavy, but importing it runs the package's `__init__`, which imports the model and
    TensorFlow; so the package stands in `sys.modules` bare meanwhile (its `__init__` not run),
    and what was imported beside it is dropped again as the help's exit passes (a process that
    catches it imports all in full)."""
    bare = "keras_transformer" not in sys.modules  # imported already (a warm process): as is
    if bare:
        sys.modules["keras_transformer"] = importlib.util.module_from_spec(
            importlib.util.find_spec("keras_transformer"))
    try:
        from trainers.arguments import PARSERS
        PARSERS[command]().parse_args(argv)
    finally:
        if bare:
            for name in [name for name in sys.modules if name == "trainers.arguments"
                         or name.split(".")[0] == "keras_transformer"]:
                del sys.modules[name]
            vars(sys.modules["trainers"]).pop("arguments", None)


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


def score() -> int:
    """`kt-score`."""
    return launch("score")


def align() -> int:
    """`kt-align`."""
    return launch("align")
