"""The end of a run, as in the paper (6.1): average the last checkpoints, keep whichever of the
average and the final weights scores better on dev, and record the choice (`result.json`)."""
from __future__ import annotations

import os
from typing import Callable

import keras

from keras_transformer.training.checkpoints import (average_weights, list_checkpoints,
                                                    load_weights_file, save_weights_atomic)
from keras_transformer.training.run_dir import RESULT_FILE, RunDir


def keep_better_of_average_and_final(model: keras.Model, run: RunDir, average_last: int,
                                     dev_bleu: Callable[[], float]) -> dict:
    """Leaves `model` holding the run's result and returns what `result.json` records.

    `model` holds the final weights (already saved as `run.final_weights`); `dev_bleu()` scores
    whatever `model` holds. With `average_last` >= 2 and at least two checkpoints, the newest
    `average_last` of them (fewer if fewer were kept, noted as `averaged`) are averaged into
    `run.averaged_weights`, and the average is the result only if its dev BLEU is higher.
    """
    scores = {"final": round(dev_bleu(), 2)}
    averaged = list_checkpoints(run.checkpoints)[-average_last:] if average_last >= 2 else []
    chosen = run.final_weights
    if len(averaged) >= 2:
        average_weights(model, averaged)
        save_weights_atomic(model, run.averaged_weights)
        scores["averaged"] = round(dev_bleu(), 2)
        if scores["averaged"] > scores["final"]:
            chosen = run.averaged_weights
        else:
            load_weights_file(model, run.final_weights)
    result = {"weights": chosen.name, "dev_bleu": scores,
              "averaged": [path.name for path in averaged] if len(averaged) >= 2 else [],
              "average_last": average_last}
    run.write_json(RESULT_FILE, result)
    return {**result, "weights": os.fspath(chosen)}
