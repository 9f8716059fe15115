"""`kt-translate`: translates text files (or standard input) with an export (a SavedModel,
CTranslate2 or LiteRT folder) or a run directory, one output line per input line, in order; n-best
lists, prefixes, terminology, confidence scores and documents on request. Its manual:
docs/decoding-and-serving.md, "kt-translate".
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Optional, Sequence, TextIO

from keras_transformer.data.text_files import file_problem, line_list, read_raw_lines
from keras_transformer.decoding.alignment import read_alignment_heads
from keras_transformer.decoding.terminology import Glossary, read_constraints, sentence_terms
from keras_transformer.decoding.translator import IntoLanguage, TranslationModule
from keras_transformer.serving.litert_export import is_litert_model
from keras_transformer.serving.loading import export_version, load_export, recorded_languages
from keras_transformer.data.languages import chosen_languages
from keras_transformer.serving.text_translation import (LineTranslator, best_lines, is_blank,
                                                        length_batches, output_line, searched,
                                                        truncation_warning)
from keras_transformer.training.progress import CountProgress
from keras_transformer.training.run_dir import RunDir
from trainers.arguments import given_search_flags, translate_parser
from trainers.score import score_translations
from trainers.translate_documents import (LineFlags, check_alignment, check_document_flags,
                                          input_format, translate_document)
from trainers.common import (ModelFlags, check_export_flags, is_run_directory, load_ensemble,
                             load_run_model, run_target_language, search_settings)


def parse_args(argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
    """The command line's options, checked (`argv`: default `sys.argv[1:]`)."""
    parser = translate_parser()
    args = parser.parse_args(argv)
    for name in ("prefix", "constraints", "terms"):
        value = getattr(args, name)
        for path in [value] if isinstance(value, str) else value or []:
            problem = file_problem(path)
            if problem:
                parser.error(f"--{name}: {path!r} {problem}")
    for name in ("output", "prefix", "constraints", "scores"):
        files = getattr(args, name)
        if files and len(files) != len(args.inputs):
            parser.error(f"--{name}: {len(files)} file(s) for {len(args.inputs)} input(s)")
    if args.prefix and args.nbest:
        parser.error("--prefix: not with --nbest (prefixes give the best translation only)")
    for name in ("terms", "constraints"):
        if getattr(args, name) and (args.nbest or args.prefix):
            parser.error(f"--{name}: not with --nbest or --prefix (terms give the best "
                         "translation only)")
    if args.scores and (args.nbest or args.prefix):
        parser.error("--scores: not with --nbest or --prefix")
    for name in ("batch_size", "batch_tokens", "threads"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')}: must be positive")
    if args.nbest < 0:
        parser.error("--nbest: must be positive")
    return args


def checked_target_language(model: str, target_language: Optional[str],
                            source_language: Optional[str]) -> Optional[str]:
    """`target_language` (`--target-language`; `source_language` the `--source-language`),
    checked against the languages of `model` (a run directory or an export) before it loads
    (`chosen_languages`' error)."""
    if is_run_directory(model):
        return run_target_language(model, target_language, source_language)[1]
    version = export_version(model)
    languages = recorded_languages(version)
    return chosen_languages(languages, target_language, source_language,
                            repr(str(version))).target


def load_translator(flags: ModelFlags) -> LineTranslator:
    """The model of `flags`: an export as saved, or a run directory's model with its recipe's
    search settings (the search flags override them), into `--target-language` (a model of
    several)."""
    if is_run_directory(flags.model):
        languages, language, source = run_target_language(flags.model, flags.target_language,
                                                          flags.source_language)
        model, tokenizer = load_run_model(flags.model, flags.weights)
        settings = search_settings(flags.search, RunDir(flags.model).load_recipe().search)
        translator = TranslationModule(model, tokenizer, settings, languages=languages,
                                ensemble=load_ensemble(flags.ensemble, tokenizer),
                                alignment=read_alignment_heads(flags.model, model.config))
        return LineTranslator.from_translator(
            translator if language is None else IntoLanguage(translator, language, source))
    export_version(flags.model)  # a path that is no export is named before any flag's rule
    check_export_flags(flags)
    return load_export(flags.model, flags.target_language, threads=flags.threads,
                       source_language=flags.source_language)


def nbest_lines(translator: LineTranslator, lines: list[bytes], count: int, batch_size: int,
                batch_tokens: int, progress: CountProgress) -> list[str]:
    """The `--nbest` output of `lines` (raw input lines) by `translator`, in their order: for
    each line its `count` lines `INDEX ||| TRANSLATION ||| SCORE` (joined by newlines), best
    first, translated in batches of `batch_size` lines and `batch_tokens` words
    (`--batch-size`, `--batch-tokens`); `progress` is advanced by each batch's size."""
    outputs: list[str] = [""] * len(lines)
    lengths = [len(line.split()) for line in lines]
    for batch in length_batches(lengths, batch_size, batch_tokens):
        texts = [lines[index] for index in batch]
        for index, hypotheses in zip(batch, translator.nbest(texts, count)):
            outputs[index] = "\n".join(f"{index} ||| {output_line(text)} ||| {score:.4f}"
                                       for text, score in hypotheses)
        progress.advance(len(batch))
    return outputs


def check_translator(translator: LineTranslator, model: str, flags: LineFlags,
                     terms: list[Optional[list[str]]]) -> None:
    """Checks that `translator`, the loaded `model` (`load_translator`), serves the line flags
    given (`flags`), `terms` being each input's terms (`read_terms`); a ValueError names the
    flag the model cannot serve: `--terms` or `--constraints`, `--scores`, `--nbest` beyond the
    beam, `--prefix`."""
    if terms[0] is not None and not translator.takes_terms:
        raise ValueError(f"{flags.terms_flag}: {model} has no constrained search "
                         "(CTranslate2 and LiteRT exports have none, nor SavedModels exported "
                         "before it); translate with the run directory or a SavedModel "
                         "exported by this version")
    if flags.scores and terms[0] is not None and translator.model is None:
        raise ValueError(f"--scores with {flags.terms_flag}: {model} is an export; the "
                         "confidence of a constrained translation is its score by the run's "
                         "model (as kt-score scores a translation): translate with the run "
                         "directory")
    if flags.scores and not translator.takes_scores:
        raise ValueError(f"--scores: {model} gives no word scores (CTranslate2 and "
                         "LiteRT exports do not, nor SavedModels exported before it); use "
                         "the run directory or a SavedModel exported by this version")
    if flags.nbest > 1 and flags.nbest > translator.beam_size:  # every search keeps one
        raise ValueError(f"--nbest: {flags.nbest} exceeds the beam size "
                         f"{translator.beam_size}")
    if flags.prefix and not translator.takes_prefixes:
        if is_litert_model(export_version(model)):
            raise ValueError(f"--prefix: {model} is a LiteRT export: LiteRT exports force "
                             "no prefixes; translate with the run directory, a SavedModel or "
                             "a CTranslate2 export")
        raise ValueError(f"--prefix: {model} has no translate_with_prefix signature "
                         "(exported by an older version); export it again")


def score_constrained(path: str, translator: LineTranslator, lines: list[bytes],
                      outputs: list[str], records: list[dict], batch_size: int) -> None:
    """Adds to each line's record (its search's `score`) how sure the model is of its
    constrained translation, `sentence` and `words`: the translation scored as kt-score scores
    a pair (`trainers.score.score_translations`, teacher-forced by `translator.model`, a run's),
    as the constrained search gives no confidence of its own. A line of whitespace is scored
    as the empty line it was translated as; a translation whose text reads back as more
    subwords than the model's positions is left unscored (`sentence` null, a warning naming
    the lines of `path`)."""
    sources = [line.decode("utf-8", "replace") for line in searched(lines)]
    targets = ["" if is_blank(line) else output for line, output in zip(lines, outputs)]
    scored = score_translations(translator.model, translator.tokenizer, sources, targets,
                                batch_size, languages=translator.languages,
                                language=translator.language,
                                source_language=translator.source_language, skip_long=True)
    unscored = [index + 1 for index, confidence in enumerate(scored) if confidence is None]
    if unscored:
        print(f"kt-translate: warning: --scores: {path}: {line_list(unscored)}: the constrained "
              "translation reads back as more subwords than the model's positions; not scored "
              '("sentence": null)', file=sys.stderr)
    for record, confidence in zip(records, scored):
        record.update(sentence=None if confidence is None else confidence.sentence,
                      words=[] if confidence is None else [list(word)
                                                          for word in confidence.words])


def write_json_lines(path: str, records: list[dict]) -> None:
    """`records` as one JSON object a line in `path` (its folders made)."""
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_text("".join(json.dumps(record, ensure_ascii=False) + "\n"
                                  for record in records), encoding="utf-8")


def read_terms(glossary_path: Optional[str], constraint_paths: Optional[list[str]],
               inputs: list[tuple[list[bytes], list[int]]]) -> list[Optional[list[str]]]:
    """Each of `inputs`' `translate_with_terms` terms, one per line, from the glossary at
    `glossary_path` (`--terms`) and each input's file of `constraint_paths` (`--constraints`)
    (None without either); ValueError naming the file of a malformed glossary line or of
    constraints whose line count differs from its input's."""
    if not glossary_path and not constraint_paths:
        return [None] * len(inputs)
    glossary = Glossary.read(glossary_path) if glossary_path else None
    if glossary is not None and not glossary.entries:
        print(f"kt-translate: warning: --terms: {glossary_path} has no entries (lines 'source "
              "phrase ||| target phrase'): no line is constrained by it", file=sys.stderr)
    terms = []
    for position, (lines, _) in enumerate(inputs):
        constraints = (read_constraints(constraint_paths[position], len(lines))
                       if constraint_paths else None)
        texts = [line.decode("utf-8", "replace") for line in lines]
        terms.append(sentence_terms(texts, glossary, constraints))
    return terms


def read_prefixes(prefix_paths: Optional[list[str]], input_paths: list[str],
                  inputs: list[tuple[list[bytes], list[int]]]) -> list[Optional[list[bytes]]]:
    """Each of `inputs`' (read from `input_paths`) prefix lines, from its file of
    `prefix_paths` (`--prefix`; None without it); ValueError naming both files when a prefix
    file's line count differs from its input's."""
    if not prefix_paths:
        return [None] * len(inputs)
    prefixes = []
    for input_path, path, (lines, _) in zip(input_paths, prefix_paths, inputs):
        prefix_lines, _ = read_raw_lines(path)
        if len(prefix_lines) != len(lines):
            raise ValueError(f"--prefix: {path} has {len(prefix_lines)} lines but {input_path} "
                             f"has {len(lines)}")
        prefixes.append(prefix_lines)
    return prefixes


def main(argv: Optional[Sequence[str]] = None, stdout: Optional[TextIO] = None) -> int:
    """Runs the command line; returns its exit status (2 on a user error)."""
    args = parse_args(argv)
    model = ModelFlags(args.model, args.weights, args.ensemble, given_search_flags(vars(args)),
                       args.target_language, args.source_language, args.threads)
    line_flags = LineFlags(args.nbest, args.prefix, args.terms, args.constraints, args.scores)
    try:
        inputs = [read_raw_lines(path) for path in args.inputs]
        prefixes = read_prefixes(args.prefix, args.inputs, inputs)
        terms = read_terms(args.terms, args.constraints, inputs)
        formats = [input_format(args.format, path) for path in args.inputs]
        check_document_flags(line_flags, formats)
        translator = load_translator(model)
        check_translator(translator, args.model, line_flags, terms)
        check_alignment(formats, translator, args.model)
    except (ValueError, FileNotFoundError, OSError) as error:
        print(f"kt-translate: error: {error}", file=sys.stderr)
        return 2
    output_paths = args.output or [None] * len(args.inputs)
    progress = CountProgress("kt-translate", sum(len(lines) for lines, _ in inputs),
                             every_seconds=5.0, quiet=args.quiet)
    for position, (path, (lines, invalid)) in enumerate(zip(args.inputs, inputs)):
        if formats[position] != "lines":
            write_output(output_paths[position], translate_document(
                translator, path, formats[position], segmenter_language(args.source_language),
                args.batch_size, args.batch_tokens), stdout)
            continue
        for number in invalid:
            print(f"kt-translate: warning: {path}:{number}: not valid UTF-8, translated with "
                  "U+FFFD replacements", file=sys.stderr)
        truncated = translator.truncated(lines)
        if truncated:
            print("kt-translate: warning: " + truncation_warning(
                path, [index + 1 for index in truncated], translator.max_length),
                file=sys.stderr)
        def missing(index: int, phrases: list[str]) -> None:
            print(f"kt-translate: warning: {path}:{index + 1}: not placed before the length "
                  f"limit: {', '.join(map(repr, phrases))}", file=sys.stderr)
        records: list[dict] = [{} for _ in lines]

        def scored(index: int, record: dict) -> None:
            records[index] = record
        outputs = nbest_lines(translator, lines, args.nbest, args.batch_size, args.batch_tokens,
                              progress) if args.nbest else best_lines(
            translator, lines, batch_size=args.batch_size, batch_tokens=args.batch_tokens,
            prefixes=prefixes[position], on_batch=progress.advance, terms=terms[position],
            on_missing=missing, on_scores=scored if args.scores else None)
        text = "".join(line + "\n" for line in outputs)
        if args.scores:
            if terms[position] is not None:
                score_constrained(path, translator, lines, outputs, records, args.batch_size)
            write_json_lines(args.scores[position], records)
        write_output(output_paths[position], text, stdout)
    return 0


def write_output(path: Optional[str], text: str, stdout: Optional[TextIO]) -> None:
    """An input's translation `text` written to its `--output` file `path` (its folders made)
    or, without one, to `stdout` (default: standard output)."""
    if path:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        Path(path).write_text(text, encoding="utf-8")
    else:
        (stdout or sys.stdout).write(text)


def segmenter_language(source_language: Optional[str]) -> str:
    """The language the sentence segmenter splits by: `source_language`'s (`--source-language`;
    its code before any script, e.g. eng of eng_Latn), else English."""
    return (source_language or "en").split("_")[0]


if __name__ == "__main__":
    sys.exit(main())
