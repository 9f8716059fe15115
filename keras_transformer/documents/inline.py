"""Inline markup carried by word alignment: a block's text as runs, each with its stack of open
inline elements; the model translates the runs' plain text, and each target word takes the
stack of the source word it is aligned to (as Bergamot's HTML mode does).

The output is well-formed whatever the alignment: tags are opened and closed where the stack
of one word differs from the next word's, so an element whose words are apart in the
translation is written once per stretch of its words (split into several), and an element
none of whose words has a target word aligned to it takes the target word aligned nearest to
its own words, so that every source element is in the output.
"""
from __future__ import annotations

import bisect
import dataclasses
import re
import itertools
from typing import Callable, NamedTuple, Optional, Sequence


@dataclasses.dataclass(eq=False)
class Element:
    """An inline element as its format writes it: its opening and closing markup (`close` ""
    for a void element such as `<br>`). Elements are told apart by identity, not by value."""
    name: str
    open: str
    close: str = ""


Stack = tuple[Element, ...]


@dataclasses.dataclass
class Run:
    """Plain text under a stack of open elements (outermost first), or an atom: markup copied
    as it is (`atom` True: a void element, inline code, a comment) that holds no words."""
    text: str
    stack: Stack = ()
    atom: bool = False


@dataclasses.dataclass
class Block:
    """Inline content to translate, between two block boundaries: its runs, the plain-text
    offsets where a sentence must end (`breaks`: line breaks), its source text as it is
    (`source`: copied when nothing in it is translatable) and the line it starts on."""
    runs: list[Run] = dataclasses.field(default_factory=list)
    source: list[str] = dataclasses.field(default_factory=list)
    line: int = 1
    breaks: list[int] = dataclasses.field(default_factory=list)

    def add_text(self, raw: str, text: str, stack: Stack) -> None:
        """Text (`raw` as the source writes it)."""
        self.runs.append(Run(text, stack))
        self.source.append(raw)

    def add_atom(self, raw: str, stack: Stack) -> None:
        self.runs.append(Run(raw, stack, atom=True))
        self.source.append(raw)

    def add_break(self, raw: str, stack: Stack) -> None:
        """An atom where the sentence ends (a line break)."""
        self.breaks.append(len(plain_text(self.runs)))
        self.add_atom(raw, stack)


def plain_text(runs: Sequence[Run]) -> str:
    """The text the model reads: the runs' text, atoms left out."""
    return "".join(run.text for run in runs if not run.atom)


def serialize(runs: Sequence[Run], escape: Callable[[str], str]) -> str:
    """The runs written out: each run's text escaped, elements opened and closed where the
    stacks of neighbouring runs differ (an atom's text as it is)."""
    out: list[str] = []
    open_stack: list[Element] = []
    for run in runs:
        common = 0
        while (common < len(open_stack) and common < len(run.stack)
               and open_stack[common] is run.stack[common]):
            common += 1
        while len(open_stack) > common:
            out.append(open_stack.pop().close)
        for element in run.stack[common:]:
            out.append(element.open)
            open_stack.append(element)
        out.append(run.text if run.atom else escape(run.text))
    while open_stack:
        out.append(open_stack.pop().close)
    return "".join(out)


@dataclasses.dataclass
class Atoms:
    """Atoms next to each other in a sentence, and whether whitespace came before and after
    them in the source (the translation keeps them apart from the words as the source did)."""
    runs: list[Run] = dataclasses.field(default_factory=list)
    space_before: bool = False
    space_after: bool = False


@dataclasses.dataclass
class Word:
    """A source word (no whitespace in `text`) under the stack of most of its characters, and
    the atoms right before it (`before`)."""
    text: str
    stack: Stack
    before: Atoms = dataclasses.field(default_factory=Atoms)


class Aligned(NamedTuple):
    """A sentence's translation and, for each of its words (split at whitespace), the index of
    the source word it is aligned to (-1: none); `alignment` None: not known."""
    text: str
    alignment: Optional[Sequence[int]] = None


class Sentence(NamedTuple):
    """A source sentence's words, the atoms after its last word, and its text for the model
    (the words joined by single spaces)."""
    words: list[Word]
    trailing: Atoms

    @property
    def text(self) -> str:
        return " ".join(word.text for word in self.words)


