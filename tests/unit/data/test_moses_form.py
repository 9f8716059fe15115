"""The Moses text form reproduces the published tokenized Multi30k references from the raw
ones, and its command writes aligned files."""
import gzip
import html
import re
from pathlib import Path

import pytest
from keras_transformer.data.moses_form import moses_formatter
from trainers.moses_form import main
from helpers import ROOT


@pytest.mark.slow
def test_the_tokenized_test_references_come_out_of_the_raw_ones_line_for_line(multi30k: Path):
    form = moses_formatter("de")
    with gzip.open(multi30k / "test_2016_flickr.de.gz", "rt", encoding="utf-8") as raw:
        ours = [form(line.strip()) for line in raw]
    published = [html.unescape(line.rstrip("\n")) for line in
                 (multi30k / "tok" / "test_2016_flickr.lc.norm.tok.de").open(encoding="utf-8")]
    assert len(ours) == len(published) == 1000
    assert ours == published


def test_the_command_writes_aligned_files_and_names_a_mismatch(tmp_path: Path, capsys):
    (tmp_path / "a.en").write_text("A dog's \u201cball\u201d.\n\nTwo  men.\n", encoding="utf-8")
    (tmp_path / "a.de").write_text("Ein Hund.\nLeer\nZwei M\u00e4nner.\n", encoding="utf-8")
    assert main(["--src", str(tmp_path / "a.en"), "--tgt", str(tmp_path / "a.de"),
                 "--langs", "en", "de", "--output-prefix", str(tmp_path / "out" / "b")]) == 0
    english = (tmp_path / "out" / "b.en").read_text(encoding="utf-8").splitlines()
    german = (tmp_path / "out" / "b.de").read_text(encoding="utf-8").splitlines()
    assert english == ["a dog 's \" ball . \"", "", "two men ."]  # Moses moves the period
    assert german == ["ein hund .", "leer", "zwei männer ."]
    (tmp_path / "short.de").write_text("Ein Hund.\n", encoding="utf-8")
    assert main(["--src", str(tmp_path / "a.en"), "--tgt", str(tmp_path / "short.de"),
                 "--langs", "en", "de", "--output-prefix", str(tmp_path / "c")]) == 2
    assert "differ in line count" in capsys.readouterr().err


def test_a_refused_command_writes_nothing(tmp_path: Path, capsys):
    """A missing input is named before anything is written (not even the output directory);
    a line count that differs, found at the end, leaves no output and earlier ones as they
    were."""
    (tmp_path / "a.en").write_text("One.\nTwo.\n", encoding="utf-8")
    (tmp_path / "a.de").write_text("Eins.\n", encoding="utf-8")
    missing = tmp_path / "missing.de"
    assert main(["--src", str(tmp_path / "a.en"), "--tgt", str(missing), "--langs", "en", "de",
                 "--output-prefix", str(tmp_path / "out" / "b")]) == 2
    assert f"corpus file not found: {str(missing)!r}" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()
    (tmp_path / "c.en").write_text("earlier\n", encoding="utf-8")
    assert main(["--src", str(tmp_path / "a.en"), "--tgt", str(tmp_path / "a.de"), "--langs",
                 "en", "de", "--output-prefix", str(tmp_path / "c")]) == 2
    assert "differ in line count" in capsys.readouterr().err
    assert sorted(path.name for path in tmp_path.iterdir()) == ["a.de", "a.en", "c.en"]
    assert (tmp_path / "c.en").read_text(encoding="utf-8") == "earlier\n"


def test_the_docs_count_the_lines_that_differ_as_written(multi30k: Path):
    """docs/training.md's figures: the lines of the tokenized references that differ from
    the form as written (their `&quot;`/`&apos;` escapes), German and English; once read back,
    none differ."""
    docs = " ".join((ROOT / "docs" / "training.md").read_text(
        encoding="utf-8").split())
    german, english = re.search(r"\((\d+) of the 1,000 German lines, (\d+) of the English "
                                r"differ as written\)", docs).groups()
    for lang, documented in (("de", german), ("en", english)):
        form = moses_formatter(lang)
        with gzip.open(multi30k / f"test_2016_flickr.{lang}.gz", "rt", encoding="utf-8") as raw:
            ours = [form(line.strip()) for line in raw]
        published = (multi30k / "tok" / f"test_2016_flickr.lc.norm.tok.{lang}").read_text(
            encoding="utf-8").splitlines()
        assert sum(a != b for a, b in zip(ours, published)) == int(documented), lang
        assert ours == [html.unescape(line) for line in published], lang
