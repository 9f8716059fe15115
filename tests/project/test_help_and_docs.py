"""Help texts and docs against the code: every command's `--help` shows each option's default
and describes the command in whole sentences, and every `--flag` the prose of README.md and
docs/*.md names exists in the command it names (the shell blocks: tests/project/test_readme.py)."""
import argparse
import importlib
import importlib.util
import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Callable

import pytest

from trainers.arguments import DEFAULT_PRESET, PARSERS
from trainers.launch import COMMANDS
from helpers import ROOT

DOCUMENTS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
CLIENT = "examples/serving_client.py"


class _Parsed(Exception):
    """Raised instead of parsing: the parser a command built is all the test wants."""


def parser_of(parse_args: Callable[[list[str]], object],
              monkeypatch: pytest.MonkeyPatch) -> argparse.ArgumentParser:
    """The `argparse` parser a command's `parse_args` builds, caught as it parses."""
    caught = []

    def catch(parser, *args, **kwargs):
        caught.append(parser)
        raise _Parsed

    with monkeypatch.context() as patch:
        patch.setattr(argparse.ArgumentParser, "parse_args", catch)
        with pytest.raises(_Parsed):
            parse_args([])
    return caught[0]


def command_parser(command: str, monkeypatch: pytest.MonkeyPatch) -> argparse.ArgumentParser:
    """The parser of `trainers.<command>` (`python -m trainers COMMAND`, `kt-*`)."""
    return parser_of(importlib.import_module(f"trainers.{command}").parse_args, monkeypatch)


