"""kt-translate's documents: `--format text|html|markdown` (or an input's extension), and the
line-by-line options they cannot take (`LineFlags`)."""
from __future__ import annotations

import sys
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Optional

from keras_transformer.data.text_files import line_list, read_document
from keras_transformer.documents import document_translator
from keras_transformer.serving.text_translation import LineTranslator

EXTENSIONS = {".html": "html", ".htm": "html", ".xhtml": "html", ".md": "markdown",
              ".markdown": "markdown"}


@dataclass(frozen=True)
class LineFlags:
    """kt-translate's line-by-line options as given: `nbest` (`--nbest`: hypotheses a line, 0:
    the best only), the files of `prefix` (`--prefix`), `terms` (`--terms`' glossary),
    `constraints` (`--constraints`) and `scores` (`--scores`); None: not given."""

    nbest: int = 0
    prefix: Optional[list[str]] = None
    terms: Optional[str] = None
    constraints: Optional[list[str]] = None
    scores: Optional[list[str]] = None

    @property
    def terms_flag(self) -> str:
        """The flag that gives the lines' terms: `--terms` or `--constraints`."""
        return "--terms" if self.terms else "--constraints"


def input_format(asked: Optional[str], path: str) -> str:
    """The format an input is read in: the one asked for, else its extension's (a .gz's
    inner one), else lines."""
    if asked:
        return asked
    name = Path(path.removesuffix(".gz"))
    return EXTENSIONS.get(name.suffix.lower(), "lines")


def check_document_flags(flags: LineFlags, formats: list[str]) -> None:
    """ValueError naming the flag among `flags` that documents (inputs of `formats` other than
    lines) cannot take."""
    documents = sorted({name for name in formats if name != "lines"})
    for field in fields(flags):
        if documents and getattr(flags, field.name):
            raise ValueError(f"--{field.name}: only with --format lines (one sentence a line), "
                             f"not with {documents[0]} input")


def check_alignment(formats: list[str], translator: LineTranslator, model: str) -> None:
    """ValueError naming the markup format a model without word alignment cannot place."""
    markup = sorted({name for name in formats if name in ("html", "markdown")})
    if markup and not translator.takes_alignment:
        raise ValueError(f"--format {markup[0]}: {model} gives no word alignment to place the "
                         "markup by (an export written before exports gave alignments); "
                         "translate with the run directory, export it again, or use "
                         "--format text")


def translate_document(translator: LineTranslator, path: str, format: str, language: str,
                       batch_size: int, batch_tokens: int, on_batch=None) -> str:
    """The document at `path` translated in `format`, with warnings on stderr naming the
    lines that are not valid UTF-8 and the sentences translated in parts."""
    text, invalid = read_document(path)
    for number in invalid:
        print(f"kt-translate: warning: {path}:{number}: not valid UTF-8, translated with "
              "U+FFFD replacements", file=sys.stderr)
    documents = document_translator(translator, language, batch_size=batch_size,
                                    batch_tokens=batch_tokens, on_batch=on_batch)
    translated = documents.translate(text, format)
    if translated.splits:
        lines = sorted({split.line for split in translated.splits})
        print(f"kt-translate: warning: {path}: {len(translated.splits)} sentence(s) longer "
              f"than the model takes ({translator.max_length} pieces) translated in parts, "
              f"nothing cut: {line_list(lines)}", file=sys.stderr)
    return translated.text
