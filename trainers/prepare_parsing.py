"""`prepare_parsing`: writes the treebank splits as parallel files for `kt-train`.

    python -m trainers prepare_parsing --output-dir runs/parsing-data
    python -m trainers train --preset parsing-small \
        --train-src runs/parsing-data/train.src --train-tgt runs/parsing-data/train.tgt \
        --dev-src runs/parsing-data/dev.src --dev-tgt runs/parsing-data/dev.tgt ...

Per split (train wsj_0001-0159, dev 0160-0179, test 0180-0199): ``<split>.src`` sentences,
``<split>.tgt`` linearized trees and ``<split>.tree`` preprocessed gold trees, line-aligned.
"""
from __future__ import annotations

import argparse
import sys
from typing import Optional, Sequence

from trainers.arguments import prepare_parsing_parser

from keras_transformer.parsing.corpus import treebank_dir, write_parallel_files


def parse_args(argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
    """The command line's options, checked (`argv`: default `sys.argv[1:]`)."""
    return prepare_parsing_parser().parse_args(argv)


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Runs the command line; returns its exit status (2 on a user error)."""
    args = parse_args(argv)
    treebank = args.treebank or treebank_dir()
    try:
        written = write_parallel_files(treebank, args.output_dir, args.leaves)
    except (FileNotFoundError, ValueError) as error:  # ValueError: TreeFormatError too
        print(f"prepare_parsing: error: {error}", file=sys.stderr)
        return 2
    for split, paths in written.items():
        with open(paths["src"], encoding="utf-8") as handle:
            count = sum(1 for _ in handle)
        print(f"{split}: {count} trees -> {', '.join(str(path) for path in paths.values())}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
