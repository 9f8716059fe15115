"""HTML in and out: a page or a fragment read with the standard library's `html.parser` into
the source text copied as it is and blocks of inline runs to translate.

Block elements (`p`, `li`, `td`, headings, ... any element not known to be inline) bound the
blocks; inline elements (`b`, `i`, `a`, `span`, ...) become the runs' stacks and travel with
their words (`inline`); void elements (`img`, `br`, ...), comments and the elements whose text
is not translated (`script`, `style`, `code`, `pre`, `kbd`, `samp`, `var`, `textarea`, and any
element with `translate="no"`) are copied as they are, as atoms inside a block; a `br` also
ends a sentence. Tags, attributes, comments and entities outside translated text are copied
byte for byte; translated text is written with `&`, `<` and `>` escaped. An inline element
left open in the source is closed where its block ends.
"""
from __future__ import annotations

import html
import html.parser
import re
from typing import Optional

from keras_transformer.documents.inline import Block, Element, Run

INLINE = frozenset(
    "a abbr acronym b bdi bdo big cite data del dfn em font i ins label mark q rp rt ruby s "
    "small span strike strong sub sup time tt u".split())
VOID = frozenset("area base br col embed hr img input link meta param source track wbr".split())
BLOCK_VOID = frozenset("area base col embed hr input link meta param source track".split())
UNTRANSLATED = frozenset("script style code pre kbd samp var textarea svg math template".split())
BREAK = "br"


Part = str | Block


def parse(document: str) -> list[Part]:
    """The document as raw text to copy and blocks to translate, in order: their source texts
    joined are the document."""
    reader = _Reader(document)
    reader.feed(document)
    reader.close()
    return reader.finish()


def escape(text: str) -> str:
    """Translated text as HTML: `&`, `<` and `>` escaped (quotes need not be, outside
    attributes)."""
    return html.escape(text, quote=False)


class _Reader(html.parser.HTMLParser):
    """The events of `html.parser`, each with its exact source text, sorted into parts."""

    def __init__(self, document: str) -> None:
        super().__init__(convert_charrefs=True)
        self._document = document
        self._line_starts = [0] + [match.end() for match in re.finditer("\n", document)]
        self._events: list[tuple[int, int, str, object]] = []  # offset, line, kind, value

    def _offset(self) -> tuple[int, int]:
        line, column = self.getpos()
        return self._line_starts[line - 1] + column, line

    def handle_starttag(self, tag: str, attrs: list) -> None:
        self._events.append((*self._offset(), "start", (tag, dict(attrs))))

    def handle_startendtag(self, tag: str, attrs: list) -> None:
        self._events.append((*self._offset(), "void", (tag, dict(attrs))))

    def handle_endtag(self, tag: str) -> None:
        self._events.append((*self._offset(), "end", tag))

    def handle_data(self, data: str) -> None:
        self._events.append((*self._offset(), "data", data))

    def handle_comment(self, data: str) -> None:
        self._events.append((*self._offset(), "other", None))

    def handle_decl(self, decl: str) -> None:
        self._events.append((*self._offset(), "other", None))

    def handle_pi(self, data: str) -> None:
        self._events.append((*self._offset(), "other", None))

    def unknown_decl(self, data: str) -> None:
        self._events.append((*self._offset(), "other", None))

    def finish(self) -> list[Part]:
        """The parts, from the events and the source between their offsets."""
        offsets = [event[0] for event in self._events] + [len(self._document)]
        builder = _Builder()
        for (offset, line, kind, value), end in zip(self._events, offsets[1:]):
            builder.line = line
            builder.event(kind, value, self._document[offset:end])
        return builder.parts()


class _Builder:
    """Sorts the events into parts: raw text copied, and blocks of runs."""

    def __init__(self) -> None:
        self._parts: list[Part] = []
        self._block: Optional[Block] = None
        self._stack: list[Element] = []
        self._copied: list[str] = []  # the untranslated elements open (their tags' names)
        # Where each open inline element starts in its block: runs, source texts, breaks.
        self._starts: list[tuple[int, int, int]] = []
        self.line = 1  # of the event at hand

    def event(self, kind: str, value: object, raw: str) -> None:
        if self._copied:
            self._copy(kind, value, raw)
        elif kind == "start":
            tag, attrs = value
            if tag in VOID:
                self._void(tag, raw)
            elif tag in UNTRANSLATED or attrs.get("translate", "").lower() == "no":
                self._copied.append(tag)
                self._atom(raw)
            elif tag in INLINE or "-" in tag:
                block = self._current()
                block.source.append(raw)
                self._stack.append(Element(tag, raw, f"</{tag}>"))
                self._starts.append((len(block.runs), len(block.source), len(block.breaks)))
            else:
                self._boundary(raw)
        elif kind == "void":
            self._void(value[0], raw)
        elif kind == "end":
            self._end(value, raw)
        elif kind == "data":
            self._current().add_text(raw, value, tuple(self._stack))
        else:
            self._atom(raw)

    def _copy(self, kind: str, value: object, raw: str) -> None:
        """Inside an untranslated element: everything an atom, until the element ends."""
        if kind == "start" and value[0] not in VOID:
            self._copied.append(value[0])
        elif kind == "end" and value in self._copied:
            while self._copied.pop() != value:
                pass
        self._atom(raw)

    def _void(self, tag: str, raw: str) -> None:
        if tag in BLOCK_VOID:
            self._boundary(raw)
            return
        if tag == BREAK:
            self._current().add_break(raw, tuple(self._stack))
        else:
            self._atom(raw)

    def _end(self, tag: str, raw: str) -> None:
        open_tags = [element.name for element in self._stack]
        if tag in open_tags:
            while self._stack:
                element = self._stack.pop()
                runs, sources, breaks = self._starts.pop()
                if element.name == tag:
                    element.close = raw
                    break
            block = self._current()
            block.source.append(raw)
            inside = block.runs[runs:]
            if all(run.atom or not run.text.strip() for run in inside) and (
                    len(block.breaks) == breaks):
                # An element without words (an anchor, an empty span): one atom, kept as it is;
                # its whitespace stays in the text too, where it parts words.
                space = "".join(run.text for run in inside if not run.atom)
                block.runs[runs:] = [Run("".join(block.source[sources - 1:]), tuple(self._stack),
                                         atom=True)] + ([Run(space, tuple(self._stack))]
                                                        if space else [])
        elif tag in INLINE or "-" in tag:
            self._atom(raw)  # a stray end tag: copied where it was
        else:
            self._boundary(raw)

    def _atom(self, raw: str) -> None:
        if self._block is None and not self._stack:
            self._parts.append(raw)
        else:
            self._current().add_atom(raw, tuple(self._stack))

    def _current(self) -> Block:
        if self._block is None:
            self._block = Block(line=self.line)
            self._parts.append(self._block)
        return self._block

    def _boundary(self, raw: str) -> None:
        self._close_block()
        self._parts.append(raw)

    def _close_block(self) -> None:
        self._block = None
        self._stack.clear()
        self._starts.clear()

    def parts(self) -> list[Part]:
        self._close_block()
        return self._parts
