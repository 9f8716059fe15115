"""Sentences of a block of text as offsets, and sentences longer than a model takes split
where the translation suffers least: at clause punctuation, else between words, else (a word
longer than the model takes) between characters. Nothing is dropped: the text outside the
spans is whitespace, kept by the caller as it is."""
from __future__ import annotations

import re
from typing import Callable, Iterable, Sequence

Span = tuple[int, int]
# A segmenter: text -> its sentences, as strings in order (a library's own output).
Segmenter = Callable[[str], Iterable[str]]

def segmenter(language: str) -> Segmenter:
    """The sentence segmenter of `language` (an ISO 639 code; others get the default rules):
    `sentencex`, chosen by measurement (benchmarks/RESULTS.md, "Sentence splitting")."""
    import sentencex

    def segment(text: str) -> Iterable[str]:
        return sentencex.segment(language, text)
    return segment


_CLAUSE_END = re.compile(r"[,;:\u2014\u2013)\]](?=\s)|\s[-\u2014\u2013](?=\s)")
_WORD_END = re.compile(r"\S(?=\s)")


def sentence_spans(text: str, segmenter: Segmenter, breaks: Sequence[int] = ()) -> list[Span]:
    """The sentences of `text` as `(start, end)` offsets, leading and trailing whitespace left
    out, found by `segmenter` between the offsets `breaks` (line breaks that end a sentence).
    A segment the segmenter changed (not found in the text as it is) ends the search: the rest
    of the text is one sentence, never lost."""
    spans: list[Span] = []
    for start, end in zip([0, *breaks], [*breaks, len(text)]):
        spans += [(start + a, start + b) for a, b in _spans(text[start:end], segmenter)]
    return spans


def _spans(text: str, segmenter: Segmenter) -> list[Span]:
    spans: list[Span] = []
    position = 0
    if not text.strip():
        return spans
    for segment in segmenter(text):
        segment = segment.strip()
        if not segment:
            continue
        start = text.find(segment, position)
        if start < 0:
            break
        spans.append((start, start + len(segment)))
        position = start + len(segment)
    rest = text[position:]
    if rest.strip():
        start = position + len(rest) - len(rest.lstrip())
        spans.append((start, position + len(rest.rstrip())))
    return spans


def fitted_spans(text: str, spans: Sequence[Span],
                 too_long: Callable[[list[str]], list[bool]]) -> list[list[Span]]:
    """Each span as the parts it is translated in: itself, or, when `too_long` says it is (of
    texts, one answer each), split in two where it suffers least, nearest its middle (after
    clause punctuation, else between words, else between characters), the halves split again
    as long as they are too long."""
    parts = [[span] for span in spans]
    pending = list(range(len(parts)))
    while pending:
        flags = too_long([" ".join(text[a:b].split()) for index in pending
                          for a, b in parts[index]])
        flag = iter(flags)
        still = []
        for index in pending:
            split: list[Span] = []
            for span in parts[index]:
                split += _halves(text, span) if next(flag) and span[1] - span[0] > 1 else [span]
            if len(split) > len(parts[index]):
                parts[index] = split
                still.append(index)
        pending = still
    return parts


def _halves(text: str, span: Span) -> list[Span]:
    """The span split in two, nearest its middle: after clause punctuation, else after a
    word, else between characters; each half's outer whitespace left out."""
    start, end = span
    middle = (start + end) / 2
    for pattern in (_CLAUSE_END, _WORD_END):
        cuts = [match.end() for match in pattern.finditer(text, start, end)
                if start < match.end() < end]
        cuts = [cut for cut in cuts if text[start:cut].strip() and text[cut:end].strip()]
        if cuts:
            cut = min(cuts, key=lambda cut: abs(cut - middle))
            break
    else:
        cut = (start + end) // 2
    left = text[start:cut].rstrip()
    right = text[cut:end]
    return [(start, start + len(left)), (end - len(right.lstrip()), end)]
