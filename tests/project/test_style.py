"""The linter CI runs: ruff with the project's rules (ruff.toml: pyflakes, 100-column lines and
the docstring style) over the package, the command lines, the tests, the benchmarks and the
examples, and what ruff has no rule for: docstrings without Google-style sections."""
import ast
import re
import shutil
import subprocess
import sys

import pytest

from helpers import ROOT

CHECKED = ("keras_transformer", "trainers", "tests", "benchmarks", "examples")

# A Google-style (or numpy-style) section: its header alone on a line, e.g. "    Args:".
SECTION = re.compile(r"^[ \t]*(Args|Arguments|Attributes|Examples?|Keyword Arg(?:ument)?s|Methods|"
                     r"Notes?|Other Parameters|Parameters|Raises|References|Returns?|See Also|"
                     r"Todo|Warnings?|Warns|Yields?)[ \t]*:[ \t]*$", re.MULTILINE)

def sectioned_docstrings() -> list[str]:
    """`path:line name: Header` of every docstring of a module, class or function under
    `CHECKED` that holds a section header."""
    found = []
    for folder in CHECKED:
        for path in sorted((ROOT / folder).rglob("*.py")):
            tree = ast.parse(path.read_text(encoding="utf-8"))
            for node in ast.walk(tree):
                if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef,
                                     ast.AsyncFunctionDef)):
                    match = SECTION.search(ast.get_docstring(node, clean=False) or "")
                    if match:
                        found.append(f"{path.relative_to(ROOT).as_posix()}:"
                                     f"{getattr(node, 'lineno', 1)} "
                                     f"{getattr(node, 'name', '<module>')}: {match.group(1)}:")
    return found


def test_ruff_passes():
    if shutil.which("ruff") is None and subprocess.run(
            [sys.executable, "-m", "ruff", "--version"], capture_output=True).returncode:
        pytest.skip("ruff is not installed (pip install -e '.[test]' installs it)")
    completed = subprocess.run(
        [sys.executable, "-m", "ruff", "check", *CHECKED], cwd=ROOT, capture_output=True,
        text=True)
    assert completed.returncode == 0, completed.stdout + completed.stderr


def test_no_docstring_has_google_style_sections():
    """The project's one docstring style (ruff.toml) names arguments and results in the
    summary's sentences: no `Args:`, `Returns:`, `Raises:`, `Attributes:` ... sections."""
    assert sectioned_docstrings() == []


def test_no_test_module_imports_another():
    """Shared test code lives in helper modules (`tests/helpers.py`, `tests/marian_models.py`),
    never in a test module or `conftest.py` another test imports."""
    import ast

    imports = []
    for path in sorted((ROOT / "tests").rglob("*.py")):
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


def dotted_name(node: ast.expr) -> str:
    """`a.b.c` of an attribute chain `node` ending in a name; "" otherwise."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    return ".".join([node.id, *reversed(parts)]) if isinstance(node, ast.Name) else ""


def global_draw(call: ast.Call) -> bool:
    """Whether `call` draws from a process-wide generator: numpy's and Python's module
    functions (`np.random.normal`, `random.choice`), TensorFlow's and Keras's unseeded ops."""
    module, _, function = dotted_name(call.func).rpartition(".")
    if module in ("np.random", "numpy.random"):
        return function not in ("default_rng", "Generator", "RandomState", "SeedSequence")
    if module in ("tf.random", "keras.random"):
        return not (function.startswith("stateless_") or function in ("set_seed", "Generator",
                                                                     "SeedGenerator")
                    or any(keyword.arg == "seed" for keyword in call.keywords))
    return module == "random" and function not in ("Random", "seed", "getstate", "setstate")


def test_no_test_module_shares_a_random_generator():
    """A generator bound at a test module's top level (or in the shared helpers), or a
    process-wide one (`np.random.normal`, `random.choice`, an unseeded `tf.random.normal`),
    gives a test draws that depend on which tests drew before it: tests take their own (the
    `rng` fixture of conftest.py, or a generator a helper seeds for itself)."""
    shared = []
    for path in sorted((ROOT / "tests").rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in tree.body:
            value = node.value if isinstance(node, (ast.Assign, ast.AnnAssign)) else None
            if (isinstance(value, ast.Call) and isinstance(value.func, ast.Attribute)
                    and value.func.attr in ("default_rng", "Random", "RandomState",
                                            "Generator")):
                shared.append(f"{path.name}:{node.lineno}")
        shared += [f"{path.name}:{node.lineno}" for node in ast.walk(tree)
                   if isinstance(node, ast.Call) and global_draw(node)]
    assert shared == []
