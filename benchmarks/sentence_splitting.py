"""Sentence splitting: boundary precision, recall and F1 of candidate segmenters, their speed,
and how many real one-sentence lines each would split.

    python benchmarks/sentence_splitting.py [DATA] [--seed 1] [--repeats 3] [--json FILE]
        [--choice NAME]

DATA is the shared data folder (default: $KT_SHARED_DATA, else ../shared/data beside the
project). Paragraphs: the lines of newstest2013 and newstest2014 (English and German, the same
groupings for both) taken in order in runs of 2 to 8 (sizes drawn with `--seed`), joined by one
space; the gold boundaries are the joins. A boundary is the offset of the first character of a
sentence after the first, so segmenters that keep or drop the whitespace between sentences are
counted alike. Precision, recall and F1 are pooled over both test sets; time is the best of
`--repeats` rounds over all paragraphs of a language, in ms per 10,000 sentences, the library's own
call only (its objects built once beforehand). "split lines" counts the lines of newstest2014
and of Multi30k test_2016_flickr that the segmenter cuts into more than one sentence: a line of
these sets is one translation unit, nearly always one sentence.

Candidates not installed are left out with a note. Prints a markdown table; `--json` also writes
the paragraphs, the gold and every segmenter's boundaries for `benchmarks/intl_segmenter.mjs`,
which measures how far the browser's `Intl.Segmenter` agrees with `--choice`.
"""
from __future__ import annotations

import argparse
import bisect
import gzip
import importlib.metadata
import itertools
import json
import os
import random
import re
import sys
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LANGUAGES = ("en", "de")
PARAGRAPH_SETS = ("newstest2013", "newstest2014")

# A segmenter: for a language, a function of a text to its sentence starts (character offsets).
# Each is built in two parts so that only the library's own call is timed: `split` returns the
# library's raw result, `starts` turns it into offsets.
Starts = Callable[[str, object], list[int]]


def starts_of_sentences(text: str, sentences: list[str]) -> list[int]:
    """Offsets in `text` of `sentences` (its consecutive substrings), blank ones skipped."""
    starts, cursor = [], 0
    for sentence in sentences:
        stripped = sentence.strip()
        if not stripped:
            continue
        start = text.find(stripped, cursor)
        if start < 0:
            raise ValueError(f"segment not found in its text: {stripped[:60]!r}")
        starts.append(start)
        cursor = start + len(stripped)
    return starts


def first_visible(text: str, offsets: list[int]) -> list[int]:
    """`offsets` each moved past whitespace; those at the end of `text` dropped."""
    moved = []
    for offset in offsets:
        while offset < len(text) and text[offset].isspace():
            offset += 1
        if offset < len(text):
            moved.append(offset)
    return moved


REGEX_END = re.compile(r"[.!?][\"'”’»)\]]*\s+")


def regex_baseline(language: str) -> tuple[Callable[[str], object], Starts]:
    """A boundary after `.`, `!` or `?` (and closing quotes) and whitespace, before no lowercase
    letter: the trivial reference."""
    del language

    def split(text: str) -> list[int]:
        return [m.end() for m in REGEX_END.finditer(text)
                if m.end() < len(text) and not text[m.end()].islower()]

    return split, lambda text, ends: [0, *ends]


def sentencex_segmenter(language: str) -> tuple[Callable[[str], object], Starts]:
    """Wikimedia's `sentencex` (`segment`)."""
    import sentencex

    return (lambda text: list(sentencex.segment(language, text)), starts_of_sentences)


def pysbd_segmenter(language: str) -> tuple[Callable[[str], object], Starts]:
    """`pysbd`, its rules for `language`, text not cleaned (offsets kept)."""
    import pysbd

    segmenter = pysbd.Segmenter(language=language, clean=False)
    return segmenter.segment, starts_of_sentences


def syntok_segmenter(language: str) -> tuple[Callable[[str], object], Starts]:
    """`syntok` (one set of rules for English, German and Spanish)."""
    del language
    from syntok import segmenter

    def split(text: str) -> list[int]:
        return [sentence[0].offset for paragraph in segmenter.analyze(text)
                for sentence in paragraph]

    return split, lambda text, starts: starts


def code_points_of_utf16(text: str, units: list[int]) -> list[int]:
    """`units`, offsets in UTF-16 code units of `text` (as ICU counts), as code point offsets."""
    if text.isascii() or max(text) <= "\uffff":
        return units
    ends = list(itertools.accumulate(1 if char <= "\uffff" else 2 for char in text))
    return [bisect.bisect_left(ends, unit) + 1 if unit else 0 for unit in units]


