"""The bracketed-tree reader: shapes, multiple trees, and errors naming source and tree."""
from __future__ import annotations

import pytest

from keras_transformer.parsing.trees import (Tree, TreeFormatError, read_tree, read_tree_file,
                                             read_trees)

MRG = """( (S
    (NP-SBJ (NNP Pierre) (NNP Vinken) )
    (VP (MD will) )
    (. .) ))
( (NP (DT the) (NN board) ))
"""


def test_reads_treebank_layout_with_unlabelled_root() -> None:
    first, second = read_trees(MRG)
    assert first.label == ""
    assert first.words() == ["Pierre", "Vinken", "will", "."]
    assert first.tags() == ["NNP", "NNP", "MD", "."]
    assert second == Tree("", (Tree("NP", (Tree("DT", ("the",)), Tree("NN", ("board",)))),))


def test_str_round_trips() -> None:
    tree = read_tree("(S (NP-SBJ (PRP I)) (VP (VBP see) (-NONE- *T*-1)) (. .))")
    assert str(tree) == "(S (NP-SBJ (PRP I)) (VP (VBP see) (-NONE- *T*-1)) (. .))"
    assert read_tree(str(tree)) == tree


@pytest.mark.parametrize("text, tree_index, line, fragment", [
    ("(S (NP (NN a))\n", 1, 1, "not closed"),
    ("(S (NN a))\n(S (NN b)))\n", 2, 2, "')' without a matching '('"),
    ("(S (NN a))\nstray\n", 2, 2, "outside any tree"),
    ("(S (NN a) b)\n", 1, 1, "mixes words"),
    ("(S (NN a))\n(S ())\n", 2, 2, "empty bracket"),
    # A missing ')' must not merge the next tree into this one.
    ("(S (NN a)\n(S (NN b))\n(S (NN c))\n", 1, 1, "not closed before the next tree at line 2"),
])
def test_malformed_trees_name_source_index_and_line(
    text: str, tree_index: int, line: int, fragment: str
) -> None:
    with pytest.raises(TreeFormatError) as error:
        read_trees(text, source="bad.mrg")
    assert str(error.value).startswith(f"bad.mrg: tree {tree_index} (line {line}): ")
    assert fragment in str(error.value)


def test_file_errors_name_the_file(tmp_path) -> None:
    path = tmp_path / "wsj_0500.mrg"
    path.write_text(MRG + "( (S (NN x) )\n")
    with pytest.raises(TreeFormatError, match=r"wsj_0500\.mrg: tree 3 \(line 6\)"):
        read_tree_file(path)


def test_read_tree_requires_exactly_one() -> None:
    with pytest.raises(TreeFormatError, match="found 2"):
        read_tree("(A (B c)) (A (B d))")
