"""`kt-average-checkpoints`: averages a run's newest K checkpoints (section 6.1) into
`averaged.weights.h5`. Its manual: docs/training.md, "Evaluate and average checkpoints".
"""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Optional, Sequence

from trainers.arguments import average_checkpoints_parser

from keras_transformer.model import Transformer
from keras_transformer.training.checkpoints import (average_weights, checkpoints_to_average,
                                                    list_checkpoints, save_weights_atomic)
from keras_transformer.training.run_dir import RESULT_FILE, RunDir, record_average


def parse_args(argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
    """The command line's options, checked (`argv`: default `sys.argv[1:]`)."""
    parser = average_checkpoints_parser()
    args = parser.parse_args(argv)
    if args.last is not None and args.last < 2:
        parser.error(f"--last: must be at least 2 (one checkpoint is nothing to average), got "
                     f"{args.last}")
    if args.output and not args.output.endswith(".weights.h5"):
        parser.error(f"--output: must end in .weights.h5, got {args.output!r}")
    return args


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Runs the command line; returns its exit status (2 on a user error)."""
    args = parse_args(argv)
    run = RunDir(args.run_dir)
    try:
        recipe = run.load_recipe()
        checkpoints = list_checkpoints(run.checkpoints)
        if args.last is not None and len(checkpoints) < args.last:
            raise ValueError(f"--last {args.last}: only {len(checkpoints)} checkpoint(s) in "
                             f"{str(run.checkpoints)!r}")
        last = args.last or recipe.training.average_last
        if last < 2:  # the recipe's: --last is 2 or more
            raise ValueError(f"the recipe's average_last is {last} (no averaging); give --last "
                             "K to average K checkpoints")
        chosen, averaging = checkpoints_to_average(checkpoints, last)
        if not chosen:
            raise ValueError(f"{averaging} in {str(run.checkpoints)!r}")
        model = Transformer(recipe.architecture)
        options = run.recorded_options()
        lora = (Transformer(recipe.architecture, lora_rank=options["lora_rank"],
                            lora_alpha=options.get("lora_alpha"))
                if options.get("lora_rank") else None)
        average_weights(model, chosen, lora)
        output = save_weights_atomic(model, args.output or run.averaged_weights)
        result = (record_average(run, chosen, averaging, last)
                  if Path(output).resolve() == run.averaged_weights.resolve() else None)
    except (ValueError, FileNotFoundError) as error:
        print(f"kt-average-checkpoints: error: {error}", file=sys.stderr)
        return 2
    print(f"averaged {averaging}: {', '.join(path.name for path in chosen)} -> "
          f"{os.fspath(output)}")
    if result is not None:
        print(f"{run.root / RESULT_FILE}: names these checkpoints, their dev BLEU not known "
              f"(null); the run's result stays {result['weights']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