def icu_segmenter(locale: str) -> Callable[[str], tuple[Callable[[str], object], Starts]]:
    """ICU's sentence BreakIterator through `icu4py` (which ships its own ICU), for
    `language` + `locale` (`""`: the locale alone, the rules `Intl.Segmenter` applies;
    `"@ss=standard"`: with ICU's abbreviation suppressions)."""

    def build(language: str) -> tuple[Callable[[str], object], Starts]:
        from icu4py.breakers import SentenceBreaker

        name = language + locale
        return (lambda text: [start for start, _ in SentenceBreaker(text, name).segments()],
                code_points_of_utf16)

    return build


def pyicu_segmenter(language: str) -> tuple[Callable[[str], object], Starts]:
    """ICU's sentence BreakIterator through `PyICU` (the system's ICU)."""
    import icu

    iterator = icu.BreakIterator.createSentenceInstance(icu.Locale(language))

    def split(text: str) -> list[int]:
        iterator.setText(text)
        return [0, *list(iterator)[:-1]]

    return split, code_points_of_utf16


CANDIDATES: dict[str, tuple[str, Callable[[str], tuple[Callable[[str], object], Starts]]]] = {
    "regex baseline": ("", regex_baseline),
    "sentencex": ("sentencex", sentencex_segmenter),
    "pysbd": ("pysbd", pysbd_segmenter),
    "syntok": ("syntok", syntok_segmenter),
    "ICU (icu4py)": ("icu4py", icu_segmenter("")),
    "ICU ss=standard (icu4py)": ("icu4py", icu_segmenter("@ss=standard")),
    "ICU (PyICU)": ("PyICU", pyicu_segmenter),
}


def version_of(distribution: str) -> str | None:
    """The installed version of `distribution` (`""` for none needed), None if absent."""
    if not distribution:
        return ""
    try:
        version = importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return None
    if distribution == "icu4py":
        import icu4py
        version += f", ICU {icu4py.icu_version}"
    elif distribution == "PyICU":
        import icu
        version += f", ICU {icu.ICU_VERSION}"
    return version


def read_lines(path: Path) -> list[str]:
    """The lines of `path` (plain or .gz), stripped; exits naming the file when it is absent."""
    if not path.exists():
        sys.exit(f"not found: {path} (pass the shared data folder or set KT_SHARED_DATA)")
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as handle:
        return [line.strip() for line in handle]


def paragraphs_of(lines: dict[str, list[str]], rng: random.Random
                  ) -> dict[str, list[tuple[str, list[int]]]]:
    """Each language's `lines` in consecutive runs of 2-8 (the same runs for every language),
    as (paragraph, gold sentence starts)."""
    count = len(next(iter(lines.values())))
    sizes, used = [], 0
    while used < count:
        size = min(rng.randint(2, 8), count - used)
        sizes.append(size)
        used += size
    result = {}
    for language, texts in lines.items():
        paragraphs, first = [], 0
        for size in sizes:
            run = [line for line in texts[first:first + size] if line]
            first += size
            starts, offset = [], 0
            for line in run:
                starts.append(offset)
                offset += len(line) + 1
            paragraphs.append((" ".join(run), starts))
        result[language] = paragraphs
    return result


def measure(split: Callable[[str], object], starts: Starts,
            paragraphs: list[tuple[str, list[int]]], one_sentence_lines: dict[str, list[str]]
            ) -> dict:
    """Boundaries, precision, recall, F1 and split lines of one segmenter for one language."""
    found = [first_visible(text, starts(text, split(text)))[1:] for text, _ in paragraphs]
    hits = predicted = gold = 0
    for (_, gold_starts), boundaries in zip(paragraphs, found):
        truth = set(gold_starts[1:])
        hits += len(truth & set(boundaries))
        predicted += len(set(boundaries))
        gold += len(truth)
    precision = hits / predicted if predicted else 0.0
    recall = hits / gold if gold else 0.0
    return {
        "boundaries": found,
        "precision": precision,
        "recall": recall,
        "f1": 2 * precision * recall / (precision + recall) if hits else 0.0,
        "split_lines": {
            name: [line for line in lines
                   if line and len(first_visible(line, starts(line, split(line)))) > 1]
            for name, lines in one_sentence_lines.items()},
    }


