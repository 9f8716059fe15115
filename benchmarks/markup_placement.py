"""Markup carried by word alignment, measured: Multi30k test sources with inline markup
inserted, translated as HTML and as Markdown documents, against the plain translation and
against eflomal's alignment of the plain source and translation.

    python benchmarks/markup_placement.py RUN_DIR --data ../shared/data/multi30k \
        --eflomal /path/to/venv/bin/eflomal-align --work /tmp/markup [--limit N] [--seed 1]

Each line gets 1 to 3 spans of 1 to 3 words (fixed seed, apart from each other, each of
another kind): HTML `b`, `i`, `a href` and `span`, each with its own `id`; Markdown `**`, `_`, a
link and a code span. Measured per format: tags present (every source element's markup is in
the output, code spans byte for byte) and the output well-formed (it parses to the same kinds and
nesting: `structure` for Markdown, a tag stack for HTML); text equal to the plain translation
(the output's words without their markup equal the line translated alone); and a span placed
right when the target words it wraps are exactly the ones eflomal (train + these pairs,
grow-diag-final-and: `alignment_error.eflomal_links`) links to its source words (spans whose
source words eflomal links to nothing are counted apart). Prints one markdown table.
"""
from __future__ import annotations

import argparse
import html
import os
import random
import re
import sys
from pathlib import Path

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO_ROOT)
sys.path.insert(0, os.path.join(REPO_ROOT, "benchmarks"))

HTML_KINDS = ("b", "i", "a", "span")
MARKDOWN_KINDS = ("**", "_", "link", "code")


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("run_dir")
    parser.add_argument("--data", required=True, help="the Multi30k directory (shared data)")
    parser.add_argument("--eflomal", default="eflomal-align", help="eflomal's eflomal-align")
    parser.add_argument("--work", required=True, help="a directory for eflomal's files")
    parser.add_argument("--limit", type=int, help="the first N test lines only")
    parser.add_argument("--seed", type=int, default=1)
    return parser.parse_args(argv)


def spans_of(words: list[str], rng: random.Random) -> list[tuple[int, int]]:
    """1 to 3 spans `(first word, end)` of 1 to 3 words, apart (a word between them)."""
    spans: list[tuple[int, int]] = []
    for _ in range(rng.randint(1, 3)):
        length = rng.randint(1, 3)
        free = [start for start in range(len(words) - length + 1)
                if all(start + length < first or start > end for first, end in spans)]
        if free:
            start = rng.choice(free)
            spans.append((start, start + length))
    return sorted(spans)


def marked(words: list[str], spans: list[tuple[int, int]], kinds: list[str], form: str
           ) -> tuple[str, list[tuple[str, str]]]:
    """The line with each span wrapped as its kind in `form` ("html" or "markdown"), and each
    span's (opening, closing) markup."""
    out, markup = [], []
    position = 0
    for number, ((first, end), kind) in enumerate(zip(spans, kinds)):
        out += [escape(word, form) for word in words[position:first]]
        if form == "html":
            extra = f' href="https://example.com/{number}"' if kind == "a" else ""
            opening, closing = f'<{kind} id="s{number}"{extra}>', f"</{kind}>"
        elif kind == "link":
            opening, closing = "[", f"](https://example.com/{number})"
        elif kind == "code":
            opening, closing = "`", "`"
        else:
            opening = closing = kind
        text = " ".join(words[first:end]) if kind == "code" else " ".join(
            escape(word, form) for word in words[first:end])
        out.append(opening + text + closing)
        markup.append((opening + text + closing, "") if kind == "code" else (opening, closing))
        position = end
    out += [escape(word, form) for word in words[position:]]
    return " ".join(out), markup


def escape(word: str, form: str) -> str:
    from keras_transformer.documents import markdown
    return html.escape(word, quote=False) if form == "html" else markdown.escape(word)


def output_words(document: str, form: str) -> list[tuple[str, set[tuple[str, str]]]]:
    """The translated words of a one-block output, each with the markup (opening, closing) of
    the elements around it."""
    from keras_transformer.documents import html as html_format
    from keras_transformer.documents import markdown
    from keras_transformer.documents.inline import Block
    parts = (html_format if form == "html" else markdown).parse(document)
    words: list[tuple[str, set[tuple[str, str]]]] = []
    joined = False
    for block in (part for part in parts if isinstance(part, Block)):
        for run in block.runs:
            if run.atom:
                joined = False
                continue
            opens = {(element.open, element.close) for element in run.stack}
            pieces = re.split(r"\s", run.text)  # as str.split: a no-break space parts words
            for index, piece in enumerate(pieces):
                if not piece:
                    joined = False
                    continue
                if index == 0 and joined and words:
                    words[-1] = (words[-1][0] + piece, words[-1][1] | opens)
                else:
                    words.append((piece, set(opens)))
                joined = index == len(pieces) - 1
    return words


