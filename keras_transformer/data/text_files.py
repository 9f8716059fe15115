"""Line-aligned text files, plain or gzipped, read strictly as UTF-8."""
from __future__ import annotations

import gzip
import logging
import os
import sys
from typing import IO

_LOG = logging.getLogger(__name__)
_GZIP_MAGIC = b"\x1f\x8b"


def _open_binary(path: str) -> IO[bytes]:
    """Open ``path`` for reading bytes, decompressing it when it is gzipped."""
    if not os.path.isfile(path):
        raise FileNotFoundError(f"corpus file not found: {path!r}")
    with open(path, "rb") as probe:
        gzipped = probe.read(2) == _GZIP_MAGIC
    return gzip.open(path, "rb") if gzipped else open(path, "rb")


def read_lines(path: str | os.PathLike) -> list[str]:
    """Return every line of ``path`` (plain or .gz), stripped of surrounding whitespace.

    Empty lines are kept so that the result stays aligned with other files (e.g. references).
    Raises FileNotFoundError for a missing file and ValueError naming the file and the
    1-based line number of the first line that is not valid UTF-8.
    """
    path = os.fspath(path)
    lines = []
    with _open_binary(path) as handle:
        for number, raw in enumerate(handle, start=1):
            try:
                lines.append(raw.decode("utf-8").strip())
            except UnicodeDecodeError as error:
                raise ValueError(
                    f"{path}:{number}: not valid UTF-8 (byte {error.start}: {error.reason})"
                ) from None
    return lines


def read_raw_lines(path: str | os.PathLike) -> tuple[list[bytes], list[int]]:
    """Every line of ``path`` (plain or .gz; "-" is standard input) as bytes without its line
    ending, and the 1-based numbers of the lines that are not valid UTF-8 (kept, not dropped,
    so that outputs stay aligned with the input)."""
    path = os.fspath(path)
    if path == "-":
        lines = sys.stdin.buffer.read().splitlines()
    else:
        with _open_binary(path) as handle:
            lines = handle.read().splitlines()
    invalid = []
    for number, line in enumerate(lines, start=1):
        try:
            line.decode("utf-8")
        except UnicodeDecodeError:
            invalid.append(number)
    return lines, invalid


def read_parallel(
    src_path: str | os.PathLike,
    tgt_path: str | os.PathLike,
    max_length_chars: int | None = None,
) -> tuple[list[str], list[str]]:
    """Read a line-aligned parallel corpus and return (sources, targets).

    Both files are read completely and their line counts compared before anything else
    happens; a mismatch raises ValueError naming both files and both counts. Pairs with an
    empty side, and pairs with a side longer than ``max_length_chars`` characters, are
    dropped and the counts logged at INFO level.
    """
    if max_length_chars is not None and max_length_chars < 1:
        raise ValueError(f"max_length_chars must be >= 1 or None, got {max_length_chars}")
    sources, targets = read_lines(src_path), read_lines(tgt_path)
    if len(sources) != len(targets):
        raise ValueError(
            f"parallel files differ in line count: {os.fspath(src_path)} has {len(sources)} "
            f"lines, {os.fspath(tgt_path)} has {len(targets)}"
        )
    kept_src, kept_tgt, empty, too_long = [], [], 0, 0
    for src, tgt in zip(sources, targets):
        if not src or not tgt:
            empty += 1
        elif max_length_chars is not None and max(len(src), len(tgt)) > max_length_chars:
            too_long += 1
        else:
            kept_src.append(src)
            kept_tgt.append(tgt)
    if empty or too_long:
        _LOG.info(
            "%s / %s: kept %d of %d pairs; dropped %d with an empty side and %d longer than "
            "%s characters",
            os.fspath(src_path), os.fspath(tgt_path), len(kept_src), len(sources), empty,
            too_long, max_length_chars,
        )
    return kept_src, kept_tgt
