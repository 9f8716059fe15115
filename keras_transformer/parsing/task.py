"""Decoded target strings -> trees -> F1: the calls a trainer's ``--task parsing`` needs.

The model's outputs carry no words or tags; each tree gets its gold tree's words and
part-of-speech tags back (the tags matter only to external EVALB runs, whose punctuation
rule reads them; our scorer takes punctuation from the gold tree).
"""
from __future__ import annotations

from typing import Sequence

from keras_transformer.parsing.evalb import BracketScore, score_corpus
from keras_transformer.parsing.linearize import delinearize
from keras_transformer.parsing.trees import Tree


def trees_from_decoded(decoded: Sequence[str], gold_trees: Sequence[Tree]) -> list[Tree]:
    """One well-formed tree per decoded string, over its gold tree's words and tags."""
    if len(decoded) != len(gold_trees):
        raise ValueError(f"{len(decoded)} decoded strings but {len(gold_trees)} gold trees")
    return [delinearize(text, gold.words(), gold.tags()) for text, gold in zip(decoded, gold_trees)]


def evaluate_decoded(decoded: Sequence[str], gold_trees: Sequence[Tree]) -> BracketScore:
    """Corpus-level EVALB bracket scores of decoded strings against preprocessed gold trees."""
    return score_corpus(gold_trees, trees_from_decoded(decoded, gold_trees))
