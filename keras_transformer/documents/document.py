"""Documents translated sentence by sentence with their layout and markup: plain text, HTML or
Markdown in, the same document out. The text is split into blocks (lines, block elements,
Markdown blocks: whitespace and markup between them copied as they are), the blocks into
sentences (a segmenter), sentences longer than the model takes into parts; every sentence of
the document goes to the translator in one call (it batches them by length), and the
translations go back into their blocks, inline markup placed on the words aligned to its
source words (`inline`)."""
from __future__ import annotations

import dataclasses
import re
from typing import Callable, Optional, Sequence

from keras_transformer.documents import html as html_format
from keras_transformer.documents import markdown as markdown_format
from keras_transformer.documents.inline import (Aligned, Block, Run, Sentence, plain_text,
                                                sentences, serialize, translated_runs)
from keras_transformer.documents.segmentation import (Segmenter, Span, fitted_spans,
                                                      sentence_spans)

FORMATS = ("text", "html", "markdown")
# Sentences (words joined by single spaces) in, their translations out, with word alignments
# when the second argument asks for them.
SentenceTranslator = Callable[[Sequence[str], bool], list[Aligned]]

_URL = re.compile(r"^(?:[a-z][a-z0-9+.-]*://|www\.|mailto:)\S+$|^\S+@\S+\.\w+$", re.I)


def translatable(text: str) -> bool:
    """Whether text goes to the model: it has a letter and is not a URL or an address alone
    (numbers, punctuation, URLs pass through as they are)."""
    return any(char.isalpha() for char in text) and not _URL.match(text.strip())


@dataclasses.dataclass
class Split:
    """A sentence translated in `parts` parts (longer than the model takes), at `line`."""
    line: int
    parts: int


@dataclasses.dataclass
class Translated:
    """A translated document and the sentences it split (`splits`)."""
    text: str
    splits: list[Split]


class DocumentTranslator:
    """Translates documents with a sentence translator, `translate`: sentences (words joined by
    single spaces), and whether word alignments are needed -> their translations. `segmenter`
    takes a text to its sentences; `too_long` takes sentences to whether each is longer than the
    model takes (None: never); `aligned` says whether `translate` gives word alignments (markup
    needs them)."""

    def __init__(self, translate: SentenceTranslator, segmenter: Segmenter,
                 too_long: Optional[Callable[[list[str]], list[bool]]] = None,
                 aligned: bool = True):
        self.aligned = aligned
        self._translate = translate
        self._segmenter = segmenter
        self._too_long = too_long or (lambda texts: [False] * len(texts))

    def translate(self, document: str, format: str = "text") -> Translated:
        """The document (`format`: one of `FORMATS`) translated, in the same format."""
        if format not in FORMATS:
            raise ValueError(f"format: {format!r} is not one of {', '.join(FORMATS)}")
        if format != "text" and not self.aligned:
            raise ValueError(f"format: {format} places markup by word alignment, which this "
                             "translator does not give (an export written before exports gave "
                             "alignments does not); translate it as text")
        if format == "text":
            parts = _text_blocks(document)
            escape: Callable[[str], str] = str
        elif format == "html":
            parts = html_format.parse(document)
            escape = html_format.escape
        else:
            parts = markdown_format.parse(document)
            escape = markdown_format.escape
        return self._translated(parts, escape, format != "text")

    def _translated(self, parts: Sequence[str | Block], escape: Callable[[str], str],
                    aligned: bool) -> Translated:
        plans = [self._plan(part) if isinstance(part, Block) else None for part in parts]
        texts = [sentence.text for plan in plans if plan for sentence in plan[1]]
        translations = iter(self._translate(texts, aligned) if texts else [])
        out: list[str] = []
        splits: list[Split] = []
        for part, plan in zip(parts, plans):
            if plan is None:
                out.append(part if isinstance(part, str) else "".join(part.source))
                continue
            spans, source, parts_of = plan
            found = [next(translations) for _ in source]
            out.append(serialize(translated_runs(part.runs, spans, source, found), escape))
            splits += [Split(part.line, count) for count in parts_of if count > 1]
        return Translated("".join(out), splits)

    def _plan(self, block: Block) -> Optional[tuple[list[Span], list[Sentence], list[int]]]:
        """A block's sentence spans (parts of long ones apart), their sentences and how many
        parts each sentence has; None: nothing to translate."""
        text = plain_text(block.runs)
        spans = [span for span in sentence_spans(text, self._segmenter, block.breaks)
                 if translatable(text[span[0]:span[1]])]
        if not spans:
            return None
        fitted = fitted_spans(text, spans, self._too_long)
        parts = [part for split in fitted for part in split]
        return parts, sentences(block.runs, parts), [len(split) for split in fitted]


def _text_blocks(document: str) -> list[str | Block]:
    """Plain text: each line a block, its line break copied."""
    parts: list[str | Block] = []
    for number, line in enumerate(document.splitlines(keepends=True), start=1):
        body = line.rstrip("\r\n")
        parts.append(Block([Run(body)], [body], number))
        parts.append(line[len(body):])
    return parts
