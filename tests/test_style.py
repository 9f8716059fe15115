"""The linter CI runs: ruff with the project's rules (ruff.toml: pyflakes and the docstring
style) over the package, the command lines, the tests and the benchmarks."""
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[1]


def test_ruff_passes():
    if shutil.which("ruff") is None and subprocess.run(
            [sys.executable, "-m", "ruff", "--version"], capture_output=True).returncode:
        pytest.skip("ruff is not installed (pip install -e '.[test]' installs it)")
    completed = subprocess.run(
        [sys.executable, "-m", "ruff", "check", "keras_transformer", "trainers", "tests",
         "benchmarks"], cwd=ROOT, capture_output=True, text=True)
    assert completed.returncode == 0, completed.stdout + completed.stderr
