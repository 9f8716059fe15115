"""`kt-train`: trains a Transformer with Keras `fit`, evaluates it and exports it; with no
arguments, the offline demo job in `runs/demo`. A killed run restarts from its last backup when
started again with the same options. Its manual: docs/training.md; the run itself:
`keras_transformer.training.run.Training`.
"""
from __future__ import annotations

import json
import sys
from typing import Optional, Sequence

from keras_transformer.training.backup import BackupError
from keras_transformer.training.run import Training, TrainingError
from keras_transformer.training.run_dir import RunDir
from trainers.train_arguments import parse_args


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Runs the command line; returns its exit status (2 on a user error)."""
    command = parse_args(argv)
    try:
        RunDir(command.output_dir).check_writable()
        summary = Training(command.recipe, command.data, command.options, command.output_dir,
                           command.recipe_origin).run()
    except (TrainingError, BackupError, ValueError, FileNotFoundError) as error:
        print(f"kt-train: error: {error}", file=sys.stderr)
        return 2
    except OSError as error:  # e.g. a full disk while writing the final weights or the export
        print(f"kt-train: error: {error.filename or command.output_dir}: "
              f"{error.strerror or error}; the backups and checkpoints written so far are "
              "intact: run the same command again once this is fixed", file=sys.stderr)
        return 1
    print(json.dumps(summary, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
