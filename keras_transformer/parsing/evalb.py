"""Labelled bracket precision, recall and F1 under EVALB's COLLINS.prm rules.

* Words tagged ``-NONE-`` or with a punctuation tag (``, : `` '' .``) in the gold tree are
  deleted from both trees before spans are computed; words must otherwise match.
* Pre-terminals are not brackets; brackets spanning no word are dropped.
* Labels are cut at their first ``-`` or ``=`` (function tags, indices), ``ADVP`` equals
  ``PRT``, and ``TOP`` brackets and the unlabelled treebank root are not counted.
* Brackets match as a multiset: each gold bracket matches at most one test bracket.
* Corpus scores sum matches and bracket counts over sentences (not an average of ratios).

Scores are percentages, like EVALB's output; a ratio with a zero denominator is 0.
"""
from __future__ import annotations

import collections
import dataclasses
from typing import Iterable

from keras_transformer.parsing.preprocess import TRACE_TAG, strip_function_tags
from keras_transformer.parsing.trees import Tree

PUNCTUATION_TAGS = frozenset({",", ":", "``", "''", "."})
DELETED_LABELS = frozenset({"TOP", ""})  # "": the treebank's unlabelled root
EQUIVALENT_LABELS = {"PRT": "ADVP"}
_NOT_SCORED = DELETED_LABELS | PUNCTUATION_TAGS
Bracket = tuple[str, int, int]


@dataclasses.dataclass(frozen=True)
class BracketScore:
    """Matched, gold and test bracket counts, with EVALB's derived percentages."""

    matched: int = 0
    gold: int = 0
    test: int = 0

    def __add__(self, other: "BracketScore") -> "BracketScore":
        return BracketScore(self.matched + other.matched, self.gold + other.gold,
                            self.test + other.test)

    @property
    def recall(self) -> float:
        return 100.0 * self.matched / self.gold if self.gold else 0.0

    @property
    def precision(self) -> float:
        return 100.0 * self.matched / self.test if self.test else 0.0

    @property
    def f1(self) -> float:
        total = self.precision + self.recall
        return 2 * self.precision * self.recall / total if total else 0.0


def score_sentence(gold: Tree, test: Tree) -> BracketScore:
    """The bracket counts of one test tree against its gold tree.

    Raises ValueError when the trees' words (ignoring ``-NONE-``) differ, which EVALB
    reports as an error sentence.
    """
    gold_words, test_words = _words(gold), _words(test)
    if gold_words != test_words:
        raise ValueError(f"words differ: gold {gold_words} vs test {test_words}")
    kept = _kept_positions(gold)
    gold_brackets = collections.Counter(_brackets(gold, kept))
    test_brackets = collections.Counter(_brackets(test, kept))
    matched = sum((gold_brackets & test_brackets).values())
    return BracketScore(matched, sum(gold_brackets.values()), sum(test_brackets.values()))


def score_corpus(golds: Iterable[Tree], tests: Iterable[Tree]) -> BracketScore:
    """Summed sentence counts; the two sequences must have the same length."""
    golds, tests = list(golds), list(tests)
    if len(golds) != len(tests):
        raise ValueError(f"{len(golds)} gold trees but {len(tests)} test trees")
    return sum(map(score_sentence, golds, tests), BracketScore())


def _words(tree: Tree) -> list[str]:
    return [node.children[0] for node in tree.preterminals() if node.label != TRACE_TAG]


def _kept_positions(gold: Tree) -> list[bool]:
    """For each non-trace word of `gold`: whether EVALB keeps it (not punctuation)."""
    return [node.label not in PUNCTUATION_TAGS
            for node in gold.preterminals() if node.label != TRACE_TAG]


def _brackets(tree: Tree, kept: list[bool]) -> list[Bracket]:
    """The scored (label, start, end) brackets, spans counted over kept words only."""
    brackets: list[Bracket] = []
    _collect(tree, kept, [0, 0], brackets)
    return brackets


def _collect(tree: Tree, kept: list[bool], cursor: list[int], brackets: list[Bracket]) -> None:
    """Walks `tree`; cursor = [next word index, next kept-word index]."""
    if tree.is_preterminal:
        if tree.label != TRACE_TAG:
            cursor[1] += kept[cursor[0]]
            cursor[0] += 1
        return
    start = cursor[1]
    for child in tree.children:
        _collect(child, kept, cursor, brackets)  # type: ignore[arg-type]
    label = strip_function_tags(tree.label)
    label = EQUIVALENT_LABELS.get(label, label)
    if cursor[1] > start and label not in _NOT_SCORED:
        brackets.append((label, start, cursor[1]))
