"""`kt-average-checkpoints`: averages a run's newest K checkpoints (section 6.1).

    kt-average-checkpoints runs/multi30k            # the recipe's average_last (5; big: 20)
    kt-average-checkpoints runs/multi30k --last 3

Writes `<run_dir>/averaged.weights.h5` (or `--output`). `kt-evaluate` and `kt-export` use it by
default unless the run's `result.json` chose other weights (a finished kt-train run keeps the
better on dev of the averaged and the final ones); `--weights FILE` picks any.
"""
from __future__ import annotations

import argparse
import os
import sys
from typing import Optional, Sequence

from keras_transformer.model import Transformer
from keras_transformer.training.checkpoints import (average_weights, list_checkpoints,
                                                    save_weights_atomic)
from keras_transformer.training.run_dir import RunDir


def parse_args(argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
    """The command line's options, checked (`argv`: default `sys.argv[1:]`)."""
    parser = argparse.ArgumentParser(prog="kt-average-checkpoints",
                                     description=__doc__.split("\n")[0])
    parser.add_argument("run_dir", help="the directory kt-train wrote")
    parser.add_argument("--last", type=int,
                        help="how many of the newest checkpoints (default: the run's recipe's "
                             "average_last; paper: 5 base, 20 big)")
    parser.add_argument("--output", help="default: <run_dir>/averaged.weights.h5")
    args = parser.parse_args(argv)
    if args.last is not None and args.last < 1:
        parser.error(f"--last: must be at least 1, got {args.last}")
    if args.output and not args.output.endswith(".weights.h5"):
        parser.error(f"--output: must end in .weights.h5, got {args.output!r}")
    return args


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Runs the command line; returns its exit status (2 on a user error)."""
    args = parse_args(argv)
    run = RunDir(args.run_dir)
    try:
        recipe = run.load_recipe()
        last = args.last or recipe.training.average_last
        if last < 2:
            raise ValueError(f"--last: the recipe's average_last is {last} (no averaging); "
                             "give --last K to average K checkpoints")
        checkpoints = list_checkpoints(run.checkpoints)
        if len(checkpoints) < last:
            raise ValueError(f"--last {last}: only {len(checkpoints)} checkpoint(s) in "
                             f"{str(run.checkpoints)!r}")
        model = Transformer(recipe.architecture)
        average_weights(model, checkpoints[-last:])
        output = save_weights_atomic(model, args.output or run.averaged_weights)
    except (ValueError, FileNotFoundError) as error:
        print(f"kt-average-checkpoints: error: {error}", file=sys.stderr)
        return 2
    print(f"averaged {', '.join(path.name for path in checkpoints[-last:])} -> "
          f"{os.fspath(output)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
