"""Line-aligned text files, plain or gzipped, read strictly as UTF-8 (a byte-order mark at a
file's start dropped, with a warning naming the file once)."""
from __future__ import annotations

import gzip
import itertools
import logging
import os
import sys
import zlib
from collections.abc import Iterator, Sequence
from contextlib import nullcontext
from pathlib import Path
from typing import IO, Optional

_LOG = logging.getLogger(__name__)
SHARED_DATA_VARIABLE = "KT_SHARED_DATA"
_PROJECT_ROOT = Path(__file__).resolve().parents[2]
_GZIP_MAGIC = b"\x1f\x8b"
_GZIP_ERRORS = (EOFError, gzip.BadGzipFile, zlib.error)
BYTE_ORDER_MARK = b"\xef\xbb\xbf"  # U+FEFF in UTF-8, which Windows editors start files with
_MARKED: set[str] = set()  # the files whose byte-order mark has been warned about
FIRST_LINES = 10  # line numbers a report of lines (dropped, truncated, ...) names at most


def require_files(*paths: str | os.PathLike) -> None:
    """Raises FileNotFoundError naming the first of `paths` that does not exist, ValueError
    naming the first that is no regular file (`file_problem`), checked before a command writes
    anything."""
    for path in paths:
        if not os.path.exists(path):
            raise FileNotFoundError(f"corpus file not found: {os.fspath(path)!r}")
        problem = file_problem(path)
        if problem:
            raise ValueError(f"{os.fspath(path)!r} {problem}")


def file_problem(path: str | os.PathLike) -> Optional[str]:
    """Why `path` cannot be read as a text file ("does not exist", "is not a regular file (a
    directory)", ... for a device such as /dev/null), or None for a regular file."""
    if os.path.isfile(path):
        return None
    if not os.path.exists(path):
        return "does not exist"
    kind = "a directory" if os.path.isdir(path) else "a device, pipe or socket"
    return f"is not a regular file ({kind})"


def _open_binary(path: str) -> IO[bytes]:
    """Open ``path`` for reading bytes, decompressing it when it is gzipped."""
    require_files(path)
    with open(path, "rb") as probe:
        gzipped = probe.read(2) == _GZIP_MAGIC
    return gzip.open(path, "rb") if gzipped else open(path, "rb")


def _numbered_lines(path: str, handle: IO[bytes]) -> Iterator[tuple[int, bytes]]:
    """Each line of ``handle`` (opened from ``path``) with its 1-based number, line ending kept.

    Only LF ends a line (a lone CR is content, as for ``wc -l`` and sacrebleu). A UTF-8
    byte-order mark starting line 1 is dropped (`dropped_mark`). Corrupt or truncated gzip
    data raises ValueError naming the file and the last line read.
    """
    number = 0
    try:
        for number, raw in enumerate(handle, start=1):
            yield number, dropped_mark(path, raw) if number == 1 else raw
    except _GZIP_ERRORS as error:
        raise ValueError(
            f"{path}: corrupt or truncated gzip data after line {number} ({error})"
        ) from None


def dropped_mark(path: str, first: bytes) -> bytes:
    """`first`, the first bytes of the file `path` ("-": standard input), without the UTF-8
    byte-order mark it may start with; the first time a file has one, a warning names it (the
    mark is no text: kept, it would be translated, scored or matched as a word)."""
    if not first.startswith(BYTE_ORDER_MARK):
        return first
    name = "standard input" if path == "-" else path
    if name not in _MARKED:
        _MARKED.add(name)
        _LOG.warning("%s: starts with a UTF-8 byte-order mark (U+FEFF), dropped", name)
    return first[len(BYTE_ORDER_MARK):]


def read_lines(path: str | os.PathLike) -> list[str]:
    """Return every line of ``path`` (plain or .gz), stripped of surrounding whitespace.

    Empty lines are kept so that the result stays aligned with other files (e.g. references).
    Raises FileNotFoundError for a missing file, ValueError naming the file and the 1-based
    line number of the first line that is not valid UTF-8, and ValueError naming the file for
    corrupt gzip data.
    """
    path = os.fspath(path)
    with _open_binary(path) as handle:
        return [_decoded(path, number, raw) for number, raw in _numbered_lines(path, handle)]


def _decoded(path: str, number: int, raw: bytes) -> str:
    """Line ``number`` of ``path`` as stripped text; a ValueError naming both if not UTF-8."""
    try:
        return raw.decode("utf-8").strip()
    except UnicodeDecodeError as error:
        raise ValueError(
            f"{path}:{number}: not valid UTF-8 (byte {error.start}: {error.reason})"
        ) from None


def count_lines(path: str | os.PathLike) -> int:
    """The number of lines ``read_lines`` would return, counted without holding the file."""
    path, count, last = os.fspath(path), 0, b"\n"
    with _open_binary(path) as handle:
        try:
            for chunk in iter(lambda: handle.read(1 << 20), b""):
                count += chunk.count(b"\n")
                last = chunk[-1:]
        except _GZIP_ERRORS as error:
            raise ValueError(f"{path}: corrupt or truncated gzip data ({error})") from None
    return count + (last != b"\n")


