"""Terminology for the constrained search (`TranslationModule.translate_with_terms`): a glossary of
`source phrase ||| target phrase` lines, whose target phrases a sentence must contain where it
contains their source phrases, and per-sentence constraints, one line per sentence of
tab-separated target phrases (fairseq's `--constraints` layout).

A glossary's source phrase matches whole words of a sentence, case as written; where two
entries' source phrases overlap in a sentence, the longer one's (then the earlier line's)
applies. A sentence's terms are its glossary phrases, then its own constraints, each once.
"""
from __future__ import annotations

import dataclasses
import logging
import os
import re
from typing import Sequence

from keras_transformer.data.text_files import read_lines
from keras_transformer.decoding.translator import TERM_SEPARATOR

_LOG = logging.getLogger(__name__)

ENTRY_SEPARATOR = "|||"


@dataclasses.dataclass(frozen=True)
class Glossary:
    """`entries`: (source phrase, target phrase) pairs in the file's order."""

    entries: tuple[tuple[str, str], ...]

    @classmethod
    def read(cls, path: str | os.PathLike) -> "Glossary":
        """The glossary file at `path` (read as `read_lines` reads: plain or gzipped UTF-8, a
        byte-order mark dropped): one `source phrase ||| target phrase` per line (blank lines
        and lines starting with `#` skipped); a ValueError naming the file and line of a line
        without exactly one separator, with an empty side, or with a tab. A source phrase
        given again is warned about, naming both lines: the first entry applies."""
        entries: list[tuple[str, str]] = []
        first_lines: dict[str, int] = {}
        for number, line in enumerate(read_lines(path), start=1):
            if not line or line.startswith("#"):
                continue
            parts = line.split(ENTRY_SEPARATOR)
            where = f"{os.fspath(path)}:{number}"
            if len(parts) != 2:
                raise ValueError(f"{where}: expected 'source phrase ||| target phrase', "
                                 f"got {line!r}")
            source, target = (part.strip() for part in parts)
            if not source or not target:
                raise ValueError(f"{where}: an empty {'source' if not source else 'target'}"
                                 f" phrase in {line!r}")
            if TERM_SEPARATOR in line:
                raise ValueError(f"{where}: a tab in {line!r} (phrases are words "
                                 "separated by spaces)")
            if source in first_lines:
                _LOG.warning("%s: the source phrase %r again (first at %s:%d); the first "
                             "entry applies, this one is ignored", where, source,
                             os.fspath(path), first_lines[source])
                continue
            first_lines[source] = number
            entries.append((source, target))
        return cls(tuple(entries))

    def terms(self, sentence: str) -> list[str]:
        """The target phrases of the entries whose source phrases `sentence` contains (as
        whole words; overlapping matches: the longer phrase's), in the order they occur."""
        taken: list[tuple[int, int]] = []
        found: list[tuple[int, str]] = []
        by_length = sorted(range(len(self.entries)),
                           key=lambda index: (-len(self.entries[index][0]), index))
        for index in by_length:
            source, target = self.entries[index]
            for match in re.finditer(rf"(?<!\w){re.escape(source)}(?!\w)", sentence):
                span = match.span()
                if all(span[1] <= start or end <= span[0] for start, end in taken):
                    taken.append(span)
                    found.append((span[0], target))
        return unique(target for _, target in sorted(found))


def unique(phrases) -> list[str]:
    """`phrases` without repeats, in order."""
    return list(dict.fromkeys(phrases))


def read_constraints(path: str | os.PathLike, count: int) -> list[list[str]]:
    """Per-sentence constraints: line N of `path` (read as `read_lines` reads) holds sentence
    N's target phrases separated by tabs (an empty line: none); a ValueError naming the file
    when it has other than `count` lines."""
    lines = read_lines(path)
    if len(lines) != count:
        raise ValueError(f"{os.fspath(path)}: {len(lines)} lines of constraints for {count} "
                         "sentences (one line per sentence, phrases separated by tabs)")
    return [[phrase.strip() for phrase in line.split(TERM_SEPARATOR) if phrase.strip()]
            for line in lines]


def sentence_terms(sentences: Sequence[str], glossary: Glossary | None = None,
                   constraints: Sequence[Sequence[str]] | None = None) -> list[str]:
    """Each sentence's `terms` input for `translate_with_terms`: its glossary phrases, then its
    own constraints, each once, tab-separated."""
    rows = []
    for index, sentence in enumerate(sentences):
        phrases = glossary.terms(sentence) if glossary is not None else []
        phrases += list(constraints[index]) if constraints is not None else []
        rows.append(TERM_SEPARATOR.join(unique(phrases)))
    return rows
