"""Local parallel files: formats, validation errors and dropped-pair accounting."""
import gzip
import io
import logging
import sys
from pathlib import Path

import pytest

from keras_transformer.data import read_lines, read_parallel
from keras_transformer.data import text_files
from keras_transformer.data.text_files import iter_parallel, read_raw_lines


def _write(path: Path, data: bytes, gzipped: bool = False) -> Path:
    path.write_bytes(gzip.compress(data) if gzipped else data)
    return path


def test_reads_plain_and_gzip_alike(tmp_path: Path) -> None:
    src = _write(tmp_path / "a.en.gz", b"hello world\n  two  spaces \n", gzipped=True)
    tgt = _write(tmp_path / "a.de", b"hallo welt\r\nzwei\n")
    assert read_parallel(src, tgt) == (["hello world", "two  spaces"], ["hallo welt", "zwei"])


def test_line_count_mismatch_names_both_files_and_counts(tmp_path: Path) -> None:
    src = _write(tmp_path / "x.en", b"a\nb\nc\n")
    tgt = _write(tmp_path / "x.de", b"a\nb\n", gzipped=False)
    with pytest.raises(ValueError) as error:
        read_parallel(src, tgt)
    message = str(error.value)
    assert str(src) in message and str(tgt) in message
    assert "3" in message and "2" in message


def test_bad_utf8_names_file_and_line(tmp_path: Path) -> None:
    path = _write(tmp_path / "bad.de.gz", b"gut\nauch gut\nkaputt \xff\xfe\n", gzipped=True)
    with pytest.raises(ValueError, match=rf"{path}:3: not valid UTF-8"):
        read_lines(path)


def test_missing_file_is_a_clear_error(tmp_path: Path) -> None:
    existing = _write(tmp_path / "ok.en", b"a\n")
    with pytest.raises(FileNotFoundError, match="nope.de"):
        read_parallel(existing, tmp_path / "nope.de")


def test_empty_and_overlong_pairs_dropped_and_logged(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    src = _write(tmp_path / "d.en", b"one\n\nthree\n" + b"x" * 50 + b"\nfive\n")
    tgt = _write(tmp_path / "d.de", b"eins\nzwei\n \nfuenfzig\nfuenf\n")
    with caplog.at_level(logging.INFO, logger="keras_transformer.data.text_files"):
        sources, targets = read_parallel(src, tgt, max_length_chars=20)
    assert (sources, targets) == (["one", "five"], ["eins", "fuenf"])
    assert "kept 2 of 5 pairs; dropped 2 with an empty side and 1 longer than 20" in caplog.text


def test_read_lines_keeps_empty_lines_for_alignment(tmp_path: Path) -> None:
    assert read_lines(_write(tmp_path / "r.de", b"a\n\nb\n")) == ["a", "", "b"]


def test_multi30k_splits_read_completely(multi30k: Path) -> None:
    for split, size in (("train", 29000), ("val", 1014), ("test_2016_flickr", 1000)):
        sources, targets = read_parallel(multi30k / f"{split}.en.gz", multi30k / f"{split}.de.gz")
        assert len(sources) == len(targets) == size
    assert sources[0] and targets[0] and "\n" not in sources[0]


def test_a_byte_order_mark_at_a_file_start_is_dropped_and_named_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(text_files, "_MARKED", set())  # the files warned about so far
    mark = "\ufeff".encode()
    src = _write(tmp_path / "m.en", mark + b"I have apples\r\nmid \xef\xbb\xbf mark\n")
    tgt = _write(tmp_path / "m.de.gz", mark + b"ich habe\n\n", gzipped=True)
    with caplog.at_level(logging.WARNING, logger="keras_transformer.data.text_files"):
        assert read_lines(src) == ["I have apples", "mid \ufeff mark"]  # only the file's start
        assert read_raw_lines(src) == ([b"I have apples", b"mid \xef\xbb\xbf mark"], [])
        assert list(iter_parallel(src, tgt)) == [("I have apples", "ich habe"),
                                                 ("mid \ufeff mark", "")]
        assert read_lines(_write(tmp_path / "only.en", mark)) == [""]
        monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(mark + b"a\n")))
        assert read_raw_lines("-") == ([b"a"], [])
    warnings = [record.getMessage() for record in caplog.records]
    for name in (src, tgt, tmp_path / "only.en", "standard input"):
        assert warnings.count(f"{name}: starts with a UTF-8 byte-order mark (U+FEFF), "
                              "dropped") == 1, warnings
    assert len(warnings) == 4


def test_a_path_that_is_no_regular_file_is_named_as_such(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="'/dev/null' is not a regular file"):
        read_lines("/dev/null")
    with pytest.raises(ValueError, match=rf"'{tmp_path}' is not a regular file \(a directory\)"):
        read_lines(tmp_path)
    with pytest.raises(FileNotFoundError, match="not found"):
        read_lines(tmp_path / "nope")
