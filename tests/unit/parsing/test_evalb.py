"""EVALB (COLLINS.prm) bracket scores on hand-made trees with hand-computed values."""
from __future__ import annotations

import pytest

from keras_transformer.parsing.evalb import BracketScore, score_corpus, score_sentence
from keras_transformer.parsing.trees import read_tree

# Scored words (the final "." is punctuation): The=0 cat=1 sat=2 on=3 it=4.
# Gold brackets: S(0,5) NP(0,2) VP(2,5) PP(3,5) NP(4,5).
GOLD = read_tree("( (S (NP-SBJ (DT The) (NN cat)) (VP (VBD sat) (PP (IN on) (NP (PRP it))))"
                 " (. .)))")
# Test brackets: S(0,5)+ NP(0,3) ADJP(1,2) VP(3,5) PP(3,5)+ NP(4,5)+  -> 3 of 6 match.
TEST = read_tree("(TOP (S (NP (DT The) (ADJP (NN cat)) (VBD sat)) (VP (PP (IN on) (NP (PRP it))))"
                 " (. .)))")


def test_hand_computed_precision_recall_f1() -> None:
    score = score_sentence(GOLD, TEST)
    assert score == BracketScore(matched=3, gold=5, test=6)
    assert score.precision == pytest.approx(100 * 3 / 6)
    assert score.recall == pytest.approx(100 * 3 / 5)
    assert score.f1 == pytest.approx(2 * 50.0 * 60.0 / (50.0 + 60.0))  # 54.55


def test_gold_against_itself() -> None:
    assert score_sentence(GOLD, GOLD) == BracketScore(5, 5, 5)
    assert score_sentence(GOLD, GOLD).f1 == 100.0


def test_punctuation_position_does_not_matter() -> None:
    # "." attached outside S: the raw spans differ, the spans over scored words do not.
    moved = read_tree("(TOP (S (NP (DT The) (NN cat)) (VP (VBD sat) (PP (IN on) (NP (PRP it)))))"
                      " (. .))")
    assert score_sentence(GOLD, moved) == BracketScore(5, 5, 5)


def test_punctuation_decided_by_gold_tags() -> None:
    # The test tree tags "." as XX; EVALB's gold-tag rule still ignores it.
    untagged = read_tree("(TOP (S (NP (XX The) (XX cat)) (VP (XX sat) (PP (XX on) (NP (XX it))))"
                         " (XX .)))")
    assert score_sentence(GOLD, untagged) == BracketScore(5, 5, 5)


def test_traces_function_tags_and_root_of_raw_gold() -> None:
    raw = read_tree("( (S (NP-SBJ-1 (DT The) (NN cat)) (VP (VBD sat) (NP (-NONE- *T*-1))"
                    " (PP-LOC=2 (IN on) (NP (PRP it)))) (. .)))")
    # The empty NP over the trace spans no word and is not a bracket; root not counted.
    assert score_sentence(raw, GOLD) == BracketScore(5, 5, 5)


def test_advp_equals_prt_and_punctuation_only_brackets_are_dropped() -> None:
    gold = read_tree("(TOP (S (VP (VB give) (PRT (RP up))) (PRN (, ,) (: --))))")
    test = read_tree("(TOP (S (VP (VB give) (ADVP (RP up))) (, ,) (: --)))")
    # Gold: S(0,2) VP(0,2) PRT(1,2); the PRN holds only punctuation, so spans nothing.
    assert score_sentence(gold, test) == BracketScore(3, 3, 3)


def test_duplicate_brackets_match_at_most_once() -> None:
    gold = read_tree("(TOP (NP (NP (NN a)) (NN b)))")  # NP(0,2) NP(0,1)
    test = read_tree("(TOP (NP (NP (NP (NN a))) (NN b)))")  # NP(0,2) NP(0,1) NP(0,1)
    assert score_sentence(gold, test) == BracketScore(2, 2, 3)


def test_corpus_sums_counts_instead_of_averaging() -> None:
    gold_2 = read_tree("(TOP (NP (NP (NN a)) (NN b)))")
    test_2 = read_tree("(TOP (NP (NN a) (NN b)))")  # 1 of 1 test, 1 of 2 gold
    score = score_corpus([GOLD, gold_2], [TEST, test_2])
    assert score == BracketScore(matched=4, gold=7, test=7)
    assert score.f1 == pytest.approx(100 * 4 / 7)


def test_mismatches_are_errors() -> None:
    with pytest.raises(ValueError, match="words differ"):
        score_sentence(GOLD, read_tree("(TOP (S (NN a)))"))
    with pytest.raises(ValueError, match="1 gold trees but 2 test trees"):
        score_corpus([GOLD], [GOLD, GOLD])


def test_no_brackets_scores_zero() -> None:
    assert BracketScore().f1 == 0.0
    assert score_sentence(read_tree("(TOP (NN a))"), read_tree("(TOP (NN a))")) == BracketScore()
