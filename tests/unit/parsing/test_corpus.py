"""The real treebank sample: split counts, preprocessing, round trip, gold F1 and the CLI."""
from __future__ import annotations

from pathlib import Path

import pytest

from keras_transformer.parsing.corpus import SPLITS, parallel_text, read_split, split_files
from keras_transformer.parsing.linearize import delinearize, linearize
from keras_transformer.parsing.preprocess import preprocess
from keras_transformer.parsing.evaluate import evaluate_decoded, trees_from_decoded
from keras_transformer.parsing.trees import Tree, read_tree_file
from trainers import prepare_parsing

SPLIT_SIZES = {"train": 3396, "dev": 273, "test": 245}  # 3,914 trees in all


@pytest.fixture(scope="module")
def treebank(shared_data: Path) -> Path:
    path = shared_data / "treebank"
    if not (path / "wsj_0001.mrg").is_file():
        pytest.skip(f"treebank sample not found in {path}")
    return path


@pytest.fixture(scope="module")
def raw_splits(treebank: Path) -> dict[str, list[Tree]]:
    return {split: [tree for path in split_files(treebank, split) for tree in read_tree_file(path)]
            for split in SPLITS}


@pytest.fixture(scope="module")
def splits(raw_splits: dict[str, list[Tree]]) -> dict[str, list[Tree]]:
    return {split: [preprocess(tree) for tree in trees] for split, trees in raw_splits.items()}


def _labels(tree: Tree) -> set[str]:
    labels, nodes = set(), [tree]
    while nodes:
        node = nodes.pop()
        labels.add(node.label)
        nodes.extend(child for child in node.children if isinstance(child, Tree))
    return labels


@pytest.mark.slow
def test_split_sizes_and_files(treebank: Path, splits: dict[str, list[Tree]]) -> None:
    assert {split: len(trees) for split, trees in splits.items()} == SPLIT_SIZES
    assert read_split(treebank, "test") == splits["test"]
    assert [path.name for path in split_files(treebank, "dev")][::19] == [
        "wsj_0160.mrg", "wsj_0179.mrg"]


def test_raw_sample_matches_the_data_readme(raw_splits: dict[str, list[Tree]]) -> None:
    raw = [tree for trees in raw_splits.values() for tree in trees]
    tags = [tag for tree in raw for tag in tree.tags()]
    assert (len(raw), len(tags), tags.count("-NONE-")) == (3914, 100676, 6592)


def test_preprocessing_removes_traces_and_function_tags(splits: dict[str, list[Tree]]) -> None:
    labels = set().union(*(_labels(tree) for trees in splits.values() for tree in trees))
    assert "-NONE-" not in labels
    assert {"TOP", "NP", "-LRB-"} <= labels
    assert not [label for label in labels if "=" in label or "-" in label.strip("-")]


def test_round_trip_on_every_tree(splits: dict[str, list[Tree]]) -> None:
    for trees in splits.values():
        for tree in trees:
            assert delinearize(linearize(tree), tree.words(), tree.tags()) == tree


def test_gold_against_gold_test_split(splits: dict[str, list[Tree]]) -> None:
    test = splits["test"]
    score = evaluate_decoded(parallel_text(test)[1], test)
    assert score.gold == score.test == score.matched > 4000
    assert score.f1 == 100.0


def test_flat_output_scores_below_gold(splits: dict[str, list[Tree]]) -> None:
    test = splits["test"]
    flat = ["(S " + "XX " * len(tree.words()) + ")" for tree in test]
    assert trees_from_decoded(flat, test)[0].words() == test[0].words()
    score = evaluate_decoded(flat, test)
    assert score.test == len(test) and 0 < score.matched < len(test)  # one S per sentence
    assert score.recall < 30


@pytest.mark.slow
def test_cli_writes_aligned_split_files(treebank: Path, tmp_path: Path,
                                        splits: dict[str, list[Tree]]) -> None:
    assert prepare_parsing.main(["--treebank", str(treebank), "--output-dir", str(tmp_path)]) == 0
    for split, size in SPLIT_SIZES.items():
        for suffix in ("src", "tgt", "tree"):
            assert len(lines_of(tmp_path / f"{split}.{suffix}")) == size
    sources, targets = parallel_text(splits["dev"])
    assert lines_of(tmp_path / "dev.src") == sources
    assert lines_of(tmp_path / "dev.tgt") == targets
    assert read_tree_file(tmp_path / "dev.tree") == splits["dev"]


def lines_of(path: Path) -> list[str]:
    return path.read_text(encoding="utf-8").splitlines()


def test_cli_reports_missing_files(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    (tmp_path / "wsj_0001.mrg").write_text("( (S (NN a)))\n")
    assert prepare_parsing.main(["--treebank", str(tmp_path), "--output-dir",
                                 str(tmp_path / "out")]) == 2
    assert "split 'train': 158 file(s) missing" in capsys.readouterr().err


def test_cli_reports_malformed_tree_with_file_and_index(tmp_path: Path,
                                                        capsys: pytest.CaptureFixture) -> None:
    for number in range(1, 200):
        (tmp_path / f"wsj_{number:04d}.mrg").write_text("( (S (NN a)))\n( (S (NN b))\n")
    assert prepare_parsing.main(["--treebank", str(tmp_path), "--output-dir",
                                 str(tmp_path / "out")]) == 2
    assert "wsj_0001.mrg: tree 2 (line 2): 1 bracket(s) not closed" in capsys.readouterr().err