def sentences(runs: Sequence[Run], spans: Sequence[tuple[int, int]]) -> list[Sentence]:
    """The sentences at `spans` (plain-text offsets, in order) of a block's runs: words split
    at whitespace and at atoms, each under the stack of most of its characters. An atom at a
    sentence's first or last offset travels with the sentence."""
    cells = _cells(runs)
    taken: set[int] = set()  # the atoms of earlier sentences (an atom between two is the first's)
    found = []
    for start, end in spans:
        found.append(Sentence(*_words(cells, start, end, taken)))
    return found


def translated_runs(runs: Sequence[Run], spans: Sequence[tuple[int, int]],
                    source: Sequence[Sentence], translations: Sequence[Aligned]) -> list[Run]:
    """A block's runs with its `source` sentences at `spans` replaced by their translations
    (`placed_runs`); the text and atoms between the sentences kept as they are."""
    cells = _cells(runs)
    out: list[Run] = []
    position: Optional[int] = None
    for (start, end), sentence, translation in zip(spans, source, translations):
        out.extend(_between(cells, position, start))
        out.extend(placed_runs(sentence.words, sentence.trailing, translation))
        position = end
    out.extend(_between(cells, position, None))
    return out


Cell = tuple[int, str, Stack, Optional[Run]]  # plain-text offset, character, stack, atom


def _cells(runs: Sequence[Run]) -> list[Cell]:
    """The runs as one cell per character, and one per atom at its plain-text offset."""
    cells: list[Cell] = []
    position = 0
    for run in runs:
        if run.atom:
            cells.append((position, "", run.stack, run))
            continue
        for char in run.text:
            cells.append((position, char, run.stack, None))
            position += 1
    return cells


def _between(cells: Sequence[Cell], start: Optional[int], end: Optional[int]) -> list[Run]:
    """The runs of the text between two sentences: from the end of one (`start`; None: the
    block's start) to the start of the next (`end`; None: the block's end). Atoms at either
    offset travel with the sentences."""
    out: list[Run] = []
    first = 0 if start is None else bisect.bisect_left(cells, (start,))
    for index in range(first, len(cells)):
        position, char, stack, atom = cells[index]
        if end is not None and position >= end:
            break
        if not (start is None or position > start or (atom is None and position == start)):
            continue
        if atom is not None:
            out.append(atom)
        elif out and not out[-1].atom and out[-1].stack is stack:
            out[-1] = Run(out[-1].text + char, stack)
        else:
            out.append(Run(char, stack))
    return out


def _words(cells: Sequence[Cell], start: int, end: int, taken: set[int]
           ) -> tuple[list[Word], Atoms]:
    """The words of the text from offset `start` to `end`, with the atoms among them (but those
    in `taken`, to which this sentence's are added), and the atoms after the last word."""
    words: list[Word] = []
    atoms = Atoms()
    chars: list[str] = []
    stacks: list[Stack] = []  # each character's
    space = False  # whether the last character was whitespace

    def flush() -> None:
        nonlocal atoms
        if chars:
            stack = stacks[0]
            if any(other is not stack for other in stacks):
                counts: dict[int, tuple[int, Stack]] = {}
                for other in stacks:
                    count, _ = counts.get(id(other), (0, other))
                    counts[id(other)] = (count + 1, other)
                stack = max(counts.values(), key=lambda item: item[0])[1]
            words.append(Word("".join(chars), stack, atoms))
            atoms = Atoms()
            chars.clear()
            stacks.clear()

    for position, char, stack, atom in itertools.islice(cells, bisect.bisect_left(
            cells, (start,)), None):
        if position > end:
            break
        if atom is not None:
            if id(atom) not in taken:
                taken.add(id(atom))
                flush()
                if not atoms.runs:
                    atoms.space_before = space
                atoms.runs.append(atom)
                atoms.space_after = False
        elif position < end:
            space = char.isspace()
            if space:
                flush()
                atoms.space_after = atoms.space_after or bool(atoms.runs)
            else:
                chars.append(char)
                stacks.append(stack)
    flush()
    return words, atoms


