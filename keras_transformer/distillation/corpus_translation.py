"""Translating a whole corpus as a training-data job: the teacher's side of distillation.

The input's lines are split into chunks of `chunk_lines` consecutive lines. Each chunk is
translated on its own (by whatever the caller gives: an ensemble of runs, an export) and
written whole and durably to `OUTPUT.parts/chunk-NNNNNN.txt` (`atomic_files`), so that:

- a job killed at any moment and started again skips the chunks already written and
  translates the others exactly as an uninterrupted job would (a chunk is always translated
  as one unit, whatever ran before it): the output is never duplicated, torn or lost;
- `N` shards (`Shard`: workers or machines sharing the directory) take every N-th chunk, and
  their chunks join in input order into the same output as one job's;
- `OUTPUT.parts/manifest.json` records the input (path, SHA-256, lines), the chunk size, the
  teacher's identity (weights and vocabulary digests, search settings) and the reference
  translations if the job has them; a restart or a shard whose input, chunk size, teacher or
  reference differs from it is refused, naming what differs.

With reference translations (the target side of the corpus, line for line), each chunk's
references are given to the teacher beside its lines, e.g. to keep, of each line's n-best list,
the hypothesis closest to its reference (`text_translation.closest_lines`).

`OUTPUT` itself is written (atomically) once every chunk is there, by whichever shard writes
the last one, or by `join()`; the parts stay until the caller deletes them.
"""
from __future__ import annotations

import dataclasses
import hashlib
import itertools
import json
import os
import time
from pathlib import Path
from typing import Any, Callable, Iterator, Optional

from keras_transformer.data.atomic_files import write_atomic
from keras_transformer.data.text_files import count_lines, iter_raw_lines

MANIFEST = "manifest.json"
# lines -> outputs, or with references: (lines, references) -> outputs
TranslateLines = Callable[..., list[str]]


@dataclasses.dataclass(frozen=True)
class Shard:
    """Shard `index` of `count` (1-based): the chunks `c` with `c % count == index - 1`."""

    index: int = 1
    count: int = 1

    def __post_init__(self) -> None:
        if not (isinstance(self.count, int) and self.count >= 1
                and isinstance(self.index, int) and 1 <= self.index <= self.count):
            raise ValueError(f"shard: {self.index}/{self.count} is not a shard I/N with "
                             "1 <= I <= N")

    @classmethod
    def parse(cls, text: str) -> "Shard":
        """`"I/N"`, e.g. `"2/4"`: the second of four shards."""
        index, separator, count = text.partition("/")
        if not (separator and index.strip().isdigit() and count.strip().isdigit()):
            raise ValueError(f"shard: expected I/N (e.g. 1/4), got {text!r}")
        return cls(int(index), int(count))

    def owns(self, chunk: int) -> bool:
        return chunk % self.count == self.index - 1


@dataclasses.dataclass
class Progress:
    """Where a job stands: this shard's lines translated by this process and still to do,
    the seconds spent, and the rate and time left at that rate."""

    lines_done: int
    lines_left: int
    seconds: float

    @property
    def lines_per_second(self) -> float:
        return self.lines_done / max(self.seconds, 1e-9)

    @property
    def seconds_left(self) -> Optional[float]:
        return self.lines_left / self.lines_per_second if self.lines_done else None


@dataclasses.dataclass
class Report:
    """What `CorpusTranslation.run` did: chunks translated now and found written before,
    the lines translated, the seconds, the 1-based numbers of input lines that are not valid
    UTF-8 (translated with U+FFFD replacements), whether the output is complete, and the
    1-based numbers of the lines translated from their start only (`run`'s `truncated`)."""

    chunks_translated: int
    chunks_found: int
    lines_translated: int
    seconds: float
    invalid_lines: list[int]
    complete: bool
    truncated_lines: list[int] = dataclasses.field(default_factory=list)


