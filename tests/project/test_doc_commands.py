"""The commands of docs/decoding-and-serving.md's "Terminology" and "Confidence" sections run as
written, in a workspace holding what they name: the quick start's run (`runs/demo`, a random
one here) and export (`saved_models/demo-staging`), an imported NLLB-200-style run
(`runs/nllb`) and the input files. (Every documented command's options: test_readme.py.)"""
import io
import re
import shlex
from pathlib import Path

import pytest

from helpers import ROOT, random_run
from m2m_100_models import M2MVariant, training_sentences, write_m2m_100_folder
from trainers import export, import_model, score, translate

DOCUMENT = ROOT / "docs" / "decoding-and-serving.md"
SECTIONS = ("Terminology", "Confidence")
MAINS = {"kt-translate": translate.main, "kt-score": score.main}


def section_commands(title: str) -> list[list[str]]:
    """The `kt-*` lines of the shell blocks of the document's section `title` (up to the next
    `## `), continuation lines joined, comments dropped."""
    text = DOCUMENT.read_text(encoding="utf-8")
    section = re.search(rf"^## {title}.*?(?=^## )", text, re.DOTALL | re.MULTILINE).group(0)
    commands = []
    for block in re.findall(r"```(?:bash|sh)\n(.*?)```", section, re.DOTALL):
        for line in block.replace("\\\n", " ").splitlines():
            words = shlex.split(line, comments=True)
            if words and words[0].startswith("kt-"):
                commands.append(words)
    return commands


@pytest.fixture(scope="module")
def workspace(demo_vocab, tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("docs")
    # kt-score scores kt-translate's output: positions to spare and a short search, as a random
    # model's byte pieces read back as three each (U+FFFD)
    run = random_run(demo_vocab, root / "runs" / "demo", max_length=128,
                     max_decode_extra=5)
    assert export.main([str(run.root), "--name", "demo-staging", "--base-dir",
                        str(root / "saved_models"), "--beam-size", "2"]) == 0
    folder = write_m2m_100_folder(root / "hf", M2MVariant(style="nllb", encoder_layers=1))
    assert import_model.main([str(folder), "--output-dir", str(root / "runs" / "nllb")]) == 0
    lines = ["\ufeffa sea lion at the checkout", "one cat", " \t", "", "she sees three dogs"]
    for name in ("input.en", "test.en"):
        (root / name).write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    (root / "glossary.txt").write_text("# products\nsea lion ||| Seelöwe\ncheckout ||| Kasse\n",
                                       encoding="utf-8")
    (root / "phrases.de").write_text("Seelöwe\tKasse\nKatze\n\n\n\n", encoding="utf-8")
    sources, targets = training_sentences(3, seed=5)
    (root / "test.fr").write_text("".join(line + "\n" for line in targets), encoding="utf-8")
    return root


@pytest.mark.slow
@pytest.mark.parametrize("title", SECTIONS)
def test_the_sections_commands_run_as_written(title, workspace, monkeypatch, capsys):
    commands = section_commands(title)
    assert commands, title
    monkeypatch.chdir(workspace)
    if title == "Confidence":  # the NLLB example scores its own three-line pair of files
        (workspace / "test.en").write_text("".join(
            line + "\n" for line in training_sentences(3, seed=5)[0]), encoding="utf-8")
    for words in commands:
        argv, stdout = words[1:], io.StringIO()
        if ">" in argv:
            argv = argv[:argv.index(">")]
        run = MAINS[words[0]]
        code = run(argv, stdout=stdout) if run is translate.main else run(argv)
        assert code == 0, (" ".join(words), capsys.readouterr().err)
