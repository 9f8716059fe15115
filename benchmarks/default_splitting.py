"""Whether `kt-translate` should split lines into sentences by default: on test sets of one
sentence a line, how many lines the segmenter splits, and the BLEU of the lines translated as
they are (`--format lines`) against the same with those lines translated as documents
(`--format text`: split, each sentence translated alone, joined).

    python benchmarks/default_splitting.py MODEL --pair SRC REF [--pair SRC REF ...]

MODEL is a run directory or an export. Only the lines the segmenter splits are translated
again; the others are the same either way. Prints one markdown table.
"""
from __future__ import annotations

import argparse
import os
import sys

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO_ROOT)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("model")
    parser.add_argument("--pair", nargs=2, action="append", required=True,
                        metavar=("SRC", "REF"), help="a test set: sources and references")
    parser.add_argument("--language", default="en", help="the sources' language")
    args = parser.parse_args(argv)

    import sacrebleu

    from keras_transformer.data.text_files import read_lines
    from keras_transformer.documents import document_translator
    from keras_transformer.documents.segmentation import segmenter, sentence_spans
    from keras_transformer.serving.loading import load_export
    from keras_transformer.serving.text_translation import LineTranslator, best_lines
    from keras_transformer.training.loaded_run import load_run
    from trainers.common import is_run_directory

    translator = (LineTranslator.from_translator(load_run(args.model).translator())
                  if is_run_directory(args.model) else load_export(args.model))
    documents = document_translator(translator, args.language)
    split = segmenter(args.language)
    print("| test set | lines | lines split | BLEU as lines | BLEU as text | chrF as lines | "
          "chrF as text |")
    print("|---|---|---|---|---|---|---|")
    for source_path, reference_path in args.pair:
        sources, references = read_lines(source_path), read_lines(reference_path)
        lines = [line if isinstance(line, str) else line.decode("utf-8") for line in best_lines(
            translator, [source.encode("utf-8") for source in sources])]
        split_lines = [index for index, source in enumerate(sources)
                       if len(sentence_spans(source, split)) > 1]
        as_text = list(lines)
        for index in split_lines:
            as_text[index] = documents.translate(sources[index], "text").text
        scores = [(sacrebleu.corpus_bleu(hypotheses, [references]).score,
                   sacrebleu.corpus_chrf(hypotheses, [references]).score)
                  for hypotheses in (lines, as_text)]
        print(f"| {os.path.basename(source_path)} | {len(sources):,} | {len(split_lines):,} | "
              f"{scores[0][0]:.2f} | {scores[1][0]:.2f} | {scores[0][1]:.2f} | "
              f"{scores[1][1]:.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