def iter_parallel(src_path: str | os.PathLike,
                  tgt_path: str | os.PathLike) -> Iterator[tuple[str, str]]:
    """Every line pair of a line-aligned parallel corpus, stripped, streamed (empty sides
    included), in one pass. Files of different line counts raise ValueError naming both files
    and both counts when the shorter one ends (consumers that write output, such as
    `prepare`, leave nothing that looks finished); bad UTF-8 raises naming file:line."""
    src_path, tgt_path = os.fspath(src_path), os.fspath(tgt_path)
    with _open_binary(src_path) as sources, _open_binary(tgt_path) as targets:
        numbered = (_numbered_lines(src_path, sources), _numbered_lines(tgt_path, targets))
        for source, target in itertools.zip_longest(*numbered):
            if source is None or target is None:
                longer = 0 if target is None else 1
                reached = (source or target)[0]  # the longer file's line without a partner
                counts = {longer: reached + sum(1 for _ in numbered[longer]),
                          1 - longer: reached - 1}
                raise ValueError(f"parallel files differ in line count: {src_path} has "
                                 f"{counts[0]} lines, {tgt_path} has {counts[1]}")
            yield _decoded(src_path, source[0], source[1]), _decoded(tgt_path, target[0],
                                                                     target[1])


def read_raw_lines(path: str | os.PathLike) -> tuple[list[bytes], list[int]]:
    """Every line of ``path`` (plain or .gz; "-" is standard input) as bytes without its line
    ending, and the 1-based numbers of the lines that are not valid UTF-8 (kept, not dropped,
    so that outputs stay aligned with the input).

    Lines are those of ``read_lines``: LF or CR LF ends one, a lone CR is content.
    """
    lines = list(iter_raw_lines(path))
    invalid = []
    for number, line in enumerate(lines, start=1):
        try:
            line.decode("utf-8")
        except UnicodeDecodeError:
            invalid.append(number)
    return lines, invalid


def read_document(path: str | os.PathLike) -> tuple[str, list[int]]:
    """The whole text of ``path`` (plain or .gz; "-" is standard input), line endings kept as
    they are (a byte-order mark at its start dropped: `dropped_mark`), and the 1-based numbers
    of its lines that are not valid UTF-8 (decoded with U+FFFD replacements)."""
    path = os.fspath(path)
    lines: list[str] = []
    invalid = []
    with nullcontext(sys.stdin.buffer) if path == "-" else _open_binary(path) as handle:
        for number, raw in _numbered_lines(path, handle):
            try:
                lines.append(raw.decode("utf-8"))
            except UnicodeDecodeError:
                lines.append(raw.decode("utf-8", "replace"))
                invalid.append(number)
    return "".join(lines), invalid


def iter_raw_lines(path: str | os.PathLike) -> Iterator[bytes]:
    """The lines of `read_raw_lines`, streamed."""
    path = os.fspath(path)
    with nullcontext(sys.stdin.buffer) if path == "-" else _open_binary(path) as handle:
        for _, raw in _numbered_lines(path, handle):
            yield raw[:-2] if raw.endswith(b"\r\n") else raw.removesuffix(b"\n")


def read_parallel(
    src_path: str | os.PathLike,
    tgt_path: str | os.PathLike,
    max_length_chars: int | None = None,
) -> tuple[list[str], list[str]]:
    """Read a line-aligned parallel corpus and return (sources, targets).

    The files' line counts are compared before anything else happens; a mismatch raises ValueError
    naming both files and both counts. Pairs with an empty side, and pairs with a side longer than
    ``max_length_chars`` characters, are dropped and the counts logged at INFO level.
    """
    if max_length_chars is not None and max_length_chars < 1:
        raise ValueError(f"max_length_chars must be >= 1 or None, got {max_length_chars}")
    kept_src, kept_tgt, read, empty, too_long = [], [], 0, 0, 0
    for read, (src, tgt) in enumerate(iter_parallel(src_path, tgt_path), start=1):
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
            os.fspath(src_path), os.fspath(tgt_path), len(kept_src), read, empty,
            too_long, max_length_chars,
        )
    return kept_src, kept_tgt


def line_list(numbers: Sequence[int], count: Optional[int] = None) -> str:
    """Line `numbers` (ascending) as "line 3", "lines 3, 17", or, for more than `FIRST_LINES`
    or fewer than `count` (the lines found, of which `numbers` are the first; default: as
    many as `numbers`), "lines 3, 17, ..."."""
    count = len(numbers) if count is None else count
    shown = ", ".join(str(number) for number in numbers[:FIRST_LINES])
    more = ", ..." if count > min(len(numbers), FIRST_LINES) else ""
    return f"line{'s' if count > 1 else ''} {shown}{more}"


def shared_data_dir() -> Path:
    """Return ``$KT_SHARED_DATA``, or ``../shared/data`` relative to the project root.

    The directory may not exist; callers check and skip or fail with their own message.
    """
    configured = os.environ.get(SHARED_DATA_VARIABLE)
    return Path(configured) if configured else _PROJECT_ROOT.parent / "shared" / "data"
