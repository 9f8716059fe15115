"""`kt-export`: writes a trained model as a TF Serving SavedModel under `<base-dir>/<name>/<N>/`.

    kt-export runs/tiny/model.keras runs/tiny/vocabulary --name tiny --beam-size 4

The model is a `.keras` file, or a directory holding one (the newest is used) or holding
`config.json` (a `TransformerConfig`) and `*.weights.h5` files (the newest is used). The
vocabulary directory is the one `SubwordTokenizer.save` wrote (`spm.model`).
"""
from __future__ import annotations

import argparse
import glob
import os
import sys
from typing import Optional, Sequence

import keras_transformer  # noqa: F401  (selects the TensorFlow backend before keras loads)
import keras

from keras_transformer.config import TransformerConfig
from keras_transformer.data.tokenizer import SubwordTokenizer
from keras_transformer.export import export_translator
from keras_transformer.model import Transformer


def parse_args(argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="kt-export", description=__doc__.split("\n")[0])
    parser.add_argument("model", help="a .keras file, or a checkpoint directory")
    parser.add_argument("vocabulary", help="directory with the tokenizer's spm.model")
    parser.add_argument("--name", required=True, help="model name: <base-dir>/<name>/<version>")
    parser.add_argument("--base-dir", default="saved_models",
                        help="root of the TF Serving model tree (default: saved_models)")
    parser.add_argument("--beam-size", type=int, default=None,
                        help="beam size fixed in the export; 1 = greedy (default: config's)")
    parser.add_argument("--alpha", type=float, default=None,
                        help="length penalty exponent (default: config's length_penalty)")
    parser.add_argument("--extra-length", type=int, default=None,
                        help="output may be this many tokens longer than the source "
                             "(default: config's max_decode_extra)")
    args = parser.parse_args(argv)
    if args.beam_size is not None and args.beam_size < 1:
        parser.error(f"--beam-size: must be at least 1, got {args.beam_size}")
    if args.alpha is not None and args.alpha < 0:
        parser.error(f"--alpha: must be non-negative, got {args.alpha}")
    if args.extra_length is not None and args.extra_length < 0:
        parser.error(f"--extra-length: must be non-negative, got {args.extra_length}")
    return args


def load_model(path: str) -> Transformer:
    """The `Transformer` saved at `path` (see the module docstring for accepted layouts)."""
    if os.path.isfile(path):
        return _checked(keras.saving.load_model(path), path)
    if not os.path.isdir(path):
        raise FileNotFoundError(f"model: no such file or directory: {path!r}")
    archives = _newest(glob.glob(os.path.join(path, "*.keras")))
    if archives:
        return _checked(keras.saving.load_model(archives), archives)
    config_path = os.path.join(path, "config.json")
    weights = _newest(glob.glob(os.path.join(path, "*.weights.h5")))
    if not (os.path.isfile(config_path) and weights):
        raise FileNotFoundError(f"model: {path!r} holds neither a .keras file nor config.json "
                                "with *.weights.h5 files")
    with open(config_path, encoding="utf-8") as handle:
        model = Transformer(TransformerConfig.from_json(handle.read()))
    model.load_weights(weights)
    return model


def _newest(paths: list[str]) -> Optional[str]:
    return max(paths, key=os.path.getmtime) if paths else None


def _checked(model: keras.Model, path: str) -> Transformer:
    if not isinstance(model, Transformer):
        raise ValueError(f"model: {path!r} holds a {type(model).__name__}, not a Transformer")
    return model


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = parse_args(argv)
    try:
        tokenizer = SubwordTokenizer.load(args.vocabulary)
        model = load_model(args.model)
        path = export_translator(model, tokenizer, args.name, args.base_dir,
                                 beam_size=args.beam_size, alpha=args.alpha,
                                 max_extra=args.extra_length)
    except (FileNotFoundError, ValueError) as error:
        print(f"kt-export: error: {error}", file=sys.stderr)
        return 2
    print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
