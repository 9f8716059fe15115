"""`moses_form`: writes a parallel corpus in the form published Multi30k figures use.

    python -m trainers moses_form --src train.en.gz --tgt train.de.gz --langs en de \
        --output-prefix data/train

writes `data/train.en` and `data/train.de` lowercased, punctuation-normalized and
Moses-tokenized (`keras_transformer.data.moses_form`; `pip install -e ".[benchmark-text]"`).
A model trained on them takes and gives text in that form: for comparing with published BLEU
(`kt-evaluate --tokenized-ref`), not for serving users.
"""
from __future__ import annotations

import argparse
import sys
from typing import Optional, Sequence

from trainers.arguments import moses_form_parser

from keras_transformer.data.moses_form import write_moses_form


def parse_args(argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
    """The command line's options (`argv`: default `sys.argv[1:]`)."""
    return moses_form_parser().parse_args(argv)


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Runs the command line; returns its exit status (2 on a user error)."""
    args = parse_args(argv)
    try:
        paths = write_moses_form(args.src, args.tgt, tuple(args.langs), args.output_prefix)
    except (ValueError, FileNotFoundError, ImportError) as error:
        print(f"moses_form: error: {error}", file=sys.stderr)
        return 2
    print("\n".join(paths))
    return 0


if __name__ == "__main__":
    sys.exit(main())
