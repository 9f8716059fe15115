"""The text form published Multi30k figures train and score on: lowercased,
punctuation-normalized and Moses-tokenized, as the task's `*.lc.norm.tok.*` files are
(`lowercase.perl`, `normalize-punctuation.perl`, `tokenizer.perl`; here through sacremoses, a
maintained port, `pip install -e ".[benchmark-text]"`). It reproduces test_2016_flickr's
tokenized references line for line from the raw ones, once the references' HTML escapes
(`&quot;`, `&apos;`) are read back: this form writes those characters as they are.

A model trained on this form translates text in this form and outputs it (lowercased and
tokenized): right for comparing with published BLEU, not for users, who send cased raw text.
"""
from __future__ import annotations

import os
import tempfile
from collections.abc import Callable

from keras_transformer.data.text_files import iter_parallel, require_files


def moses_formatter(lang: str) -> Callable[[str], str]:
    """A function putting a text of language `lang` in the Moses form: lowercased, its
    punctuation normalized, Moses-tokenized (`&`, `<`, `'`... kept, not escaped)."""
    try:
        from sacremoses import MosesPunctNormalizer, MosesTokenizer
    except ImportError:
        raise ImportError('the Moses text form needs sacremoses: pip install -e '
                          '".[benchmark-text]"') from None
    normalizer, tokenizer = MosesPunctNormalizer(lang), MosesTokenizer(lang)
    return lambda text: tokenizer.tokenize(normalizer.normalize(text.lower()), escape=False,
                                           return_str=True)


def write_moses_form(source: str | os.PathLike, target: str | os.PathLike,
                     languages: tuple[str, str], output_prefix: str) -> tuple[str, str]:
    """Writes a line-aligned pair of files (plain or .gz) in the Moses form, streamed, as
    `<output_prefix>.<language>` each (their directory created if needed); returns the two
    paths. Empty lines stay empty. Both are written whole or not at all: a missing input, a
    bad line or a line count that differs leaves no output (and earlier ones as they were)."""
    paths = (f"{output_prefix}.{languages[0]}", f"{output_prefix}.{languages[1]}")
    formats = [moses_formatter(lang) for lang in languages]
    require_files(source, target)
    directory = os.path.dirname(output_prefix) or "."
    os.makedirs(directory, exist_ok=True)
    temporaries = [tempfile.NamedTemporaryFile("w", encoding="utf-8", dir=directory,
                                               prefix=f".{os.path.basename(path)}.",
                                               delete=False) for path in paths]
    try:
        with temporaries[0] as sources, temporaries[1] as targets:
            for pair in iter_parallel(source, target):
                for text, form, out in zip(pair, formats, (sources, targets)):
                    out.write(form(text) + "\n")
        for temporary, path in zip(temporaries, paths):
            os.replace(temporary.name, path)
    except BaseException:
        for temporary in temporaries:
            if os.path.exists(temporary.name):
                os.remove(temporary.name)
        raise
    return paths
