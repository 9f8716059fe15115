"""Writes web/test/document-cases.json: plain-text documents planned and translated by the
Python document layer (`DocumentTranslator`, format "text"; `fitted_spans`), which the page's
web/documents.js must give too (web/test/documents.test.js). The segmenter is sentencex, its
answer to each text recorded; a sentence is too long past a number of code points; the
translator turns a sentence's words around and spaces them oddly (`translation`, written in
both tests). And HTML and Markdown documents of random inline markup (nested, split by the
translation) translated with random word alignments (recorded: web/test/markup.test.js
places them as Python does), and subword alignments made word alignments (`word_alignment`).
tests/system/test_web_page.py checks the file is what this script writes now.

Usage: PYTHONPATH=. python web/test/document_cases.py [OUTPUT]
"""
from __future__ import annotations

import json
import random
import sys
from pathlib import Path
from typing import Callable

from keras_transformer.documents import DocumentTranslator, segmenter
from keras_transformer.documents.inline import Aligned
from keras_transformer.documents.segmentation import fitted_spans
from keras_transformer.decoding.alignment import word_alignment

CASES = Path(__file__).with_name("document-cases.json")
TOKENS = ["the", "cat", "Dr.", "U.S.", "sat", "on", "a", "mat", "42", "3.5", "1,000",
          "https://example.org/a?b=c", "www.example.org", "ann@example.de", "café", "Straße",
          "猫", "🙂", "naïve", "well-known", "(see", "this)", "[note]", '"Why?"', "x" * 30]
PUNCTUATION = [".", ". ", "!", "?", ",", ";", ":", " \u2014", " -", " \u2013", ")", "]"]
SPACES = [" ", " ", " ", "  ", "\t", "\u00a0", "\u3000", "\u2009"]
LINE_ENDS = ["\n", "\n", "\r\n", "\r", "\u2028", "\x0b", "\x85", "\n\n", "\n \t\n"]
DOCUMENTS = [
    "they have sold nineteen cats. we see six books. they have sold nine children.",
    "  One sentence.\tTwo sentences?  Three!  \n\n\u00a0\n12 345\nhttps://example.org\n",
    "Hello there. 42. See www.example.org. Goodbye.\r\nLast line without an end",
    "A long sentence, with clauses; and more clauses: many of them \u2014 and a dash - too, "
    "going on and on and on until it is far too long for a small model to take.",
    "Averyveryverylongwordwithoutanyspaceatallthatmustbesplitbetweencharacters🙂🙂🙂 ok.",
]


def translation(text: str) -> str:
    """The test's translator: the words turned around, spaced oddly."""
    return " " + " \t ".join(reversed(text.split(" "))) + "\n"


def too_long(limit: int) -> Callable[[list[str]], list[bool]]:
    """The test's rule: a sentence is too long past `limit` code points."""
    return lambda texts: [len(text) > limit for text in texts]


def random_document(rng: random.Random) -> str:
    """Lines of words, numbers, URLs, punctuation and odd whitespace, odd line ends."""
    lines = []
    for _ in range(rng.randint(1, 5)):
        parts = []
        for _ in range(rng.randint(0, 20)):
            parts.append(rng.choice(TOKENS))
            if rng.random() < 0.3:
                parts.append(rng.choice(PUNCTUATION))
            parts.append(rng.choice(SPACES))
        lines.append("".join(parts) + rng.choice(LINE_ENDS))
    document = "".join(lines)
    return document if rng.random() < 0.5 else document[:-1]  # at times no last line end


def recording_segmenter() -> tuple[Callable[[str], list[str]], dict[str, list[str]]]:
    """The English segmenter (sentencex's), and the answers it gives, by text, as it gives them."""
    segments: dict[str, list[str]] = {}
    sentencex = segmenter("en")

    def segment(text: str) -> list[str]:
        segments[text] = list(sentencex(text))
        return segments[text]
    return segment, segments


def document_case(document: str, limit: int) -> dict:
    """The document translated by `DocumentTranslator`: the sentences sent, the text, the
    splits, and sentencex's answer to each text it was asked about."""
    segment, segments = recording_segmenter()
    sent: list[str] = []

    def translate(texts, aligned):
        sent.extend(texts)
        return [Aligned(translation(text)) for text in texts]
    translated = DocumentTranslator(translate, segment, too_long(limit), aligned=False
                                    ).translate(document, "text")
    return {"document": document, "limit": limit, "segments": segments, "sentences": sent,
            "text": translated.text,
            "splits": [[split.line, split.parts] for split in translated.splits]}


