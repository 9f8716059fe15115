"""Parsing evaluation shared by `kt-evaluate --task parsing` and `kt-train --task parsing`:
gold trees checked against the source sentences, decoded sequences repaired into trees and
scored as labelled brackets (EVALB COLLINS.prm rules)."""
from __future__ import annotations

import os
from typing import Sequence

from keras_transformer.evaluation import Score
from keras_transformer.parsing.evalb import BracketScore, score_corpus
from keras_transformer.parsing.linearize import delinearize
from keras_transformer.parsing.trees import Tree, read_tree_file

SIGNATURE = "evalb:COLLINS.prm|labelled-brackets|corpus"


def read_gold_trees(path: str | os.PathLike, sources: Sequence[str],
                    sources_name: str) -> list[Tree]:
    """The gold trees of `path`, one per sentence of `sources` (read from `sources_name`).

    Raises ValueError (TreeFormatError for malformed trees) naming both files when the
    counts differ or a tree's words are not its sentence's words.
    """
    trees = read_tree_file(path)
    if len(trees) != len(sources):
        raise ValueError(f"{os.fspath(path)!r} has {len(trees)} trees but {sources_name!r} has "
                         f"{len(sources)} sentences")
    for index, (tree, sentence) in enumerate(zip(trees, sources), start=1):
        if tree.words() != sentence.split():
            raise ValueError(f"{os.fspath(path)!r} tree {index}: words {tree.words()[:8]} differ "
                             f"from {sources_name!r} line {index}: {sentence.split()[:8]}")
    return trees


def parse_scores(decoded: Sequence[str], gold_trees: Sequence[Tree]
                 ) -> tuple[list[Tree], list[Score]]:
    """The repaired trees (one per decoded string, over the gold words and tags) and the
    corpus bracket precision, recall and F1 (percentages) as `Score`s, F1 first."""
    trees = trees_from_decoded(decoded, gold_trees)
    brackets = score_corpus(gold_trees, trees)
    signature = f"{SIGNATURE}|matched:{brackets.matched}|gold:{brackets.gold}|test:{brackets.test}"
    return trees, [Score("F1", brackets.f1, signature),
                   Score("precision", brackets.precision, signature),
                   Score("recall", brackets.recall, signature)]


def trees_from_decoded(decoded: Sequence[str], gold_trees: Sequence[Tree]) -> list[Tree]:
    """One well-formed tree per decoded string, over its gold tree's words and tags."""
    if len(decoded) != len(gold_trees):
        raise ValueError(f"{len(decoded)} decoded strings but {len(gold_trees)} gold trees")
    return [delinearize(text, gold.words(), gold.tags()) for text, gold in zip(decoded, gold_trees)]


def evaluate_decoded(decoded: Sequence[str], gold_trees: Sequence[Tree]) -> BracketScore:
    """Corpus-level EVALB bracket scores of decoded strings against preprocessed gold trees."""
    return score_corpus(gold_trees, trees_from_decoded(decoded, gold_trees))
