"""Documents against lines: newstest paragraphs of 2-8 sentences (the sentence-splitting
benchmark's, `sentence_splitting.paragraphs_of`) translated as documents (`--format text`)
equal, sentence for sentence, the same sentences translated one a line, wherever the segmenter
found their boundaries; and the time of each on the same translator.

    python benchmarks/documents.py MODEL [DATA] [--limit N] [--seed 1]

MODEL is a run directory or an export (`kt-translate` takes either). DATA: the shared data
folder (default: $KT_SHARED_DATA, else ../shared/data). A paragraph counts as found when the
segmenter splits it at exactly its lines' joins; its document translation then equals the
lines' translations joined by spaces unless a sentence was longer than the model takes (split
in parts as a document, cut as a line: counted apart). Prints one markdown table.
"""
from __future__ import annotations

import argparse
import os
import random
import sys
import time
from pathlib import Path

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO_ROOT)
sys.path.insert(0, os.path.join(REPO_ROOT, "benchmarks"))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("model")
    parser.add_argument("data", nargs="?", default=os.environ.get(
        "KT_SHARED_DATA", os.path.join(REPO_ROOT, "..", "shared", "data")))
    parser.add_argument("--limit", type=int, default=200, help="paragraphs (default: 200)")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args(argv)

    from sentence_splitting import paragraphs_of, read_lines

    from keras_transformer.documents import document_translator
    from keras_transformer.documents.segmentation import segmenter, sentence_spans
    from keras_transformer.serving.loading import load_export
    from keras_transformer.serving.text_translation import LineTranslator, best_lines
    from keras_transformer.training.loaded_run import load_run
    from trainers.common import is_run_directory

    data = Path(args.data) / "wmt14"
    english = [line for name in ("newstest2013.en", "newstest2014.en")
               for line in read_lines(data / name)]
    paragraphs = paragraphs_of({"en": english}, random.Random(args.seed))["en"][:args.limit]
    if is_run_directory(args.model):
        translator = LineTranslator.from_translator(load_run(args.model).translator())
    else:
        translator = load_export(args.model)
    split = segmenter("en")
    found = [[text[a:b] for a, b in sentence_spans(text, split)] for text, _ in paragraphs]
    sentences = [text[start:end].strip() for text, starts in paragraphs
                 for start, end in zip(starts, [*starts[1:], len(text) + 1])]
    start = time.perf_counter()
    lines = best_lines(translator, [sentence.encode("utf-8") for sentence in sentences])
    line_seconds = time.perf_counter() - start
    documents = document_translator(translator, "en")
    start = time.perf_counter()
    translated = documents.translate("\n".join(text for text, _ in paragraphs) + "\n", "text")
    document_seconds = time.perf_counter() - start
    outputs = translated.text.split("\n")[:-1]
    split_lines = {split.line for split in translated.splits}
    boundaries_found = equal = with_parts = 0
    position = 0
    for number, ((text, starts), pieces) in enumerate(zip(paragraphs, found), start=1):
        expected = lines[position:position + len(starts)]
        position += len(starts)
        if [piece.strip() for piece in pieces] != [text[a:b].strip() for a, b in zip(
                starts, [*starts[1:], len(text) + 1])]:
            continue
        boundaries_found += 1
        if number in split_lines:
            with_parts += 1
        elif outputs[number - 1] == " ".join(expected):
            equal += 1
    print("| paragraphs | sentences | boundaries all found | of those, equal to the lines' "
          "translations | with a sentence in parts | lines: seconds | document: seconds |")
    print("| ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    print(f"| {len(paragraphs):,} | {len(sentences):,} | {boundaries_found:,} | "
          f"{equal:,} of {boundaries_found - with_parts:,} | {with_parts:,} | "
          f"{line_seconds:.1f} | {document_seconds:.1f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
