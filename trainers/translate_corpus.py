"""`kt-translate-corpus`: translates a whole training corpus with a teacher (a run, an ensemble of
runs, or an export), resumably and in shards: the data job of distillation. Its manual:
docs/training.md, "Teacher to student".
"""
from __future__ import annotations

import argparse
import dataclasses
import hashlib
import sys
from pathlib import Path
from typing import Any, Optional, Sequence

from keras_transformer.distillation.corpus_translation import (CorpusTranslation, Progress, Shard,
                                                               file_sha256)
from keras_transformer.evaluation import sentence_bleu
from keras_transformer.serving.loading import export_version
from keras_transformer.serving.text_translation import (best_lines, closest_lines,
                                                        truncation_warning)
from keras_transformer.training.progress import duration
from keras_transformer.training.run_dir import RunDir
from trainers.arguments import given_search_flags, translate_corpus_parser
from trainers.common import ModelFlags, search_settings
from trainers.translate import checked_target_language, load_translator


def parse_args(argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
    """The command line's options, checked (`argv`: default `sys.argv[1:]`)."""
    parser = translate_corpus_parser()
    args = parser.parse_args(argv)
    try:
        args.shard = Shard.parse(args.shard)
    except ValueError as error:
        parser.error(f"--{error}")
    for name in ("chunk_lines", "batch_size", "batch_tokens", "threads"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')}: must be positive")
    return args


def tree_sha256(directory: Path) -> str:
    """The SHA-256 of every file under `directory`: relative paths and contents, in order."""
    digest = hashlib.sha256()
    for path in sorted(item for item in directory.rglob("*") if item.is_file()):
        digest.update(path.relative_to(directory).as_posix().encode() + b"\0")
        digest.update(file_sha256(path).encode())
    return digest.hexdigest()


def teacher_identity(teacher: ModelFlags) -> dict[str, Any]:
    """What the output of `teacher` depends on: each run's weights, vocabulary and
    architecture and the search settings, or the export's files (their digests: paths may
    move); and the target and source languages, when given."""
    language = {name: getattr(teacher, name) for name in ("target_language", "source_language")
                if getattr(teacher, name)}
    if not (Path(teacher.model) / "config.json").is_file():
        return {"export": tree_sha256(export_version(teacher.model)), **language}
    runs = []
    for index, path in enumerate([teacher.model, *teacher.ensemble]):
        run = RunDir(path)
        weights = (Path(teacher.weights) if teacher.weights and index == 0
                   else run.default_weights())
        runs.append({"weights_sha256": file_sha256(weights),
                     "vocab_sha256": tree_sha256(run.vocab),
                     "architecture": run.load_recipe().architecture.to_dict()})
    settings = search_settings(teacher.search, RunDir(teacher.model).load_recipe().search)
    return {"runs": runs, "search": dataclasses.asdict(settings), **language}


class ProgressLines:
    """`kt-translate-corpus: shard I/N: D/T lines, R lines/s, ETA ...` every few seconds."""

    def __init__(self, shard: Shard, every_seconds: float, quiet: bool):
        self.shard, self.every_seconds, self.quiet = shard, every_seconds, quiet
        self._last = float("-inf")

    def __call__(self, progress: Progress) -> None:
        if self.quiet or (progress.lines_left and
                          progress.seconds - self._last < self.every_seconds):
            return
        self._last = progress.seconds
        left = progress.seconds_left
        eta = "" if left is None else f", ETA {duration(left)}"
        print(f"kt-translate-corpus: shard {self.shard.index}/{self.shard.count}: "
              f"{progress.lines_done:,}/{progress.lines_done + progress.lines_left:,} lines, "
              f"{progress.lines_per_second:,.1f} lines/s{eta}", file=sys.stderr, flush=True)


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Runs the command line; returns its exit status (2 on a user error)."""
    args = parse_args(argv)
    teacher = ModelFlags(args.model, args.weights, args.ensemble, given_search_flags(vars(args)),
                         args.target_language, args.source_language, args.threads)
    try:
        # before the job's manifest is written
        checked_target_language(args.model, args.target_language, args.source_language)
        job = CorpusTranslation(args.input, args.output, teacher_identity(teacher),
                                chunk_lines=args.chunk_lines,
                                reference_path=args.closest_to_reference)
        has_work = any(args.shard.owns(chunk) for chunk in job.missing_chunks())
        translator = load_translator(teacher) if has_work else None
        if translator is not None and args.closest_to_reference and translator.beam_size < 2:
            raise ValueError("--closest-to-reference: needs a beam search of 2 or more "
                             f"hypotheses to choose from; this teacher keeps "
                             f"{translator.beam_size}")
    except (ValueError, FileNotFoundError, OSError) as error:
        print(f"kt-translate-corpus: error: {error}", file=sys.stderr)
        return 2

    def translate(lines: list[bytes], references: Optional[list[bytes]] = None) -> list[str]:
        if references is None:
            return best_lines(translator, lines, batch_size=args.batch_size,
                              batch_tokens=args.batch_tokens)
        return closest_lines(translator, lines, references, sentence_bleu,
                             batch_size=args.batch_size, batch_tokens=args.batch_tokens)

    report = job.run(translate, args.shard,
                     ProgressLines(args.shard, args.progress_seconds, args.quiet),
                     None if translator is None else translator.truncated)
    for number in report.invalid_lines:
        print(f"kt-translate-corpus: warning: {args.input}:{number}: not valid UTF-8, "
              "translated with U+FFFD replacements", file=sys.stderr)
    if report.truncated_lines:
        print("kt-translate-corpus: warning: " + truncation_warning(
            args.input, report.truncated_lines, translator.max_length), file=sys.stderr)
    rate = report.lines_translated / max(report.seconds, 1e-9)
    state = (f"complete: {args.output}" if report.complete else
             f"{len(job.missing_chunks())} chunk(s) left to other shards or a restart")
    print(f"kt-translate-corpus: {report.lines_translated:,} lines in {report.chunks_translated} "
          f"chunk(s) translated in {duration(report.seconds)} ({rate:,.1f} lines/s), "
          f"{report.chunks_found} chunk(s) written before; {state}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
