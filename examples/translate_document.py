r"""A document (plain text, HTML or Markdown) translated by a keras-transformer export that TF
Serving serves, over its REST API: the document layer (`keras_transformer.documents`) here, the
sentences there, through the SavedModel's `translate_with_alignment` signature (the word
alignment places the markup).

    python examples/translate_document.py page.html --server localhost:8501 --model demo \
        --export saved_models/demo/1 > page.de.html

FORMAT is `--format`, else the file's extension (.html/.htm: html, .md/.markdown: markdown),
else text. `--export` is the served export's folder, read for its tokenizer and length limit so
that sentences longer than the model takes are split and translated in parts, as kt-translate
splits them (without it nothing is split). `--language`: the language the sentences are found
by (default: en). `--batch-size`: sentences a request at most (of like lengths, as kt-translate
batches them).
"""
from __future__ import annotations

import argparse
import json
import sys
import urllib.request
from pathlib import Path
from typing import Optional, Sequence

from keras_transformer.documents import DocumentTranslator, segmenter
from keras_transformer.documents.inline import Aligned
from keras_transformer.documents import translators
from keras_transformer.decoding.alignment import word_alignment
from keras_transformer.serving.text_translation import length_batches

EXTENSIONS = {".html": "html", ".htm": "html", ".md": "markdown", ".markdown": "markdown"}


def rest_translator(server: str, model: str, batch_size: int = 64, batch_tokens: int = 6000):
    """Sentences -> translations (with word alignments when asked) through TF Serving's REST
    API, in requests of sentences of like lengths (`length_batches`, as kt-translate's)."""
    url = f"http://{server}/v1/models/{model}:predict"

    def translate(texts: Sequence[str], aligned: bool) -> list[Aligned]:
        found: list[Aligned] = [Aligned("")] * len(texts)
        for indices in length_batches([len(text.split()) for text in texts], batch_size,
                                      batch_tokens):
            batch = [texts[index] for index in indices]
            body = {"signature_name": "translate_with_alignment" if aligned else
                    "serving_default", "inputs": {"text": batch}}
            request = urllib.request.Request(url, json.dumps(body).encode("utf-8"),
                                             {"Content-Type": "application/json"})
            with urllib.request.urlopen(request, timeout=60) as answer:
                outputs = json.load(answer)["outputs"]
            for row, (index, translation) in enumerate(zip(indices, outputs["translation"])):
                if not aligned:
                    found[index] = Aligned(translation)
                    continue
                target = [piece for piece in outputs["target_pieces"][row] if piece]
                source = [piece for piece in outputs["source_pieces"][row] if piece]
                found[index] = Aligned(translation, word_alignment(
                    target, source, outputs["alignment"][row], len(translation.split()),
                    len(texts[index].split())))
        return found
    return translate


def length_check(export: Optional[str]):
    """Whether each sentence is longer than the served model takes, by the export's own
    tokenizer and length limit (None without `export`: nothing is split)."""
    if export is None:
        return None
    from keras_transformer.serving.loading import load_export

    return translators.length_check(load_export(export))


def main(argv: Optional[list[str]] = None) -> int:
    """Runs the command line; returns its exit status."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("document")
    parser.add_argument("--server", default="localhost:8501")
    parser.add_argument("--model", default="demo", help="the served model's name")
    parser.add_argument("--format", choices=["text", "html", "markdown"])
    parser.add_argument("--export", help="the served export's folder (for long sentences)")
    parser.add_argument("--language", default="en")
    parser.add_argument("--batch-size", type=int, default=64)
    args = parser.parse_args(argv)
    path = Path(args.document)
    format = args.format or EXTENSIONS.get(path.suffix.lower(), "text")
    documents = DocumentTranslator(rest_translator(args.server, args.model, args.batch_size),
                                   segmenter(args.language), length_check(args.export))
    translated = documents.translate(path.read_text(encoding="utf-8-sig"), format)
    for split in translated.splits:
        print(f"{path}:{split.line}: a sentence longer than the model takes, translated in "
              f"{split.parts} parts", file=sys.stderr)
    sys.stdout.write(translated.text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
