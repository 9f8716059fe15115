"""The command lines of the README and of `docs/*.md` use only options their commands have (the
long jobs they show, e.g. the 2-hour Multi30k recipe, are not run by CI; their flags are checked
here), and together they show every `kt-*` command."""
import importlib
import re
import shlex
from pathlib import Path

import pytest

from helpers import ROOT


def documentation_files() -> list[Path]:
    """`README.md` then every `docs/*.md`, in name order: the files whose commands are checked."""
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def console_scripts() -> dict[str, str]:
    """`kt-*` command -> the module whose `main` it runs: setup.py installs each as
    `kt-x=trainers.launch:x`, which runs `trainers.x` (`trainers/launch.py`)."""
    setup = (ROOT / "setup.py").read_text(encoding="utf-8")
    return {name: f"trainers.{function}"
            for name, function in re.findall(r'"(kt-[a-z-]+)=trainers\.launch:(\w+)"', setup)}


def documented_commands() -> list[tuple[str, str, list[str]]]:
    """(file name, command, arguments) of every `kt-*` line in the shell blocks of
    `documentation_files()`, continuation lines joined, comments dropped."""
    commands = []
    for path in documentation_files():
        text = path.read_text(encoding="utf-8")
        for block in re.findall(r"```(?:bash|sh)\n(.*?)```", text, re.DOTALL):
            for line in block.replace("\\\n", " ").splitlines():
                words = shlex.split(line, comments=True)
                if words and words[0].startswith("kt-"):
                    commands.append((path.name, words[0], words[1:]))
    return commands


def test_the_docs_exist():
    """The README's links to `docs/` point at files that exist."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    linked = set(re.findall(r"\]\((docs/[\w.-]+\.md)\)", readme))
    assert linked, "README.md links to no docs/ file"
    assert not {link for link in linked if not (ROOT / link).is_file()}


def test_the_docs_show_every_command():
    """README.md and docs/*.md together show every `kt-*` console script."""
    assert {name for _, name, _ in documented_commands()} == set(console_scripts())


@pytest.mark.parametrize("source, name, arguments", documented_commands(),
                         ids=lambda value: value if isinstance(value, str) else "")
def test_documented_command_options_exist(source, name, arguments, capsys):
    """Every `--option` of a documented `kt-*` line appears in that command's `--help`."""
    module = importlib.import_module(console_scripts()[name])
    with pytest.raises(SystemExit):
        module.parse_args(["--help"])
    usage = capsys.readouterr().out
    options = {word.split("=", 1)[0] for word in arguments if word.startswith("--")}
    unknown = {option for option in options
               if not re.search(rf"{re.escape(option)}(?![\w-])", usage)}
    assert not unknown, f"{source}: {name} has no {sorted(unknown)}"