def file_sha256(path: str | os.PathLike) -> str:
    """The SHA-256 of a file's bytes, read in blocks."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


class CorpusTranslation:
    """The translation of the file `input_path` (source lines, plain or gzipped) into `output_path`,
    one line per input line.

    `teacher` is what translates, as JSON-able values (e.g.
    `{"runs": [...digests...], "search": {...}}`): recorded in the manifest and compared on every
    restart. A chunk is `chunk_lines` input lines (the unit of resumption and of sharding).
    `reference_path` holds optional reference translations, one per input line, plain or gzipped:
    `run`'s `translate` then gets each chunk's references too.
    """

    def __init__(self, input_path: str | os.PathLike, output_path: str | os.PathLike,
                 teacher: dict[str, Any], chunk_lines: int = 10_000,
                 reference_path: Optional[str | os.PathLike] = None):
        if not isinstance(chunk_lines, int) or chunk_lines < 1:
            raise ValueError(f"chunk_lines: must be a positive integer, got {chunk_lines!r}")
        self.input_path = Path(input_path)
        self.reference_path = None if reference_path is None else Path(reference_path)
        self.output_path = Path(output_path)
        self.parts = self.output_path.with_name(self.output_path.name + ".parts")
        self.teacher = teacher
        self.chunk_lines = chunk_lines
        self._manifest: Optional[dict[str, Any]] = None

    @property
    def manifest(self) -> dict[str, Any]:
        """The job's manifest: written on first use, checked against the one on disk."""
        if self._manifest is None:
            self._manifest = self._claim()
        return self._manifest

    @property
    def chunks(self) -> int:
        return -(-self.manifest["lines"] // self.chunk_lines)

    def chunk_path(self, chunk: int) -> Path:
        return self.parts / f"chunk-{chunk:06d}.txt"

    def missing_chunks(self) -> list[int]:
        """The chunks not written yet, in order."""
        return [chunk for chunk in range(self.chunks) if not self.chunk_path(chunk).is_file()]

    def run(self, translate: TranslateLines, shard: Shard = Shard(),
            on_progress: Optional[Callable[[Progress], None]] = None,
            truncated: Optional[Callable[[list[bytes]], list[int]]] = None) -> Report:
        """Translates the chunks of `shard` not written yet with `translate`, then joins the output
        if every chunk is there; the result is a `Report`.

        `translate` takes raw input lines (bytes, without line endings, possibly invalid UTF-8) to
        one output line each, without line breaks (e.g. `text_translation.best_lines`); with a
        reference, (lines, their references as raw lines) to output lines. `on_progress` is called
        after each chunk. `truncated` takes raw input lines to the indices of those `translate`
        translates from their start only (e.g. `LineTranslator.truncated`), reported by line number.
        """
        start = time.monotonic()
        missing = self.missing_chunks()
        todo = [chunk for chunk in missing if shard.owns(chunk)]
        lines_left = sum(self._chunk_size(chunk) for chunk in todo)
        translated_lines, invalid, cut = 0, [], []
        pending = set(todo)
        for chunk, first_number, lines, references in self._chunks():
            if chunk not in pending:
                continue
            invalid += [first_number + offset for offset, line in enumerate(lines)
                        if not _is_utf8(line)]
            if truncated is not None:
                cut += [first_number + offset for offset in truncated(lines)]
            outputs = translate(lines) if references is None else translate(lines, references)
            if len(outputs) != len(lines):
                raise RuntimeError(f"translate: {len(outputs)} outputs for the {len(lines)} "
                                   f"lines of chunk {chunk}")
            if any("\n" in output or "\r" in output for output in outputs):
                raise RuntimeError(f"translate: an output line of chunk {chunk} holds a line "
                                   "break")
            write_atomic(self.chunk_path(chunk), "".join(line + "\n" for line in outputs))
            translated_lines += len(lines)
            lines_left -= len(lines)
            if on_progress is not None:
                on_progress(Progress(translated_lines, lines_left, time.monotonic() - start))
        complete = not self.missing_chunks()
        if complete:
            self.join()
        return Report(len(todo), self.chunks - len(missing), translated_lines,
                      time.monotonic() - start, invalid, complete, cut)

    def join(self) -> None:
        """Writes the output: every chunk, in input order (FileNotFoundError naming the
        missing chunks if some are not written yet)."""
        missing = self.missing_chunks()
        if missing:
            raise FileNotFoundError(f"{self.parts}: {len(missing)} of {self.chunks} chunks "
                                    f"are not written yet (first: {missing[0]})")
        write_atomic(self.output_path,
                     b"".join(self.chunk_path(chunk).read_bytes()
                              for chunk in range(self.chunks)))

    def _claim(self) -> dict[str, Any]:
        """The manifest of this input, chunking and teacher; an existing one must agree
        (ValueError naming each difference)."""
        if not self.input_path.is_file():
            raise FileNotFoundError(f"input: no such file {str(self.input_path)!r}")
        manifest = {"input": os.fspath(self.input_path.resolve()),
                    "input_sha256": file_sha256(self.input_path),
                    "lines": count_lines(self.input_path),
                    "chunk_lines": self.chunk_lines,
                    "teacher": json.loads(json.dumps(self.teacher))}
        if self.reference_path is not None:
            manifest.update(self._reference(manifest["lines"]))
        path = self.parts / MANIFEST
        if path.is_file():
            recorded = json.loads(path.read_text(encoding="utf-8"))
            differences = [f"{key}: {recorded.get(key)!r} when the partial output was "
                           f"written, {manifest.get(key)!r} now"
                           for key in ("input_sha256", "lines", "chunk_lines", "teacher",
                                       "reference_sha256")
                           if recorded.get(key) != manifest.get(key)]
            if differences:
                raise ValueError(f"{self.parts}: this partial output was written from another "
                                 f"input, teacher or reference; continue it with the same ones, "
                                 f"or delete it to start again ({'; '.join(differences)})")
            return recorded
        self.parts.mkdir(parents=True, exist_ok=True)
        write_atomic(path, json.dumps(manifest, indent=1, sort_keys=True))
        return manifest

    def _reference(self, lines: int) -> dict[str, Any]:
        """The manifest's entries of the reference, which must have the input's lines."""
        if not self.reference_path.is_file():
            raise FileNotFoundError(f"reference: no such file {str(self.reference_path)!r}")
        reference_lines = count_lines(self.reference_path)
        if reference_lines != lines:
            raise ValueError(f"reference: {str(self.reference_path)!r} has {reference_lines} "
                             f"lines, the input {str(self.input_path)!r} {lines}: they must be "
                             "line-aligned")
        return {"reference": os.fspath(self.reference_path.resolve()),
                "reference_sha256": file_sha256(self.reference_path)}

    def _chunk_size(self, chunk: int) -> int:
        return min(self.chunk_lines, self.manifest["lines"] - chunk * self.chunk_lines)

    def _chunks(self) -> Iterator[tuple[int, int, list[bytes], Optional[list[bytes]]]]:
        """`(chunk, its first line's 1-based number, its lines, their references or None)`
        of the input, streamed."""
        references = (iter_raw_lines(self.reference_path) if self.reference_path is not None
                      else itertools.repeat(None))
        pairs = zip(iter_raw_lines(self.input_path), references)
        for chunk in itertools.count():
            block = list(itertools.islice(pairs, self.chunk_lines))
            if not block:
                return
            lines, chunk_references = (list(side) for side in zip(*block))
            yield (chunk, chunk * self.chunk_lines + 1, lines,
                   None if self.reference_path is None else chunk_references)


def _is_utf8(line: bytes) -> bool:
    try:
        line.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True
