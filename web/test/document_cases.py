"""Writes web/test/document-cases.json: plain-text documents planned and translated by the
Python document layer (`DocumentTranslator`, format "text"; `fitted_spans`), which the page's
web/documents.js must give too (web/test/documents.test.js). The segmenter is sentencex, its
answer to each text recorded; a sentence is too long past a number of code points; the
translator turns a sentence's words around and spaces them oddly (`translation`, written in
both tests). tests/test_web_page.py checks the file is what this script writes now.

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


def document_case(document: str, limit: int) -> dict:
    """The document translated by `DocumentTranslator`: the sentences sent, the text, the
    splits, and sentencex's answer to each text it was asked about."""
    segments: dict[str, list[str]] = {}
    sentencex = segmenter("en")

    def segment(text: str) -> list[str]:
        segments[text] = list(sentencex(text))
        return segments[text]
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


def cases() -> dict:
    """Every case, from fixed documents and seeded random ones."""
    rng = random.Random(1)
    documents = [*DOCUMENTS, *(random_document(rng) for _ in range(25))]
    texts = [line for document in documents for line in document.splitlines() if line.strip()]
    return {
        "documents": [document_case(document, rng.choice([6, 12, 25, 60, 1000]))
                      for document in documents],
        "fitted": [fitted_case(text, limit) for text in texts[:30] for limit in (3, 8, 20)],
    }


if __name__ == "__main__":
    path = Path(sys.argv[1]) if len(sys.argv) > 1 else CASES
    path.write_text(json.dumps(cases(), ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
