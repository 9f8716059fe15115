"""The Moses text form reproduces the published tokenized Multi30k references from the raw
ones, and its command writes aligned files."""
import gzip
import html
from pathlib import Path

from keras_transformer.data.moses_form import moses_formatter
from trainers.moses_form import main


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
