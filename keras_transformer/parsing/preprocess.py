"""Standard treebank clean-up before training and scoring.

* ``-NONE-`` traces are removed, and so are the constituents left without words.
* Function tags and indices are stripped: ``NP-SBJ-1`` -> ``NP``, ``PP-LOC=2`` -> ``PP``
  (labels starting with ``-`` such as ``-LRB-`` are kept whole, as EVALB does).
* The unlabelled treebank root (``( (S ...) )``) becomes ``TOP``, the label EVALB's
  COLLINS.prm deletes, so the root bracket is never scored; a tree without such a root,
  like ``(S ...)``, is wrapped in one.
"""
from __future__ import annotations

import re
from typing import Optional

from keras_transformer.parsing.trees import Tree

ROOT_LABEL = "TOP"
ROOT_LABELS = ("", ROOT_LABEL, "ROOT")
TRACE_TAG = "-NONE-"
_FUNCTION_TAG = re.compile(r"[-=].*")


def strip_function_tags(label: str) -> str:
    """The label up to its first ``-`` or ``=``; labels starting with ``-`` are kept."""
    return label if label.startswith("-") else _FUNCTION_TAG.sub("", label)


def preprocess(tree: Tree) -> Tree:
    """The cleaned tree under a ``TOP`` root; raises ValueError if only traces remain."""
    cleaned = _clean(tree)
    if cleaned is None:
        raise ValueError(f"tree has no words besides {TRACE_TAG} traces: {tree}")
    if tree.label in ROOT_LABELS:
        return Tree(ROOT_LABEL, cleaned.children)
    return Tree(ROOT_LABEL, (cleaned,))


def _clean(tree: Tree) -> Optional[Tree]:
    """`tree` without traces and function tags, or None when no word remains."""
    if tree.is_preterminal:
        return None if tree.label == TRACE_TAG else tree
    children = tuple(
        cleaned for child in tree.children
        if isinstance(child, Tree) and (cleaned := _clean(child)) is not None
    )
    return Tree(strip_function_tags(tree.label), children) if children else None
