"""The treebank sample split by file, as line-aligned parallel text for the trainer.

Splits (data README): train ``wsj_0001``-``wsj_0159``, dev ``wsj_0160``-``wsj_0179``,
test ``wsj_0180``-``wsj_0199``. `write_parallel_files` writes, per split, ``<split>.src``
(sentences), ``<split>.tgt`` (linearized trees) and ``<split>.tree`` (the preprocessed gold
trees, one a line, for scoring), all line-aligned.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Optional

from keras_transformer.data.text_files import shared_data_dir
from keras_transformer.parsing.linearize import linearize, source_text
from keras_transformer.parsing.preprocess import preprocess
from keras_transformer.parsing.trees import Tree, read_tree_file

SPLITS: dict[str, tuple[int, int]] = {"train": (1, 159), "dev": (160, 179), "test": (180, 199)}


def treebank_dir(data_dir: Optional[str | os.PathLike] = None) -> Path:
    """``<data_dir>/treebank``; `data_dir` defaults to the shared data folder."""
    return Path(data_dir if data_dir is not None else shared_data_dir()) / "treebank"


def split_files(directory: str | os.PathLike, split: str) -> list[Path]:
    """The split's ``wsj_NNNN.mrg`` files; a missing one raises FileNotFoundError."""
    if split not in SPLITS:
        raise ValueError(f"unknown split {split!r}; choose from {sorted(SPLITS)}")
    first, last = SPLITS[split]
    paths = [Path(directory) / f"wsj_{number:04d}.mrg" for number in range(first, last + 1)]
    missing = [str(path) for path in paths if not path.is_file()]
    if missing:
        raise FileNotFoundError(f"split {split!r}: {len(missing)} file(s) missing: {missing[:3]}")
    return paths


def read_split(directory: str | os.PathLike, split: str) -> list[Tree]:
    """The split's preprocessed trees, in file order."""
    return [preprocess(tree) for path in split_files(directory, split)
            for tree in read_tree_file(path)]


def parallel_text(trees: list[Tree], leaves: str = "placeholder") -> tuple[list[str], list[str]]:
    """(sentences, linearized targets) of preprocessed trees (`leaves` as in `linearize`)."""
    return [source_text(tree) for tree in trees], [linearize(tree, leaves) for tree in trees]


def write_parallel_files(
    treebank: str | os.PathLike, output_dir: str | os.PathLike, leaves: str = "placeholder"
) -> dict[str, dict[str, Path]]:
    """Writes every split's ``.src``, ``.tgt`` (`leaves` as in `linearize`) and ``.tree``
    files; returns their paths."""
    output = Path(output_dir)
    output.mkdir(parents=True, exist_ok=True)
    written: dict[str, dict[str, Path]] = {}
    for split in SPLITS:
        trees = read_split(treebank, split)
        sources, targets = parallel_text(trees, leaves)
        columns = {"src": sources, "tgt": targets, "tree": [str(tree) for tree in trees]}
        written[split] = {}
        for suffix, lines in columns.items():
            path = output / f"{split}.{suffix}"
            path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
            written[split][suffix] = path
    return written
