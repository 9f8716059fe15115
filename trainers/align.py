"""`kt-align`: how well each decoder layer and head of a run aligns words, against given
alignments, and the best one recorded for its translations and exports.

    kt-align runs/multi30k --src val.en --tgt val.de --alignments val.align --record

Each sentence pair is teacher-forced through the model; every layer's encoder-decoder
attention, its heads averaged or one head alone, links each target word to the source word its
pieces attend to most (as markup is placed, `decoding.alignment`). Printed: precision, recall
and alignment error rate (AER) of each choice against `--alignments` (Pharaoh `i-j` lines, e.g.
eflomal's output symmetrized), best first. `--record` writes the best to the run's
`alignment.json`: `kt-translate --format html|markdown` and every later export use it.
"""
from __future__ import annotations

import argparse
import sys
from typing import Optional, Sequence

from trainers.arguments import align_parser
from trainers.common import load_run_model
from keras_transformer.data.text_files import read_lines
from keras_transformer.training.run_dir import RunDir
from keras_transformer.data.word_links import read_pharaoh
from keras_transformer.decoding.alignment import (alignment_error, attention_links,
                                                  candidate_heads, write_alignment_heads)


def parse_args(argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
    """The command line's options (`argv`: default `sys.argv[1:]`)."""
    return align_parser().parse_args(argv)


def read_aligned_pairs(src: str, tgt: str, alignments: str
                       ) -> tuple[list[str], list[str], list[set[tuple[int, int]]]]:
    """The sentence pairs and their alignments, checked: as many lines in each file, every
    link within its line's words (a ValueError names the file and line)."""
    sources, targets, links = read_lines(src), read_lines(tgt), read_pharaoh(alignments)
    if not len(sources) == len(targets) == len(links):
        raise ValueError(f"{src}, {tgt} and {alignments} have {len(sources)}, {len(targets)} "
                         f"and {len(links)} lines")
    for number, (source, target, pairs) in enumerate(zip(sources, targets, links), 1):
        words = (len(source.split()), len(target.split()))
        outside = sorted(pair for pair in pairs if pair[0] >= words[0] or pair[1] >= words[1])
        if outside:
            i, j = outside[0]
            raise ValueError(f"{alignments}:{number}: link {i}-{j} is past the line's "
                             f"{words[0]} source and {words[1]} target words")
    return sources, targets, links


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Runs the command line; returns its exit status (2 on a user error)."""
    args = parse_args(argv)
    try:
        if RunDir(args.run_dir).languages() is not None:
            raise ValueError(f"{args.run_dir}: a run of several language pairs (its language "
                             "tokens are not placed here); align a run of one pair")
        sources, targets, reference = read_aligned_pairs(args.src, args.tgt, args.alignments)
        model, tokenizer = load_run_model(args.run_dir, args.weights)
    except (ValueError, FileNotFoundError) as error:
        print(f"kt-align: error: {error}", file=sys.stderr)
        return 2
    choices = candidate_heads(model.config)
    found = attention_links(model, tokenizer, sources, targets, choices)
    errors = {choice: alignment_error(found[choice], reference) for choice in choices}
    ranked = sorted(choices, key=lambda choice: errors[choice]["aer"])
    print("layer\theads\tprecision\trecall\tAER")
    for choice in ranked:
        heads = "all" if choice.heads is None else ",".join(map(str, choice.heads))
        print(f"{choice.layer}\t{heads}\t{errors[choice]['precision']:.3f}\t"
              f"{errors[choice]['recall']:.3f}\t{errors[choice]['aer']:.3f}")
    if args.record:
        path = write_alignment_heads(args.run_dir, ranked[0], {
            "alignments": args.alignments, "pairs": len(sources), **errors[ranked[0]]})
        print(f"kt-align: recorded layer {ranked[0].layer}, heads "
              f"{'all' if ranked[0].heads is None else list(ranked[0].heads)} in {path}",
              file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
