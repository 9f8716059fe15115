"""Markdown (CommonMark, with tables and strikethrough) in and out, read with `markdown-it-py`.

Each inline content of a block (a paragraph, a heading, a list item's paragraph, a quote's, a
table cell) is a block of runs to translate; everything else (block markers, fences, code
blocks, HTML blocks, front matter, link reference definitions) is copied line for line.
Emphasis, strong emphasis, strikethrough and link text travel as inline elements; code spans,
images, autolinks and inline HTML are atoms, copied; a hard line break ends a sentence. A
paragraph's soft line breaks become spaces: its translation is written on its first line,
after that line's block markers.
"""
from __future__ import annotations

import re
from typing import Optional

from markdown_it import MarkdownIt
from markdown_it.token import Token

from keras_transformer.documents.inline import Block, Element, Run

Part = str | Block

_ESCAPED = re.compile(r"([\\`*_\[\]<>|&!#~])")
# A list marker or a setext underline a translated text could start with: its punctuation is
# escaped (a backslash before a digit would be text).
_LINE_START = re.compile(r"^(\d*)([-+=]|(?<=\d)[.)])(?=\s|$)")
_FRONT_MATTER = re.compile(r"\A(---|\+\+\+)\r?\n.*?^\1[ \t]*(?:\r?\n|\Z)", re.S | re.M)


def parser() -> MarkdownIt:
    """The CommonMark parser with GitHub's tables and strikethrough."""
    return MarkdownIt("commonmark").enable(["table", "strikethrough"])


def escape(text: str) -> str:
    """Translated text as Markdown: every character that could start markup escaped."""
    escaped = _ESCAPED.sub(r"\\\1", text)
    return _LINE_START.sub(r"\1\\\2", escaped)


def structure(document: str) -> list[tuple]:
    """What translation keeps of the document's structure as `markdown-it-py` parses it: its
    block tokens (type, nesting, markup) in order, and of each inline content the kinds of
    markup in it (translation may reorder them and split an element in two)."""
    return [(token.type, token.nesting, token.markup) if token.type != "inline" else
            ("inline", tuple(sorted({(child.type, child.markup) for child in token.children
                                     if child.type not in ("text", "softbreak")})))
            for token in parser().parse(document)]


def parse(document: str) -> list[Part]:
    """The document as raw text to copy and blocks to translate, in order: their source texts
    joined are the document."""
    front = _FRONT_MATTER.match(document)
    start = front.end() if front else 0
    body = document[start:]
    lines = body.splitlines(keepends=True)
    line_starts = [0]
    for text in lines:
        line_starts.append(line_starts[-1] + len(text))
    blocks: list[tuple[int, int, Block]] = []
    cell_end: dict[int, int] = {}  # per line, where its last table cell found ends
    for token in parser().parse(body):
        if token.type != "inline" or token.map is None or not token.children:
            continue
        located = _locate(token, lines, cell_end.get(token.map[0], 0))
        if located is None:
            continue  # not found as it is in the source: copied
        first, column = located[0][:2]
        last, last_column, last_text = located[-1]
        cell_end[last] = last_column + len(last_text)
        begin = start + line_starts[first] + column
        end = start + line_starts[last] + last_column + len(last_text)
        block = _block(token, lines, located)
        block.source = [document[begin:end]]
        block.line = document.count("\n", 0, start) + first + 1
        blocks.append((begin, end, block))
    parts: list[Part] = []
    position = 0
    for begin, end, block in sorted(blocks, key=lambda item: item[0]):
        parts += [document[position:begin], block]
        position = end
    parts.append(document[position:])
    return parts


def _locate(token: Token, lines: list[str], search_from: int
            ) -> Optional[list[tuple[int, int, str]]]:
    """Where each line of an inline token's content is in the source: its line's number, the
    column it starts at, its text; None where one is not found as it is."""
    first, last = token.map
    located = []
    for offset, text in enumerate(token.content.split("\n")):
        number = first + offset
        if number >= min(last, len(lines)):
            return None
        column = lines[number].find(text, search_from if offset == 0 else 0)
        if column < 0:
            return None
        located.append((number, column, text))
    return located


def _block(token: Token, lines: list[str], located: list[tuple[int, int, str]]) -> Block:
    """The runs of an inline token's children: text under the emphasis and links open, soft
    breaks as spaces, hard breaks as sentence ends written as in the source, the rest atoms."""
    block = Block()
    stack: list[Element] = []
    index = 0  # the content line at hand
    autolink: Optional[list[str]] = None  # the parts of an autolink being read
    for child in token.children:
        kind = child.type
        if autolink is not None:
            autolink.append(child.content if kind != "link_close" else ">")
            if kind == "link_close":
                block.add_atom("".join(autolink), tuple(stack))
                autolink = None
        elif kind == "link_open" and child.markup == "autolink":
            autolink = ["<"]
        elif kind in ("text", "softbreak"):
            block.runs.append(Run(child.content if kind == "text" else " ", tuple(stack)))
            index += kind == "softbreak"
        elif kind == "hardbreak":
            number, column, text = located[index]
            kept = text[:-1] if text.endswith("\\") else text.rstrip(" ")
            index += 1
            following, next_column, _ = located[index]
            block.add_break(lines[number][column + len(kept):] + lines[following][:next_column],
                            tuple(stack))
        elif kind == "link_open":
            stack.append(Element("link", "[", _link_end(child.attrs)))
        elif kind in ("em_open", "strong_open", "s_open"):
            stack.append(Element(kind[:-5], child.markup, child.markup))
        elif kind in ("em_close", "strong_close", "s_close", "link_close"):
            stack.pop()
        else:
            block.add_atom(_atom(child), tuple(stack))
    return block


def _link_end(attrs: dict) -> str:
    """The end of an inline link, `](destination "title")`."""
    href = str(attrs.get("href") or "")
    if not href or re.search(r"[\s()<>]", href):
        href = "<" + href.replace("<", "%3C").replace(">", "%3E") + ">"
    title = str(attrs.get("title") or "").replace('"', '\\"')
    return '](' + href + (f' "{title}"' if title else "") + ")"


def _atom(token: Token) -> str:
    """An atom's Markdown: a code span, an image, inline HTML."""
    if token.type == "code_inline":
        content = token.content
        pad = " " if content[:1] in ("`", " ") or content[-1:] in ("`", " ") else ""
        return f"{token.markup}{pad}{content}{pad}{token.markup}"
    if token.type == "image":
        return f"![{token.content}" + _link_end({"href": token.attrs.get("src"),
                                                   "title": token.attrs.get("title")})
    return token.content
