"""Linearization and its inverse, including repair of malformed decoder output."""
from __future__ import annotations

import pytest

from keras_transformer.parsing.linearize import delinearize, linearize, source_text
from keras_transformer.parsing.preprocess import preprocess
from keras_transformer.parsing.trees import Tree, read_tree

TREE = preprocess(read_tree(
    "( (S (NP-SBJ (DT The) (NN cat)) (VP (VBD sat) (PP (IN on) (NP (PRP it)))) (. .)))"))
WORDS, TAGS = TREE.words(), TREE.tags()
TARGET = "(S (NP XX XX ) (VP XX (PP XX (NP XX ) ) ) XX )"


def test_source_and_target() -> None:
    assert source_text(TREE) == "The cat sat on it ."
    assert linearize(TREE) == TARGET


def test_round_trip_with_tags() -> None:
    assert delinearize(TARGET, WORDS, TAGS) == TREE


def test_words_as_leaves_round_trip() -> None:
    target = linearize(TREE, leaves="words")
    assert target == "(S (NP The cat ) (VP sat (PP on (NP it ) ) ) . )"
    assert delinearize(target, WORDS, TAGS) == TREE
    with pytest.raises(ValueError, match="leaves: 'tags'"):
        linearize(TREE, leaves="tags")


def test_without_tags_words_get_placeholder_tags() -> None:
    tree = delinearize(TARGET, WORDS)
    assert tree.words() == WORDS
    assert set(tree.tags()) == {"XX"}


def test_labelled_closing_brackets_and_glued_tokens_are_read() -> None:
    assert delinearize("(S(NP XX XX)NP (VP XX(PP XX(NP XX)))VP XX)S", WORDS, TAGS) == TREE


def _assert_well_formed(tree: Tree) -> None:
    """Every constituent has children; every pre-terminal holds exactly one word."""
    assert tree.label == "TOP"
    nodes = [tree]
    while nodes:
        node = nodes.pop()
        assert node.children
        if not node.is_preterminal:
            assert all(isinstance(child, Tree) for child in node.children)
            nodes.extend(node.children)  # type: ignore[arg-type]


@pytest.mark.parametrize("decoded, expected", [
    # Truncated: open brackets closed, missing words go to the innermost open constituent.
    ("(S (NP XX XX ) (VP XX (PP",
     "(TOP (S (NP (DT The) (NN cat)) (VP (VBD sat) (PP (IN on) (PRP it) (. .)))))"),
    # Too many closing brackets and too many word slots: the extras are ignored.
    ("(S (NP XX XX ) ) ) (VP XX XX XX XX XX XX ) )",
     "(TOP (S (NP (DT The) (NN cat))) (VP (VBD sat) (IN on) (PRP it) (. .)))"),
    # Empty constituents and label-less openings disappear.
    ("(S (NP ) ( XX XX (VP ) XX XX XX XX )",
     "(TOP (S (DT The) (NN cat) (VBD sat) (IN on) (PRP it) (. .)))"),
    # Nothing usable at all: the words hang from the root.
    ("", "(TOP (DT The) (NN cat) (VBD sat) (IN on) (PRP it) (. .))"),
    (") ) ( ((", "(TOP (DT The) (NN cat) (VBD sat) (IN on) (PRP it) (. .))"),
])
def test_repair(decoded: str, expected: str) -> None:
    tree = delinearize(decoded, WORDS, TAGS)
    _assert_well_formed(tree)
    assert tree.words() == WORDS
    assert str(tree) == expected


@pytest.mark.parametrize("decoded", [
    "(S (S (S (S (S", "XX ) XX ) (NP", "<unk> (VP the cat ) )VP ((( XX",
    "(NP XX XX XX XX XX XX XX XX",
])
def test_garbage_still_gives_a_well_formed_tree_over_the_words(decoded: str) -> None:
    tree = delinearize(decoded, WORDS, TAGS)
    _assert_well_formed(tree)
    assert tree.words() == WORDS
    assert tree.tags() == TAGS


@pytest.mark.parametrize("decoded, expected", [
    # A doubled word: its second slot stays empty, later words keep their places.
    ("(S (NP The cat cat ) (VP sat (PP on (NP it ) ) ) . )", str(TREE)),
    # A misspelt word still takes its own slot.
    ("(S (NP The kat ) (VP sat (PP on (NP it ) ) ) . )", str(TREE)),
    # A skipped word joins the constituent of the word before it.
    ("(S (NP The cat ) (VP sat (PP (NP it ) ) ) . )",
     "(TOP (S (NP (DT The) (NN cat)) (VP (VBD sat) (IN on) (PP (NP (PRP it)))) (. .)))"),
    # Trailing words without slots go to the innermost constituent open at the end.
    ("(S (NP The cat ) (VP sat (PP on",
     "(TOP (S (NP (DT The) (NN cat)) (VP (VBD sat) (PP (IN on) (PRP it) (. .)))))"),
])
def test_word_leaves_are_aligned_with_the_sentence(decoded: str, expected: str) -> None:
    tree = delinearize(decoded, WORDS, TAGS)
    _assert_well_formed(tree)
    assert str(tree) == expected


def test_tags_must_match_words() -> None:
    with pytest.raises(ValueError, match="2 tags for 6 words"):
        delinearize(TARGET, WORDS, ["DT", "NN"])
