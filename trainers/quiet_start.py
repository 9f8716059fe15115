"""A quiet start for the command lines: TensorFlow prints its C++ start-up lines (oneDNN, CUDA
stubs, CPU features, absl's "before InitializeLog" notice) while it is imported, before any
log level applies. They are captured and dropped unless `--verbose` is on the command line or
the user set `TF_CPP_MIN_LOG_LEVEL`; if the import fails, they are replayed before the error.
"""
from __future__ import annotations

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