def client_parser(monkeypatch: pytest.MonkeyPatch) -> argparse.ArgumentParser:
    """The parser of examples/serving_client.py."""
    spec = importlib.util.spec_from_file_location("serving_client",
                                                  ROOT / "examples" / "serving_client.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return parser_of(module.parse_args, monkeypatch)


def shown_forms(value) -> set[str]:
    """How a default may be written in a help text: `64`, `2,000,000`, `10` for 10.0, `en`."""
    if isinstance(value, list):
        return {" ".join(map(str, value))}
    forms = {str(value)}
    if isinstance(value, int) and not isinstance(value, bool):
        forms.add(f"{value:,}")
    if isinstance(value, float):
        forms |= {f"{value:g}", f"{value:,g}"}
    return forms


def options_with_defaults(parser: argparse.ArgumentParser) -> list[argparse.Action]:
    """The parser's shown options and arguments that have a default worth showing (not None,
    not a switch's False, not an empty list)."""
    return [action for action in parser._actions
            if action.help != argparse.SUPPRESS and action.default is not None
            and action.default is not False and action.default != []
            and action.default != argparse.SUPPRESS]


@pytest.mark.parametrize("command", COMMANDS)
def test_help_shows_every_default(command, monkeypatch):
    """Each option with a default says "default" and shows the value (`(default: 64)`,
    `translation (default)`)."""
    parser = command_parser(command, monkeypatch)
    missing = []
    for action in options_with_defaults(parser):
        # As --help prints it (a formatter class may add the default).
        text = parser._get_formatter()._expand_help(action) if action.help else ""
        if "default" not in text or not any(form in text
                                             for form in shown_forms(action.default)):
            missing.append(f"{'/'.join(action.option_strings) or action.dest} "
                           f"(default {action.default!r}): {text!r}")
    assert not missing, f"{command}: help without its default:\n" + "\n".join(missing)


@pytest.mark.parametrize("command", COMMANDS)
def test_descriptions_are_whole_sentences(command, monkeypatch):
    description = command_parser(command, monkeypatch).description
    assert description.endswith(".") and description.count("(") == description.count(")")


@pytest.mark.parametrize("command", [command for command in COMMANDS if command in (
    "evaluate", "export", "plot_attention", "translate", "translate_corpus")])
def test_weights_help_says_which_weights_are_the_default(command, monkeypatch):
    action = next(action for action in command_parser(command, monkeypatch)._actions
                  if "--weights" in action.option_strings)
    assert "default: the weights the run's result.json chose" in action.help
    assert "see above" not in action.help and "as kt-evaluate" not in action.help


def test_help_answers_from_the_grammar_without_importing_tensorflow(monkeypatch):
    """`COMMAND --help` through the launcher (`kt-*`, `python -m trainers`) prints the parser
    the command parses with, in a process that never imports TensorFlow, Keras or the model
    (`launch.print_help`); a help flag after `--` is an argument like any other."""
    code = """
import contextlib, io, json, sys
from trainers import launch
printed = {}
for command in launch.COMMANDS:
    with contextlib.redirect_stdout(io.StringIO()) as output:
        try:
            launch.launch(command, ["--help"])
        except SystemExit as stop:
            printed[command] = (stop.code, output.getvalue())
heavy = [name for name in ("tensorflow", "keras", "keras_transformer.model") if name in sys.modules]
print(json.dumps({"printed": printed, "heavy": heavy,
                  "after --": launch.asks_for_help(["x", "--", "--help"])}))
"""
    monkeypatch.setenv("COLUMNS", "100")  # argparse's width, here and in the child
    result = json.loads(subprocess.run([sys.executable, "-c", code], cwd=ROOT, check=True,
                                       capture_output=True, text=True).stdout)
    assert result["heavy"] == [] and result["after --"] is False
    assert set(PARSERS) == set(COMMANDS) == set(result["printed"])
    for command, (code, text) in result["printed"].items():
        assert code == 0 and text == command_parser(command, monkeypatch).format_help(), command


def test_train_and_prepare_have_one_default_preset(monkeypatch):
    presets = {command: next(action.default
                             for action in command_parser(command, monkeypatch)._actions
                             if "--preset" in action.option_strings)
               for command in ("train", "prepare")}
    assert presets == {"train": DEFAULT_PRESET, "prepare": DEFAULT_PRESET}


def test_export_help_names_the_models_it_takes(monkeypatch):
    """`kt-export`'s model: a .keras file, a directory holding one, or a run directory (what
    `export.load_model` takes); a directory of checkpoints alone is refused."""
    model = next(action for action in command_parser("export", monkeypatch)._actions
                 if action.dest == "model")
    assert "checkpoint directory" not in model.help
    assert all(kind in model.help for kind in (".keras file", "directory holding one",
                                               "run directory"))


def prose_code_spans() -> list[tuple[str, str]]:
    """(file name, text) of every inline code span outside the fenced blocks of
    `DOCUMENTS` that holds a `--flag`."""
    spans = []
    for path in DOCUMENTS:
        prose = re.sub(r"```.*?```", "", path.read_text(encoding="utf-8"), flags=re.DOTALL)
        spans += [(path.name, " ".join(span.split()))
                  for span in re.findall(r"`([^`]+)`", prose) if re.search(r"(^|\s)--\w", span)]
    return spans


def span_command(span: str) -> str | None:
    """The project command a code span runs (`kt-train ...` -> "train", `python -m trainers
    moses_form ...` -> "moses_form", `examples/serving_client.py ...` -> `CLIENT`), "" for a
    bare `--flag ...`, None for another program's line (`sacrebleu ...`, `docker run ...`)."""
    words = span.split()
    if words[0].startswith("--"):
        return ""
    if words[0] == CLIENT:
        return CLIENT
    if words[0].startswith("kt-"):
        return words[0][3:].replace("-", "_")
    if words[:3] == ["python", "-m", "trainers"]:
        return words[3]
    return words[0] if words[0] in COMMANDS else None


def flags_of(parser: argparse.ArgumentParser) -> set[str]:
    return {flag for action in parser._actions for flag in action.option_strings}


def test_every_flag_the_prose_names_exists(monkeypatch):
    """A span naming a command (`kt-export --describe`) uses that command's flags; a bare
    `--flag` is some command's (or examples/serving_client.py's). Flags spelled with
    underscores are TF Serving's (`--model_config_file`), never the project's."""
    spans = prose_code_spans()
    assert len(spans) > 50  # the prose is read
    flags = {command: flags_of(command_parser(command, monkeypatch)) for command in COMMANDS}
    flags[CLIENT] = flags_of(client_parser(monkeypatch))
    everywhere = set().union(*flags.values())
    unknown = []
    for source, span in spans:
        command = span_command(span)
        if command is None:
            continue
        known = flags[command] if command else everywhere
        for flag in re.findall(r"(?:^|[\s/])(--[\w-]+)", span):
            if "_" in flag and not command:
                continue  # TF Serving's
            if flag not in known:
                unknown.append(f"{source}: `{span}`: {flag}")
    assert not unknown, "\n".join(unknown)


@pytest.mark.parametrize("command, required", [("train", []), ("prepare", ["--output-dir", "x"]),
                                               ("evaluate", ["run"])])
def test_tfds_flags_have_one_spelling_and_read_the_earlier_one(command, required, monkeypatch):
    """The tensorflow-datasets languages are `--tfds-source-language`/`--tfds-target-language`
    in every command (`--target-language` is a model's); `--source-lang`/`--target-lang`, and
    kt-evaluate's `--split` for `--tfds-split`, are still read but no longer shown."""
    parser = command_parser(command, monkeypatch)
    new = parser.parse_args(required + ["--tfds-source-language", "fr",
                                        "--tfds-target-language", "pt"])
    old = parser.parse_args(required + ["--source-lang", "fr", "--target-lang", "pt"])
    default = parser.parse_args(required)
    assert (new.source_lang, new.target_lang) == (old.source_lang, old.target_lang) == ("fr", "pt")
    assert (default.source_lang, default.target_lang) == ("en", "de")
    shown = parser.format_help()
    assert "--tfds-source-language" in shown and "--source-lang " not in shown
    assert "--target-lang " not in shown
    if command == "evaluate":
        assert parser.parse_args(required + ["--split", "dev"]).split == "dev"
        assert parser.parse_args(required + ["--tfds-split", "dev"]).split == "dev"
        assert "--split " not in shown and default.split == "test"


def python_blocks(path: Path) -> list[str]:
    """The ```python blocks of the Markdown file `path`, in order."""
    return re.findall(r"```python\n(.*?)```", path.read_text(encoding="utf-8"), re.DOTALL)


@pytest.mark.slow
def test_every_api_snippet_runs_as_written(demo_vocab, tmp_path, monkeypatch):
    """docs/api.md's Python blocks, each run as a reader copies it into a fresh interpreter,
    beside a run directory at `runs/demo` (a random model of the demo vocabulary)."""
    from helpers import random_run

    random_run(demo_vocab, tmp_path / "runs" / "demo")
    monkeypatch.chdir(tmp_path)
    blocks = python_blocks(ROOT / "docs" / "api.md")
    assert len(blocks) >= 2
    from keras_transformer import fast
    suite_kernels = fast.active()
    try:
        for block in blocks:
            exec(compile(block, "docs/api.md", "exec"), {})
    finally:
        fast.set_implementation(suite_kernels)  # the suite's (conftest.py), whatever a block set