def seconds(split: Callable[[str], object], texts: list[str]) -> float:
    """Time `split` takes over `texts`, its raw results kept (as a caller would)."""
    begin = time.perf_counter()
    [split(text) for text in texts]
    return time.perf_counter() - begin


def main(argv: list[str] | None = None) -> None:
    """Measure every installed candidate and print the table."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("data", nargs="?", type=Path, default=Path(os.environ.get(
        "KT_SHARED_DATA", ROOT.parent / "shared" / "data")), help="the shared data folder")
    parser.add_argument("--seed", type=int, default=1, help="seed of the paragraph sizes")
    parser.add_argument("--repeats", type=int, default=3, help="timed rounds (the best is kept)")
    parser.add_argument("--json", type=Path, help="write paragraphs, gold and boundaries here")
    parser.add_argument("--choice", default="sentencex", choices=sorted(CANDIDATES),
                        help="the segmenter the JSON names as Python's choice")
    args = parser.parse_args(argv)

    news = {name: {language: read_lines(args.data / "wmt14" / f"{name}.{language}")
                   for language in LANGUAGES} for name in PARAGRAPH_SETS}
    rng = random.Random(args.seed)
    paragraphs = {language: [] for language in LANGUAGES}
    for name in PARAGRAPH_SETS:
        for language, made in paragraphs_of(news[name], rng).items():
            paragraphs[language].extend(made)
    one_sentence_lines = {language: {
        "newstest2014": news["newstest2014"][language],
        "test_2016_flickr": read_lines(
            args.data / "multi30k" / f"test_2016_flickr.{language}.gz")}
        for language in LANGUAGES}

    segmenters, versions = {}, {}
    for name, (distribution, build) in CANDIDATES.items():
        version = version_of(distribution)
        if version is None:
            print(f"- {name}: `{distribution}` not installed, left out", file=sys.stderr)
            continue
        versions[name] = version
        for language in LANGUAGES:
            segmenters[name, language] = build(language)
    results = {(name, language): measure(split, starts, paragraphs[language],
                                         one_sentence_lines[language])
               for (name, language), (split, starts) in segmenters.items()}
    # Timed in rounds, every segmenter once a round, so that a change of the machine's load
    # falls on all of them; each keeps its best round.
    best = dict.fromkeys(segmenters, float("inf"))
    for _ in range(args.repeats):
        for (name, language), (split, _) in segmenters.items():
            texts = [text for text, _ in paragraphs[language]]
            best[name, language] = min(best[name, language], seconds(split, texts))

    lines_count = {language: {set_name: sum(1 for line in lines if line)
                              for set_name, lines in sets.items()}
                   for language, sets in one_sentence_lines.items()}
    sentences = {language: sum(len(gold) for _, gold in made)
                 for language, made in paragraphs.items()}
    print(f"Paragraphs: {len(paragraphs['en'])} ({sentences['en']} sentences) per language, "
          f"seed {args.seed}. Split lines of newstest2014 ({lines_count['en']['newstest2014']}) "
          f"and test_2016_flickr ({lines_count['en']['test_2016_flickr']}).\n")
    print("| segmenter | version | language | precision | recall | F1 | ms per 10k sentences "
          "| newstest2014 lines split | test_2016_flickr lines split "
          f"| same splits as {args.choice} |")
    print("| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for (name, language), result in results.items():
        split = result["split_lines"]
        chosen = results.get((args.choice, language))
        same = "-" if chosen is None else format(sum(
            a == b for a, b in zip(result["boundaries"], chosen["boundaries"]))
            / len(chosen["boundaries"]), ".2%")
        print(f"| {name} | {versions[name] or '-'} | {language} | {result['precision']:.2%} "
              f"| {result['recall']:.2%} | {result['f1']:.2%} "
              f"| {best[name, language] / sentences[language] * 1e7:.1f} "
              f"| {len(split['newstest2014'])} | {len(split['test_2016_flickr'])} | {same} |")

    if args.json:
        args.json.write_text(json.dumps({
            "choice": args.choice,
            "versions": versions,
            "languages": {language: {
                "paragraphs": [text for text, _ in paragraphs[language]],
                "gold": [gold[1:] for _, gold in paragraphs[language]],
                "segmenters": {name: results[name, language]["boundaries"]
                               for name in versions},
                "split_lines": {name: results[name, language]["split_lines"]
                                for name in versions},
                "one_sentence_lines": one_sentence_lines[language],
            } for language in LANGUAGES},
        }, ensure_ascii=False))


if __name__ == "__main__":
    main()
