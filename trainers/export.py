"""`kt-export`: writes a trained model as a TF Serving SavedModel under `<base-dir>/<name>/<N>/`.

    kt-export runs/tiny/model.keras runs/tiny/vocabulary --name tiny --beam-size 4
    kt-export runs/demo runs/demo/vocab --name demo

The model is a `.keras` file, or a directory holding one (the newest is used), or a run
directory holding `config.json` (its `Recipe`) and weights: `--weights`, else the same
default as `kt-evaluate` (the averaged weights, else the final weights, else the newest
checkpoint). The vocabulary directory is the one `SubwordTokenizer.save` wrote (`spm.model`).
The search settings fixed in the export are the flags', else a run directory's recipe's, else
the paper's (beam 4, alpha 0.6, +50). `--precision bfloat16` stores and computes in bfloat16:
faster where the serving hardware's bfloat16 matmuls are; `auto` measures this machine (export
on the hardware that will serve).
"""
from __future__ import annotations

import argparse
import glob
import os
import sys
from typing import Optional, Sequence

import keras_transformer  # noqa: F401  (selects the TensorFlow backend before keras loads)
import keras

from keras_transformer.data.tokenizer import SubwordTokenizer
from keras_transformer.export import export_translator
from keras_transformer.model import Transformer
from keras_transformer.probes import choose_serving_dtype
from keras_transformer.search_settings import SearchSettings
from keras_transformer.training.precision import SERVING_DTYPES
from keras_transformer.training.run_dir import RunDir
from trainers.common import add_search_arguments, run_model, search_settings


def parse_args(argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
    """The command line's options, checked (`argv`: default `sys.argv[1:]`)."""
    parser = argparse.ArgumentParser(prog="kt-export", description=__doc__.split("\n")[0])
    parser.add_argument("model", help="a .keras file, or a checkpoint directory")
    parser.add_argument("vocabulary", help="directory with the tokenizer's spm.model")
    parser.add_argument("--name", required=True, help="model name: <base-dir>/<name>/<version>")
    parser.add_argument("--base-dir", default="saved_models",
                        help="root of the TF Serving model tree (default: saved_models)")
    parser.add_argument("--weights", help="with a run directory: a .weights.h5 file "
                        "(default: see above)")
    parser.add_argument("--precision", choices=(*SERVING_DTYPES, "auto"), default="float32",
                        help="dtype the export stores and computes in (default: float32; auto: "
                             "bfloat16 where its matmuls measure at least 1.25x float32's "
                             "here at decoding sizes)")
    add_search_arguments(parser, "fixed in the export")
    return parser.parse_args(argv)


def serving_dtype(wanted: str, model: Transformer, settings: SearchSettings) -> str:
    """`wanted`, or for "auto" the probe's choice at this model's decoding sizes (a batch of 32
    sentences' hypotheses), printed with its figures."""
    if wanted != "auto":
        return wanted
    config = model.config
    result = choose_serving_dtype(config.d_model, config.d_ff, 32 * settings.beam_size)
    print(f"kt-export: precision {result.describe()}", file=sys.stderr)
    return result.choice


def load_model(path: str, weights: Optional[str] = None
               ) -> tuple[Transformer, SearchSettings]:
    """The `Transformer` saved at `path` (see the module docstring for accepted layouts) and
    its default search settings (a run's recipe's; the paper's for a .keras file)."""
    if os.path.isfile(path):
        return _checked(keras.saving.load_model(path), path), SearchSettings()
    if not os.path.isdir(path):
        raise FileNotFoundError(f"model: no such file or directory: {path!r}")
    archives = _newest(glob.glob(os.path.join(path, "*.keras")))
    if archives and not weights:
        return _checked(keras.saving.load_model(archives), archives), SearchSettings()
    if not os.path.isfile(os.path.join(path, "config.json")):
        raise FileNotFoundError(f"model: {path!r} holds neither a .keras file nor a run's "
                                "config.json")
    return run_model(path, weights), RunDir(path).load_recipe().search


def _newest(paths: list[str]) -> Optional[str]:
    return max(paths, key=os.path.getmtime) if paths else None


def _checked(model: keras.Model, path: str) -> Transformer:
    if not isinstance(model, Transformer):
        raise ValueError(f"model: {path!r} holds a {type(model).__name__}, not a Transformer")
    return model


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Runs the command line; returns its exit status (2 on a user error)."""
    args = parse_args(argv)
    try:
        tokenizer = SubwordTokenizer.load(args.vocabulary)
        model, defaults = load_model(args.model, args.weights)
        settings = search_settings(args, defaults)
        path = export_translator(model, tokenizer, args.name, args.base_dir, settings,
                                 serving_dtype(args.precision, model, settings))
    except (FileNotFoundError, ValueError) as error:
        print(f"kt-export: error: {error}", file=sys.stderr)
        return 2
    print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
