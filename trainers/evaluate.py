"""`kt-evaluate`: translates a test set with a trained run, an ensemble or an export and scores it
(sacreBLEU and chrF, the tokenized BLEU of published Multi30k results, or a parser's labelled
bracket F1), writing the hypotheses. Its manual: docs/training.md, "Evaluate and average
checkpoints".
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Optional, Sequence

from trainers.arguments import evaluate_parser, given_search_flags
from trainers.common import (ModelFlags, check_export_flags, is_run_directory, load_ensemble,
                             load_run_model, run_target_language, search_settings)
from keras_transformer.data import load_tfds, read_lines, read_parallel
from keras_transformer.decoding.translator import IntoLanguage, TranslationModule, truncated_sources
from keras_transformer.evaluation import (corpus_scores, tokenized_lowercase_bleu,
                                          translate_corpus, write_lines)
from keras_transformer.parsing.evaluate import parse_scores, read_gold_trees
from keras_transformer.serving.loading import export_version, load_export
from keras_transformer.serving.text_translation import best_lines, truncation_warning
from keras_transformer.training.progress import CountProgress
from keras_transformer.training.run_dir import RunDir


def parse_args(argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
    """The command line's options, checked (`argv`: default `sys.argv[1:]`)."""
    parser = evaluate_parser()
    args = parser.parse_args(argv)
    if args.task == "parsing":
        if not args.trees:
            parser.error("--task parsing: --trees (the gold trees of --src) is required")
        if not args.src or args.ref or args.tfds or args.tokenized_ref:
            parser.error("--task parsing: give --src and --trees (not --ref, --tfds or "
                         "--tokenized-ref)")
        args.ref = None
    elif args.trees or args.output_trees:
        parser.error("--trees/--output-trees: only with --task parsing")
    if args.tfds and (args.src or args.ref):
        parser.error("--tfds: cannot be combined with --src/--ref")
    if args.task == "translation" and not args.tfds and not (args.src and args.ref):
        parser.error("--src and --ref (or --tfds): the test set to translate is required")
    for name in ("batch_size", "threads"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')}: must be at least 1, got "
                         f"{getattr(args, name)}")
    for name in ("src", "ref", "trees", "tokenized_ref", "weights"):
        path = getattr(args, name)
        if path and not os.path.isfile(path):
            parser.error(f"--{name.replace('_', '-')}: no such file {path!r}")
    for name, run_dir in [("run_dir", args.run_dir)] + [("--ensemble", d) for d in args.ensemble]:
        if not os.path.isdir(run_dir):
            parser.error(f"{name}: no such directory {run_dir!r}")
    return args


@dataclass(frozen=True)
class TestSetFlags:
    """kt-evaluate's test set as given: the `task` ("translation" or "parsing"), local files
    `src` and `ref` (`--src`, `--ref`; parsing: `trees`, the gold trees of `src`), or the
    tensorflow-datasets builder `tfds`'s `split` (its `source_lang`/`target_lang` features, in
    `tfds_data_dir`)."""

    task: str
    src: Optional[str]
    ref: Optional[str]
    trees: Optional[str]
    tfds: Optional[str]
    split: str
    source_lang: str
    target_lang: str
    tfds_data_dir: Optional[str]

    @property
    def where(self) -> str:
        """The test set as warnings name it: `src`, else the tfds builder and split."""
        return self.src or f"{self.tfds} {self.split}"


def test_set(flags: TestSetFlags) -> tuple[list[str], list[str], str]:
    """(sources, references, name) of the test set `flags` give: from local files or a tfds
    split; for parsing the references are the gold trees."""
    if flags.task == "parsing":
        sources = read_lines(flags.src)
        return sources, read_gold_trees(flags.trees, sources, flags.src), output_name(flags.src)
    if flags.tfds:
        sources, references = load_tfds(flags.tfds, flags.split, flags.source_lang,
                                        flags.target_lang, data_dir=flags.tfds_data_dir)
        return sources, references, f"{flags.tfds.replace('/', '_')}.{flags.split}"
    sources, references = read_lines(flags.src), read_lines(flags.ref)
    if len(sources) != len(references):
        read_parallel(flags.src, flags.ref)  # raises, naming both files and counts
    return sources, references, output_name(flags.src)


def output_name(path: str) -> str:
    """The file name of `path` without a `.gz` suffix."""
    return Path(path).name.removesuffix(".gz")


def trees_path(output_trees: Optional[str], gold_trees: str, hypotheses_path: str) -> str:
    """`output_trees` (`--output-trees`), else `hypotheses_path` with .parsed.tree; never the
    gold file `gold_trees` (`--trees`)."""
    if output_trees:
        path = output_trees
    else:
        hypotheses = Path(hypotheses_path)
        path = os.fspath(hypotheses.with_name(hypotheses.name.removesuffix(".hyp")
                                              + ".parsed.tree"))
    if os.path.abspath(path) == os.path.abspath(gold_trees):
        raise ValueError(f"--output-trees: {path!r} would overwrite the gold --trees file")
    return path


