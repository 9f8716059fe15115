"""`kt-score`: how sure a run's model is of given translations: each pair's teacher-forced
log-probability per token, per word and per sentence (Bergamot's quality estimation), one JSON
object a line. Its manual: docs/decoding-and-serving.md, "Confidence: kt-score and --scores".
"""
from __future__ import annotations

import argparse
import json
import sys

import tensorflow as tf
from typing import Callable, Optional, Sequence

from keras_transformer.data import read_lines
from keras_transformer.data.languages import LanguageTokenizer, RunLanguages
from keras_transformer.data.tokenizer import SubwordTokenizer, text_piece_ids
from keras_transformer.decoding.confidence import Confidence, confidence, score_pairs
from keras_transformer.decoding.translator import truncated_sources
from keras_transformer.model import Transformer
from keras_transformer.serving.text_translation import truncation_warning
from keras_transformer.training.progress import CountProgress
from trainers.arguments import score_parser
from trainers.common import load_run_model, run_target_language


def parse_args(argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
    """The command line's options, checked (`argv`: default `sys.argv[1:]`)."""
    parser = score_parser()
    args = parser.parse_args(argv)
    if args.batch_size < 1:
        parser.error(f"--batch-size: must be at least 1, got {args.batch_size}")
    return args


def score_translations(model: Transformer, tokenizer: SubwordTokenizer, sources: Sequence[str],
                       targets: Sequence[str], batch_size: int = 32,
                       on_batch: Optional[Callable[[int], None]] = None,
                       languages: Optional[RunLanguages] = None, language: Optional[str] = None,
                       source_language: Optional[str] = None, skip_long: bool = False
                       ) -> list[Optional[Confidence]]:
    """`score_pairs` of `sources` and their `targets`, of a model of several target
    `languages` (None: one) into `language` from `source_language` (`run_target_language`'s
    codes): the tokens `kt-translate` would put into the source and the translation are put
    there, and a token forced first in the translation is left out of each `Confidence`. A
    target of more subwords than the model's positions is refused by `score_pairs` (naming
    its line), or with `skip_long` left unscored (None)."""
    prefixes: tuple[list[int], list[int]] = ([], [])
    target_id = None if languages is None or not language else languages.token_id(language)
    if target_id is not None:
        source_ids = ([languages.source_token_id(source_language)]
                      if source_language else [])
        prefixes = (([target_id], []) if languages.placement == "source"
                    else (source_ids, [target_id]))
    scoring = LanguageTokenizer(tokenizer, prefixes) if any(prefixes) else tokenizer
    kept = range(len(targets))
    if skip_long:
        lengths = text_piece_ids(scoring, tf.constant(list(targets), tf.string),
                                 target=True).row_lengths().numpy().tolist()
        kept = [index for index, length in enumerate(lengths)
                if length <= model.config.max_length - 1]
    scored = score_pairs(model, scoring, [sources[index] for index in kept],
                         [targets[index] for index in kept], batch_size, on_batch)
    forced = len(prefixes[1])
    records: list[Optional[Confidence]] = [None] * len(targets)
    for index, record in zip(kept, scored):
        records[index] = confidence([piece for piece, _ in record.tokens[forced:-1]],
                                    [value for _, value in record.tokens[forced:]]
                                    ) if forced else record
    return records


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Runs the command line; returns its exit status (2 on a user error)."""
    args = parse_args(argv)
    try:
        languages, language, source = run_target_language(args.run_dir, args.target_language,
                                                          args.source_language)
        sources, targets = read_lines(args.src), read_lines(args.tgt)
        if len(sources) != len(targets):
            raise ValueError(f"--src {args.src!r} has {len(sources):,} lines, --tgt "
                             f"{args.tgt!r} {len(targets):,}")
        model, tokenizer = load_run_model(args.run_dir, args.weights)
        max_length = model.config.max_length
        truncated = truncated_sources(tokenizer, sources, max_length, languages=languages,
                                      language=language, source_language=source)
        if truncated:
            print("kt-score: warning: " + truncation_warning(
                args.src, [index + 1 for index in truncated], max_length, "scored"),
                file=sys.stderr)
        progress = CountProgress("kt-score", len(sources), doing="scoring")
        scored = score_translations(model, tokenizer, sources, targets, args.batch_size,
                                    progress.advance, languages, language, source)
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