def placed_runs(source: Sequence[Word], trailing: Atoms, translation: Aligned) -> list[Run]:
    """The translation's words as runs under the stacks of the source words they are aligned
    to, joined by the translation's whitespace (under the stack the two words share), each
    source word's atoms placed after the target words aligned to the source words before it
    (spaced as in the source, and never joining two words), `trailing` atoms last. Without an
    alignment each target word takes the source word at the same relative position."""
    target = translation.text.split()
    if not source:
        return [*trailing.runs, *([Run(translation.text)] if translation.text else [])]
    alignment = translation.alignment
    if alignment is None or len(alignment) != len(target):
        alignment = [index * len(source) // len(target) for index in range(len(target))]
    alignment = [aligned if 0 <= aligned < len(source) else -1 for aligned in alignment]
    _cover_every_element(source, alignment)
    anchors = _atom_anchors(source, alignment)
    gaps = re.findall(r"\s+", translation.text.strip())
    runs: list[Run] = []
    for index in range(len(target) + 1):
        atoms = anchors.get(index, Atoms())
        if index == len(target):
            atoms = Atoms(atoms.runs + trailing.runs, atoms.space_before if atoms.runs else
                          trailing.space_before)
        word_stack = () if index == len(target) or alignment[index] < 0 else (
            source[alignment[index]].stack)
        inside = 0 < index < len(target)
        before = index > 0 and (atoms.space_before if atoms.runs else inside)
        after = index < len(target) and atoms.space_after and bool(atoms.runs)
        if inside and atoms.runs and not (before or after):
            before = True  # atoms never join two words
        # The translation's own whitespace between two words (a no-break space kept), once.
        gap = gaps[index - 1] if inside else " "
        if before:
            following = (atoms.runs or [Run("", word_stack)])[0].stack
            runs.append(Run(gap, _shared(runs[-1].stack, following)))
            gap = " "
        runs.extend(atoms.runs)
        if after:
            runs.append(Run(gap, _shared(runs[-1].stack, word_stack)))
        if index < len(target):
            runs.append(Run(target[index], word_stack))
    for element, stack in _uncovered(source, runs):  # fewer target words than elements
        runs.append(Run("", stack))
    return runs


def _shared(left: Stack, right: Stack) -> Stack:
    """The outer elements two stacks share."""
    common = 0
    while common < min(len(left), len(right)) and left[common] is right[common]:
        common += 1
    return left[:common]


def _atom_anchors(source: Sequence[Word], alignment: Sequence[int]) -> dict[int, Atoms]:
    """Each source word's atoms by the target position they go before: after the last target
    word aligned to an earlier source word (the start when none is)."""
    anchors: dict[int, Atoms] = {}
    for k, word in enumerate(source):
        if word.before.runs:
            earlier = [index for index, aligned in enumerate(alignment) if 0 <= aligned < k]
            position = max(earlier) + 1 if earlier else 0
            if position in anchors:
                anchors[position].runs.extend(word.before.runs)
                anchors[position].space_after = word.before.space_after
            else:
                anchors[position] = dataclasses.replace(word.before,
                                                        runs=list(word.before.runs))
    return anchors


def _cover_every_element(source: Sequence[Word], alignment: list[int]) -> None:
    """Re-aligns target words so that every element over a source word is over a target word:
    an element none of whose source words has a target word takes the target word aligned
    nearest to its words, among the words whose own source word keeps another target word or
    is under no element (whose markup nothing then lacks)."""
    elements = {id(e): e for word in source for e in word.stack}.values()
    for element in elements:
        positions = [k for k, word in enumerate(source) if any(e is element for e in word.stack)]
        if any(aligned in positions for aligned in alignment):
            continue
        spare = [index for index, aligned in enumerate(alignment)
                 if aligned < 0 or alignment.count(aligned) > 1 or not source[aligned].stack]
        if spare:
            index = min(spare, key=lambda i: min(abs(alignment[i] - k) for k in positions))
            alignment[index] = min(positions, key=lambda k: abs(alignment[index] - k))


def _uncovered(source: Sequence[Word], runs: Sequence[Run]) -> list[tuple[Element, Stack]]:
    """The elements over source words that no run is under, each with its stack (to be
    written empty: every source element is in the output)."""
    present = {id(e) for run in runs for e in run.stack}
    missing: dict[int, tuple[Element, Stack]] = {}
    for word in source:
        for depth, element in enumerate(word.stack):
            if id(element) not in present and id(element) not in missing:
                missing[id(element)] = (element, word.stack[:depth + 1])
    return list(missing.values())