def warn_truncated(where: str, truncated: Sequence[int], max_length: int) -> None:
    """Names the lines of the test set `where` (`TestSetFlags.where`; indices `truncated`)
    translated from their first `max_length - 1` subwords only."""
    if truncated:
        print("kt-evaluate: warning: " + truncation_warning(
            where, [index + 1 for index in truncated], max_length), file=sys.stderr)


def run_hypotheses(flags: ModelFlags, sources: list[str], name: str, where: str,
                   hypotheses_path: Optional[str], batch_size: int) -> tuple[list[str], str]:
    """The translations of `sources` (the test set `name`, `where`) by the run directory's
    model (`flags`), in batches of `batch_size`, and the path they go to: `hypotheses_path`
    (`--hypotheses`), by default in the run directory, per target language."""
    languages, language, source = run_target_language(flags.model, flags.target_language,
                                                      flags.source_language)
    model, tokenizer = load_run_model(flags.model, flags.weights)
    output = hypotheses_path or os.path.join(
        flags.model, f"{name}.hyp" if language is None else f"{name}.{language}.hyp")
    translator = TranslationModule(
        model, tokenizer, search_settings(flags.search, RunDir(flags.model).load_recipe().search),
        ensemble=load_ensemble(flags.ensemble, tokenizer), languages=languages)
    max_length = model.config.max_length
    warn_truncated(where, truncated_sources(tokenizer, sources, max_length, languages=languages,
                                            language=language, source_language=source),
                   max_length)
    hypotheses = translate_corpus(translator if language is None
                                  else IntoLanguage(translator, language, source), sources,
                                  batch_size,
                                  CountProgress("kt-evaluate", len(sources),
                                                doing="translating").advance)
    return hypotheses, output


def export_hypotheses(flags: ModelFlags, sources: list[str], name: str, where: str,
                      hypotheses_path: Optional[str], batch_size: int) -> tuple[list[str], str]:
    """The translations of `sources` (the test set `name`, `where`) by the export (`flags`;
    kt-translate's output lines), in batches of `batch_size`, and `hypotheses_path`
    (`--hypotheses`), which an export needs (nothing is written into its folder)."""
    export_version(flags.model)  # FileNotFoundError naming a folder that is neither kind
    if not hypotheses_path:
        raise ValueError(f"--hypotheses: required with an export ({flags.model!r} is one; "
                         f"kt-evaluate writes nothing into it), e.g. --hypotheses {name}.hyp")
    check_export_flags(flags)
    translator = load_export(flags.model, flags.target_language, threads=flags.threads,
                             source_language=flags.source_language)
    lines = [source.encode("utf-8") for source in sources]
    if translator.max_length is not None:
        warn_truncated(where, translator.truncated(lines), translator.max_length)
    progress = CountProgress("kt-evaluate", len(sources), doing="translating")
    return (best_lines(translator, lines, batch_size=batch_size, on_batch=progress.advance),
            hypotheses_path)


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Runs the command line; returns its exit status (2 on a user error)."""
    args = parse_args(argv)
    test = TestSetFlags(args.task, args.src, args.ref, args.trees, args.tfds, args.split,
                        args.source_lang, args.target_lang, args.tfds_data_dir)
    model = ModelFlags(args.run_dir, args.weights, args.ensemble, given_search_flags(vars(args)),
                       args.target_language, args.source_language, args.threads)
    try:
        sources, references, name = test_set(test)
        translate = (run_hypotheses if is_run_directory(args.run_dir)
                     else export_hypotheses)
        hypotheses, output = translate(model, sources, name, test.where, args.hypotheses,
                                       args.batch_size)
        outputs = {"hypotheses": output}
        if args.task == "parsing":
            outputs["trees"] = trees_path(args.output_trees, args.trees, output)
            trees, scores = parse_scores(hypotheses, references)
        else:
            scores = corpus_scores(hypotheses, references)
        if args.tokenized_ref:
            scores.append(tokenized_lowercase_bleu(hypotheses, read_lines(args.tokenized_ref)))
    except (ValueError, FileNotFoundError) as error:
        print(f"kt-evaluate: error: {error}", file=sys.stderr)
        return 2
    write_lines(output, hypotheses)
    if args.task == "parsing":
        write_lines(outputs["trees"], [str(tree) for tree in trees])
    for score in scores:
        print(score)
    print(json.dumps({**outputs, "sentences": len(sources),
                      **{score.name: round(score.value, 2) for score in scores},
                      "signatures": {score.name: score.signature for score in scores}}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
