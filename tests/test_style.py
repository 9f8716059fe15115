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


def test_no_test_module_imports_another():
    """Shared test code lives in helper modules (`tests/helpers.py`, `tests/marian_models.py`),
    never in a test module or `conftest.py` another test imports."""
    import ast

    imports = []
    for path in sorted((ROOT / "tests").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = ([alias.name for alias in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            imports += [(path.name, name) for name in names
                        if name.split(".")[0].startswith("test_") or name == "conftest"]
    assert imports == []


def test_the_shared_test_helpers_bind_each_name_once():
    """tests/helpers.py is one namespace for every test module: a second module-level
    assignment of a name (two unrelated `PAIRS`) silently changes what earlier tests import."""
    import ast
    from collections import Counter

    tree = ast.parse((ROOT / "tests" / "helpers.py").read_text(encoding="utf-8"))
    names = Counter()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names[node.name] += 1
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names.update(target.id for target in targets if isinstance(target, ast.Name))
    assert sorted(name for name, count in names.items() if count > 1) == []
