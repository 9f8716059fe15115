"""Preprocessing: traces and their empty constituents go, function tags go, root is TOP."""
from __future__ import annotations

import pytest

from keras_transformer.parsing.preprocess import preprocess, strip_function_tags
from keras_transformer.parsing.trees import read_tree

RAW = """( (S
    (NP-SBJ-1 (NNP Mary) )
    (VP (VBD wanted)
      (S (NP-SBJ (-NONE- *-1) )
        (VP (TO to) (VP (VB leave) (NP (-NONE- *T*-2) )))))
    (PP-LOC=2 (-LRB- -LRB-) (NN here) (-RRB- -RRB-) )
    (. .) ))"""


def test_removes_traces_empty_constituents_and_function_tags() -> None:
    assert str(preprocess(read_tree(RAW))) == (
        "(TOP (S (NP (NNP Mary)) (VP (VBD wanted) (S (VP (TO to) (VP (VB leave)))))"
        " (PP (-LRB- -LRB-) (NN here) (-RRB- -RRB-)) (. .)))"
    )


@pytest.mark.parametrize("label, stripped", [
    ("NP-SBJ-1", "NP"), ("PP-LOC=2", "PP"), ("NP=3", "NP"), ("S-TPC-1", "S"), ("NP", "NP"),
    ("-NONE-", "-NONE-"), ("-LRB-", "-LRB-"), ("PRP$", "PRP$"),
])
def test_strip_function_tags(label: str, stripped: str) -> None:
    assert strip_function_tags(label) == stripped


def test_root_handling() -> None:
    assert preprocess(read_tree("(TOP (NP (NN a)))")) == preprocess(read_tree("( (NP (NN a)))"))
    # A tree without the treebank's root keeps its top constituent under a new TOP.
    assert str(preprocess(read_tree("(S-1 (NN a))"))) == "(TOP (S (NN a)))"


def test_tree_of_traces_only_is_an_error() -> None:
    with pytest.raises(ValueError, match="no words besides -NONE-"):
        preprocess(read_tree("( (S (-NONE- *)))"))