def fitted_case(text: str, limit: int) -> dict:
    """The parts `fitted_spans` splits the text (its whitespace around left out) in."""
    start = len(text) - len(text.lstrip())
    spans = [(start, len(text.rstrip()))]
    return {"text": text, "spans": spans, "limit": limit,
            "parts": fitted_spans(text, spans, too_long(limit))}


WORDS = ["they", "have", "sold", "nineteen", "cats", "we", "see", "six", "books.", "Dr.", "42",
         "café", "Straße", "猫", "🙂", "well-known", "(see", "this)", "a<b", "x&y", "A.", "ok!"]
HTML_INLINE = ['<b>', '<i class="x">', '<a href="https://example.org/?a=1&amp;b=2" title=\'t\'>',
               "<span lang=de>", "<em>", "<strong>", "<my-tag data-x=\"1 > 0\">", "<SUB>"]
HTML_ATOMS = ["<br>", "<br/>", '<img src="a.png" alt="A">', "<!-- note -->",
              "<code>x < y</code>", '<span translate="no">Keep <b>this</b></span>', "&amp;",
              "&eacute;", "&#233;",
              "&lt;tag&gt;", "<script>if (a < b) { x = '<b>'; }</script>", "</u>", " < ",
              "<kbd>Ctrl</kbd>", "<wbr>"]
HTML_BLOCKS = ["p", "li", "h2", "td", "div", "blockquote"]
MD_INLINE = [("*", "*"), ("**", "**"), ("_", "_"), ("~~", "~~"),
             ("[", "](https://example.org)"), ("[", '](<a b> "T \\"q\\"")')]
MD_ATOMS = ["`code`", "`` a`b ``", "![alt *x*](i.png \"t\")", "<https://example.org>",
            "<span>x</span>", "\\*", "&amp;", "  \n", "\\\n"]
MD_BLOCKS = ["", "# ", "## ", "- ", "1. ", "> ", "* "]


def random_words(rng: random.Random, count: int) -> list[str]:
    """`count` words, some with punctuation after."""
    return [rng.choice(WORDS) + (rng.choice([".", "!", "?", ","]) if rng.random() < 0.15 else "")
            for _ in range(count)]


def html_inline(rng: random.Random, depth: int = 0) -> str:
    """Words with inline elements (nested to 3), atoms and text, as HTML."""
    parts = []
    for _ in range(rng.randint(1, 6)):
        roll = rng.random()
        if roll < 0.25 and depth < 3:
            tag = rng.choice(HTML_INLINE)
            name = tag[1:].split(" ")[0].rstrip(">").lower()
            closed = rng.random() > 0.05  # at times left open: closed where its block ends
            parts.append(tag + html_inline(rng, depth + 1) + (f"</{name}>" if closed else ""))
        elif roll < 0.4:
            parts.append(rng.choice(HTML_ATOMS))
        else:
            parts.append(" ".join(random_words(rng, rng.randint(1, 5))))
    return rng.choice([" ", "", "\n"]).join(parts)


def html_document(rng: random.Random) -> str:
    """Blocks of `html_inline` content, at times in a whole page."""
    blocks = []
    for _ in range(rng.randint(1, 4)):
        tag = rng.choice(HTML_BLOCKS)
        blocks.append(f"<{tag}>{html_inline(rng)}</{tag}>")
    head = ("<!DOCTYPE html>\n<html><head><title>T</title></head><body>\n"
            if rng.random() < 0.3 else "")
    return head + "\n".join(blocks) + "\n"


def md_inline(rng: random.Random, depth: int = 0) -> str:
    """Words with emphasis, links (nested to 2) and atoms, as Markdown."""
    parts = []
    for _ in range(rng.randint(1, 6)):
        roll = rng.random()
        if roll < 0.25 and depth < 2:
            opening, closing = rng.choice(MD_INLINE)
            parts.append(opening + md_inline(rng, depth + 1).strip() + closing)
        elif roll < 0.35:
            parts.append(rng.choice(MD_ATOMS))
        else:
            parts.append(" ".join(random_words(rng, rng.randint(1, 5))))
    return " ".join(parts)


