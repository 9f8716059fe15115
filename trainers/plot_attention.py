"""`kt-plot-attention`: renders every layer's attention for one sentence pair to PNG files.

    python -m trainers plot_attention runs/demo "I have forty-two apples" --out plots/

Without `--target` the model's own (greedy) translation is plotted. One file per attention
kind and layer (`encoder_self_layer0.png`, ...), all heads side by side, subword tokens on
both axes.
"""
from __future__ import annotations

import argparse
import os
import sys
from typing import Optional, Sequence

from trainers.arguments import plot_attention_parser
from trainers.common import load_run_model
from keras_transformer.decoding.translator import TranslationModule
from keras_transformer.evaluation import translate_corpus
from keras_transformer.config import SearchSettings
from keras_transformer.visualization import attention_figure, attention_maps, figure_png


def parse_args(argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
    """The command line's options, checked (`argv`: default `sys.argv[1:]`)."""
    parser = plot_attention_parser()
    args = parser.parse_args(argv)
    if not args.source.strip():
        parser.error("source: empty sentence")
    return args


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Runs the command line; returns its exit status (2 on a user error)."""
    args = parse_args(argv)
    try:
        model, tokenizer = load_run_model(args.run_dir, args.weights)
        os.makedirs(args.out, exist_ok=True)
    except (ValueError, FileNotFoundError, OSError) as error:
        print(f"kt-plot-attention: error: {error}", file=sys.stderr)
        return 2
    target = args.target or translate_corpus(
        TranslationModule(model, tokenizer, SearchSettings(beam_size=1)), [args.source])[0]
    print(f"target: {target}")
    for attention in attention_maps(model, tokenizer, args.source, target):
        path = os.path.join(args.out, f"{attention.name}.png")
        with open(path, "wb") as handle:
            handle.write(figure_png(attention_figure(attention)))
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
