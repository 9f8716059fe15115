"""`kt-average-checkpoints`: averages a run's newest K checkpoints (section 6.1).

    kt-average-checkpoints runs/multi30k --last 5

Writes `<run_dir>/averaged.weights.h5` (or `--output`), which `kt-evaluate` and `kt-export`
then use by default.
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
    parser.add_argument("--last", type=int, default=5,
                        help="how many of the newest checkpoints (paper: 5 base, 20 big)")
    parser.add_argument("--output", help="default: <run_dir>/averaged.weights.h5")
    args = parser.parse_args(argv)
    if args.last < 1:
        parser.error(f"--last: must be at least 1, got {args.last}")
    if args.output and not args.output.endswith(".weights.h5"):
        parser.error(f"--output: must end in .weights.h5, got {args.output!r}")
    return args


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Runs the command line; returns its exit status (2 on a user error)."""
    args = parse_args(argv)
    run = RunDir(args.run_dir)
    try:
        config = run.load_recipe().architecture
        checkpoints = list_checkpoints(run.checkpoints)
        if len(checkpoints) < args.last:
            raise ValueError(f"--last {args.last}: only {len(checkpoints)} checkpoint(s) in "
                             f"{str(run.checkpoints)!r}")
        model = Transformer(config)
        average_weights(model, checkpoints[-args.last:])
        output = save_weights_atomic(model, args.output or run.averaged_weights)
    except (ValueError, FileNotFoundError) as error:
        print(f"kt-average-checkpoints: error: {error}", file=sys.stderr)
        return 2
    print(f"averaged {', '.join(path.name for path in checkpoints[-args.last:])} -> "
          f"{os.fspath(output)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