def md_document(rng: random.Random) -> str:
    """Headings, list items, quotes, tables and fences of `md_inline` content, at times after
    front matter."""
    blocks = ["---\ntitle: x\n---\n"] if rng.random() < 0.2 else []
    for _ in range(rng.randint(1, 4)):
        roll = rng.random()
        if roll < 0.1:
            blocks.append("```\ncode *here*\n```\n")
        elif roll < 0.2:
            blocks.append(f"| {md_inline(rng, 2)} | b |\n|---|---|\n"
                          f"| c d | {md_inline(rng, 2)} |\n")
        else:
            text = md_inline(rng).replace("\n", " ")
            if rng.random() < 0.3:
                text = text.replace(" ", "\n", 1)  # a soft break
            blocks.append(rng.choice(MD_BLOCKS) + text.strip() + "\n")
    return "\n".join(blocks)


def markup_case(document: str, format: str, limit: int, rng: random.Random) -> dict:
    """The document translated by `DocumentTranslator` in `format`, each sentence's words
    turned around (some dropped or doubled) with a random word alignment (some -1, some
    None), all recorded."""
    segment, segments = recording_segmenter()
    sent: list[str] = []
    translations: list[dict] = []

    def translate(texts, aligned):
        assert aligned
        found = []
        for text in texts:
            words = list(reversed(text.split()))
            if len(words) > 2 and rng.random() < 0.3:
                words.pop(rng.randrange(len(words)))
            if rng.random() < 0.2:
                words.append(rng.choice(words))
            alignment = None if rng.random() < 0.1 else [
                rng.randrange(-1, len(text.split()) + 1) for _ in words]
            found.append(Aligned(" ".join(words), alignment))
            translations.append({"text": found[-1].text, "alignment": alignment})
        sent.extend(texts)
        return found
    translated = DocumentTranslator(translate, segment, too_long(limit)).translate(document,
                                                                                  format)
    return {"document": document, "format": format, "limit": limit, "segments": segments,
            "sentences": sent, "translations": translations, "text": translated.text,
            "splits": [[split.line, split.parts] for split in translated.splits]}


def alignment_case(rng: random.Random) -> dict:
    """Random pieces (word starts, bare marks, a language token, EOS) and a subword alignment,
    and the word alignment `word_alignment` makes of them."""
    def pieces() -> list[str]:
        found = ["<2de>"] if rng.random() < 0.3 else []
        found += [rng.choice(["\u2581ab", "cd", "\u2581", "\u2581e", "f"])
                  for _ in range(rng.randint(0, 8))]
        return found + ["</s>"]
    target, source = pieces(), pieces()

    def words(found: list[str]) -> int:
        count, word = 0, -1
        for piece in found:
            if (piece.startswith("\u2581") and piece != "\u2581"
                    or (piece == "\u2581" and word < 0)):
                word += 1
        count = word + 1
        return count + (1 if rng.random() < 0.1 else 0)  # at times not the text's count
    alignment = [rng.randrange(-1, len(source) + 1) for _ in target]
    target_words, source_words = words(target), words(source)
    return {"target": target, "source": source, "alignment": alignment,
            "target_words": target_words, "source_words": source_words,
            "words": word_alignment(target, source, alignment, target_words, source_words)}


def cases() -> dict:
    """Every case, from fixed documents and seeded random ones."""
    rng = random.Random(1)
    documents = [*DOCUMENTS, *(random_document(rng) for _ in range(25))]
    texts = [line for document in documents for line in document.splitlines() if line.strip()]
    return {
        "documents": [document_case(document, rng.choice([6, 12, 25, 60, 1000]))
                      for document in documents],
        "fitted": [fitted_case(text, limit) for text in texts[:30] for limit in (3, 8, 20)],
        "markup": [markup_case(*((html_document(rng), "html") if index % 2 else
                                 (md_document(rng), "markdown")),
                               rng.choice([6, 25, 60, 1000]), rng) for index in range(60)],
        "alignments": [alignment_case(rng) for _ in range(60)],
    }


if __name__ == "__main__":
    path = Path(sys.argv[1]) if len(sys.argv) > 1 else CASES
    path.write_text(json.dumps(cases(), ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
