"""`kt-score`: how sure a run's model is of given translations: each pair's teacher-forced
log-probability per token, per word and per sentence (`keras_transformer.decoding.confidence`:
Bergamot's quality estimation, the words as the target SentencePiece model joins pieces).

    kt-score runs/demo --src test.en --tgt test.hyp.de --output test.scores.jsonl

Writes one JSON object a line, in the pairs' order: `sentence` (the mean of the word scores),
`words` ([word, score] pairs) and `tokens` ([piece, log-probability] pairs, the end of sentence
`</s>` last). A source longer than the model's `max_length` is scored from its start (a warning
names the lines); a target longer is refused, naming its line. Models of one target language.
"""
from __future__ import annotations

import argparse
import json
import sys
from typing import Optional, Sequence

from keras_transformer.data import read_lines
from keras_transformer.decoding.confidence import score_pairs
from keras_transformer.decoding.translator import truncated_sources
from keras_transformer.serving.text_translation import truncation_warning
from keras_transformer.training.progress import CountProgress
from keras_transformer.training.run_dir import RunDir
from trainers.arguments import score_parser
from trainers.common import load_run_model


def parse_args(argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
    """The command line's options, checked (`argv`: default `sys.argv[1:]`)."""
    parser = score_parser()
    args = parser.parse_args(argv)
    if args.batch_size < 1:
        parser.error(f"--batch-size: must be at least 1, got {args.batch_size}")
    return args


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Runs the command line; returns its exit status (2 on a user error)."""
    args = parse_args(argv)
    try:
        if RunDir(args.run_dir).languages() is not None:
            raise ValueError(f"{args.run_dir}: a model of several target languages; kt-score "
                             "scores models of one")
        sources, targets = read_lines(args.src), read_lines(args.tgt)
        if len(sources) != len(targets):
            raise ValueError(f"--src {args.src!r} has {len(sources):,} lines, --tgt "
                             f"{args.tgt!r} {len(targets):,}")
        model, tokenizer = load_run_model(args.run_dir, args.weights)
        max_length = model.config.max_length
        truncated = truncated_sources(tokenizer, sources, max_length)
        if truncated:
            print("kt-score: warning: " + truncation_warning(
                args.src, [index + 1 for index in truncated], max_length), file=sys.stderr)
        progress = CountProgress("kt-score", len(sources), doing="scoring")
        scored = score_pairs(model, tokenizer, sources, targets, args.batch_size,
                             progress.advance)
    except (ValueError, FileNotFoundError) as error:
        print(f"kt-score: error: {error}", file=sys.stderr)
        return 2
    lines = "".join(json.dumps(record.to_dict(), ensure_ascii=False) + "\n"
                    for record in scored)
    if args.output:
        with open(args.output, "w", encoding="utf-8") as handle:
            handle.write(lines)
    else:
        sys.stdout.write(lines)
    return 0


if __name__ == "__main__":
    sys.exit(main())