def well_nested(document: str) -> bool:
    """Whether every end tag of `document` closes the element opened last (void elements
    aside)."""
    from html.parser import HTMLParser

    from keras_transformer.documents.html import VOID

    stack: list[str] = []
    nested = [True]

    class Checker(HTMLParser):
        def handle_starttag(self, tag, attrs):
            if tag not in VOID:
                stack.append(tag)

        def handle_endtag(self, tag):
            if not stack or stack.pop() != tag:
                nested[0] = False

    Checker().feed(document)
    return nested[0] and not stack


def main(argv=None) -> int:
    args = parse_args(argv)
    from alignment_error import eflomal_links, read

    from keras_transformer.documents import document_translator
    from keras_transformer.documents import markdown
    from keras_transformer.serving.text_translation import LineTranslator, best_lines
    from keras_transformer.training.loaded_run import load_run

    data = Path(args.data)
    sources = read(data / "test_2016_flickr.en.gz")[:args.limit]
    line_translator = LineTranslator.from_translator(load_run(args.run_dir).translator())
    plain = [line.decode("utf-8") if isinstance(line, bytes) else line for line in best_lines(
        line_translator, [source.encode("utf-8") for source in sources])]
    train = [read(data / f"train.{language}.gz") for language in ("en", "de")]
    links = eflomal_links(args.eflomal, Path(args.work), train[0] + sources, train[1] + plain
                          )[len(train[0]):]
    documents = document_translator(line_translator, "en")
    rng = random.Random(args.seed)
    rows = {}
    for form, kinds in (("html", HTML_KINDS), ("markdown", MARKDOWN_KINDS)):
        cases = []
        for source in sources:
            words = source.split()
            spans = spans_of(words, rng)
            cases.append((words, spans, rng.sample(kinds, len(spans))))
        # The text the model reads: a code span's words are copied, not translated.
        readable = [" ".join(word for index, word in enumerate(words) if not any(
            first <= index < end for (first, end), kind in zip(spans, chosen)
            if kind == "code")) for words, spans, chosen in cases]
        alone = [line.decode("utf-8") if isinstance(line, bytes) else line
                 for line in best_lines(line_translator, [text.encode("utf-8")
                                                           for text in readable])]
        counts = dict.fromkeys(("lines", "tags", "text", "spans", "placed", "unlinked"), 0)
        for (words, spans, chosen), translation, pair_links, read_alone, source in zip(
                cases, alone, links, readable, sources):
            document, markup = marked(words, spans, chosen, form)
            output = documents.translate(document, form).text
            counts["lines"] += 1
            kept = all(output.count(opening) >= 1 and closing in output
                       for opening, closing in markup)
            kept = kept and (markdown.structure(output) == markdown.structure(document)
                             if form == "markdown" else well_nested(output))
            counts["tags"] += kept
            found = output_words(output, form)
            same_text = [word for word, _ in found] == translation.split()
            counts["text"] += same_text
            if not same_text or read_alone != source:
                continue  # placement scored against the plain pair eflomal aligned
            for (first, end), element in zip(spans, markup):
                reference = {j for i, j in pair_links if first <= i < end}
                if not reference:
                    counts["unlinked"] += 1
                    continue
                counts["spans"] += 1
                wrapped = {index for index, (_, opens) in enumerate(found) if element in opens}
                counts["placed"] += wrapped == reference
        rows[form] = counts
    print("| format | lines | tags kept, well-formed | text = plain translation | spans "
          "placed as eflomal aligns | spans eflomal leaves unaligned |")
    print("|---|---|---|---|---|---|")
    for form, counts in rows.items():
        lines = counts["lines"]
        print(f"| {form} | {lines:,} | {100 * counts['tags'] / lines:.1f}% | "
              f"{100 * counts['text'] / lines:.1f}% | {counts['placed']:,} / "
              f"{counts['spans']:,} ({100 * counts['placed'] / max(counts['spans'], 1):.1f}%) | "
              f"{counts['unlinked']:,} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
