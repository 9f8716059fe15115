"""The package's shape: no import cycles, a search that knows no model, imports without side
effects. Imports are read from the source (the module graph), not executed."""
import ast
import re
import subprocess
import sys

from helpers import ROOT

PACKAGE = "keras_transformer"
COMPAT = f"{PACKAGE}.compat"  # the one module that uses private Keras/TensorFlow APIs
# A run's set-up (the training API's stages, the hardware probes): above the fast subpackage,
# whose model and implementations it chooses, as the command lines are.
RUN_SET_UP = {f"{PACKAGE}.training.run", f"{PACKAGE}.training.probes"}
PRIVATE_MODULES = ("tensorflow.python", "keras.src", "tf_keras")


def module_graph() -> dict[str, set[str]]:
    """Each module of the package -> the package modules it imports (`from A import b` counts
    as importing `A.b` when that is a module, else `A`)."""
    files = {}
    for path in (ROOT / PACKAGE).rglob("*.py"):
        parts = path.relative_to(ROOT).with_suffix("").parts
        files[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    graph = {}
    for name, path in files.items():
        imported = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                imported.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                submodules = {f"{node.module}.{alias.name}" for alias in node.names} & set(files)
                imported.update(submodules)
                if len(submodules) < len(node.names):
                    imported.add(node.module)
        graph[name] = {module for module in imported if module in files and module != name}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index, low, stack, on_stack, found = {}, {}, [], set(), []

    def visit(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        on_stack.add(module)
        for imported in sorted(graph[module]):
            if imported not in index:
                visit(imported)
                low[module] = min(low[module], low[imported])
            elif imported in on_stack:
                low[module] = min(low[module], index[imported])
        if low[module] == index[module]:
            component = []
            while not component or component[-1] != module:
                component.append(stack.pop())
                on_stack.discard(component[-1])
            if len(component) > 1:
                found.append(sorted(component))

    for module in sorted(graph):
        if module not in index:
            visit(module)
    return found


def reachable(graph: dict[str, set[str]], start: str) -> set[str]:
    """Every package module `start` imports, directly or not."""
    seen, todo = set(), [start]
    while todo:
        for imported in graph[todo.pop()] - seen:
            seen.add(imported)
            todo.append(imported)
    return seen


def test_no_import_cycle_inside_the_package():
    assert cycles(module_graph()) == []


def test_the_cycle_finder_finds_cycles():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert cycles(graph) == [["a", "b", "c"]]


def test_the_search_imports_no_model():
    """The model-free search, its constraints' bookkeeping among it."""
    graph = module_graph()
    imported = reachable(graph, f"{PACKAGE}.search")
    assert imported <= {PACKAGE, f"{PACKAGE}.config", f"{PACKAGE}.constraints"}, imported
    assert reachable(graph, f"{PACKAGE}.constraints") <= {PACKAGE, f"{PACKAGE}.config"}


def test_data_and_exports_import_no_training_code():
    """Rooms: the data pipeline, the exports (SavedModel, CTranslate2, warm-up records,
    provenance) and the text translator sit below `training/`, which uses them."""
    graph = module_graph()
    training = {module for module in graph if module.startswith(f"{PACKAGE}.training")}
    below = [module for module in graph
             if module.startswith((f"{PACKAGE}.data", f"{PACKAGE}.serving"))]
    assert {module: reachable(graph, module) & training for module in below
            if reachable(graph, module) & training} == {}


def test_the_top_level_holds_at_most_twelve_modules():
    """The package's folders show the architecture: serving, distillation, training, data,
    layers and decoding each have their own; the top level keeps the model, its settings (the
    reserved ids among them) and the paper's other pieces, and `compat` (every private
    Keras/TensorFlow API, used by the core and the fast subpackage alike)."""
    modules = [path.stem for path in (ROOT / PACKAGE).glob("*.py") if path.stem != "__init__"]
    assert len(modules) <= 12, sorted(modules)


def module_tree(module: str) -> ast.Module:
    """The parsed source of the package module `module`."""
    path = ROOT / (module.replace(".", "/") + ".py")
    if not path.exists():
        path = ROOT / module.replace(".", "/") / "__init__.py"
    return ast.parse(path.read_text(encoding="utf-8"))


def private_imports(tree: ast.Module) -> list[str]:
    """The private Keras/TensorFlow modules `tree` imports."""
    names = []
    for node in ast.walk(tree):
        names += ([alias.name for alias in node.names] if isinstance(node, ast.Import)
                  else [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
    return [name for name in names if name.startswith(PRIVATE_MODULES)]


def foreign_private_attributes(trees: dict[str, ast.Module]) -> list[tuple[str, int, str]]:
    """(module, line, name) of each `x._name` the modules of `trees` read or call whose
    `_name` none of them defines (as a function, class, variable or attribute): another
    library's private attribute, e.g. a Keras layer's `_tracker`."""
    private = re.compile(r"^_[^_]")  # `_name`, not `__dunder__`
    defined = set()
    for tree in trees.values():
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                defined.add(node.name)
            elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
                defined.add(node.attr)
            elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                defined.add(node.id)
    return [(module, node.lineno, node.attr) for module, tree in trees.items()
            for node in ast.walk(tree) if isinstance(node, ast.Attribute)
            and private.match(node.attr) and node.attr not in defined]


def test_the_core_imports_neither_the_fast_subpackage_nor_private_apis():
    """Dependencies point one way: a run's set-up (`RUN_SET_UP`) on `keras_transformer.fast`,
    which is on the core, never the reverse. The one module that may use private
    Keras/TensorFlow APIs is `compat`, which the core and the fast subpackage both import: no
    other module imports a private Keras/TensorFlow module, and no core module reads another
    library's private attribute."""
    graph = module_graph()
    fast = {module for module in graph if module.startswith(f"{PACKAGE}.fast")}
    core = set(graph) - fast - RUN_SET_UP - {PACKAGE}
    assert fast and len(core) > 40 and COMPAT in core and RUN_SET_UP <= set(graph)
    above = fast | RUN_SET_UP
    assert {module: graph[module] & above for module in core if graph[module] & above} == {}
    assert {module: graph[module] & RUN_SET_UP for module in fast
            if graph[module] & RUN_SET_UP} == {}
    assert private_imports(module_tree(COMPAT))  # the check below sees what it looks for
    assert {module: private_imports(module_tree(module)) for module in graph
            if module != COMPAT and private_imports(module_tree(module))} == {}
    assert foreign_private_attributes({module: module_tree(module)
                                       for module in core - {COMPAT}}) == []


def test_the_private_attribute_check_finds_another_library_s():
    """A Keras layer's private tracker is found; the package's own private names are not."""
    trees = {"own": ast.parse("class A:\n    def _step(self):\n        self._cache = 1\n"
                              "a = A()\na._step()\nb = a._cache\n"),
             "foreign": ast.parse("def unlock(layer):\n    layer._tracker.unlock()\n")}
    assert foreign_private_attributes(trees) == [("foreign", 2, "_tracker")]


def test_the_import_graph_sees_the_fast_subpackage_and_its_core_imports():
    """The graph the checks above read does contain edges into the fast subpackage."""
    graph = module_graph()
    assert f"{PACKAGE}.fast.packed" in reachable(graph, f"{PACKAGE}.fast.model")
    assert f"{PACKAGE}.model" in reachable(graph, f"{PACKAGE}.fast.model")


# A command's `main`, its `parse_args` and the parser builders read the parsed command line;
# every function below them takes typed settings or plain values.
READS_THE_COMMAND_LINE = re.compile(r"^(main|parse_args|add_\w+_arguments|\w+_parser)$")


def namespace_parameters(trees: dict[str, ast.Module]) -> list[tuple[str, int, str]]:
    """(module, line, function) of each function of `trees` (nested ones among them) that is
    no `READS_THE_COMMAND_LINE` and has a parameter annotated `argparse.Namespace` or named
    `args`: a command line's options handed below its `main`."""
    found = []
    for module, tree in trees.items():
        for node in ast.walk(tree):
            if (not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
                    or READS_THE_COMMAND_LINE.match(node.name)):
                continue
            arguments = node.args
            parameters = [*arguments.posonlyargs, *arguments.args, *arguments.kwonlyargs,
                          *filter(None, (arguments.vararg, arguments.kwarg))]
            if any(parameter.arg == "args" or (parameter.annotation is not None and re.search(
                    r"\bNamespace\b", ast.unparse(parameter.annotation)))
                   for parameter in parameters):
                found.append((module, node.lineno, node.name))
    return sorted(found)


def test_no_function_below_a_command_s_main_takes_its_namespace():
    """The command lines parse into typed settings in `main` (or `parse_args`); nothing below
    takes the argparse namespace."""
    trees = {path.stem: ast.parse(path.read_text(encoding="utf-8"))
             for path in sorted((ROOT / "trainers").glob("*.py"))}
    assert {"translate", "evaluate", "translate_corpus", "common"} <= set(trees)
    assert namespace_parameters(trees) == []


def test_the_namespace_check_finds_a_namespace_below_main():
    """Helpers taking the namespace (by annotation or by the name `args`) are found; `main`,
    `parse_args` and the parser builders are not."""
    source = ("import argparse\n"
              "def parse_args(argv) -> argparse.Namespace:\n    return args\n"
              "def add_search_arguments(parser, args): ...\n"
              "def translate_parser(args): ...\n"
              "def main(argv):\n"
              "    def write(args): ...\n"
              "def load(options: argparse.Namespace): ...\n"
              "def check(model, *, flags: 'Optional[Namespace]' = None): ...\n"
              "def plain(model: str, args_count: int): ...\n")
    assert namespace_parameters({"planted": ast.parse(source)}) == [
        ("planted", 7, "write"), ("planted", 8, "load"), ("planted", 9, "check")]


def test_importing_the_command_lines_changes_nothing():
    """`import trainers` imports no TensorFlow and leaves file descriptor 2 alone."""
    probe = ("import os, sys; before = os.fstat(2).st_ino; import trainers; "
             "print('tensorflow' in sys.modules, os.fstat(2).st_ino == before)")
    completed = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True,
                               text=True, check=True)
    assert completed.stdout.split() == ["False", "True"]
