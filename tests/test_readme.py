"""The README's command lines use only options their commands have (the long jobs it shows,
e.g. the 2-hour Multi30k recipe, are not run by CI; their flags are checked here)."""
import importlib
import re
import shlex
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def console_scripts() -> dict[str, str]:
    """`kt-*` command -> its module, as setup.py installs them."""
    setup = (ROOT / "setup.py").read_text(encoding="utf-8")
    return dict(re.findall(r'"(kt-[a-z-]+)=([\w.]+):main"', setup))


def readme_commands() -> list[tuple[str, list[str]]]:
    """(command, arguments) of every `kt-*` line in the README's shell blocks, continuation
    lines joined, comments dropped."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    commands = []
    for block in re.findall(r"```(?:bash|sh)\n(.*?)```", text, re.DOTALL):
        for line in block.replace("\\\n", " ").splitlines():
            words = shlex.split(line, comments=True)
            if words and words[0].startswith("kt-"):
                commands.append((words[0], words[1:]))
    return commands


def test_the_readme_shows_every_command():
    assert {name for name, _ in readme_commands()} == set(console_scripts())


@pytest.mark.parametrize("name, arguments", readme_commands(),
                         ids=lambda value: value if isinstance(value, str) else "")
def test_readme_command_options_exist(name, arguments, capsys):
    module = importlib.import_module(console_scripts()[name])
    with pytest.raises(SystemExit):
        module.parse_args(["--help"])
    usage = capsys.readouterr().out
    options = {word.split("=", 1)[0] for word in arguments if word.startswith("--")}
    unknown = {option for option in options
               if not re.search(rf"{re.escape(option)}(?![\w-])", usage)}
    assert not unknown, f"README: {name} has no {sorted(unknown)}"
