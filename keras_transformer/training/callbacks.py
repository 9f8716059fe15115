"""Keras callbacks of a training run: the step clock, stopping, backups, checkpoints,
throughput, dev BLEU, attention.

The run's step is counted on the host by `StepClock` (the first callback): the batches trained
over all replicas, which is also the position in the data. The callbacks read it, never the
optimizer's `iterations`, a device variable whose every read waits for the step to finish and
which a skipped float16 step (loss scaling) leaves behind the data.

An "epoch" is the interval between two backups (or a divisor of it, see `epoch_steps`), so
that a run resumed from a backup starts at an epoch boundary; evaluations happen at the ends of
epochs that cross a multiple of the evaluation interval (`Schedule`), where scalars are
added to the `logs` (so `History` keeps them) and written to TensorBoard at the global step.
Backups and evaluations may also be due by wall clock (`every_minutes`); in a cluster the
workers agree on that at each epoch end (`any_worker`), so they all act at the same step.
"""
from __future__ import annotations

import math
import os
import sys
import time
from pathlib import Path
from typing import Callable, Sequence

import keras
import tensorflow as tf
from tensorflow.core.framework import summary_pb2

from keras_transformer.metrics import MaskedTokenAccuracy
from keras_transformer.training.backup import weights_are_finite, write_backup
from keras_transformer.training.checkpoints import save_checkpoint
from keras_transformer.training.strategy import local_sum
from keras_transformer.visualization import AttentionMap, attention_figure, figure_png


def epoch_steps(eval_every: int, backup_every: int) -> int:
    """Steps per Keras epoch: the largest interval that divides both the evaluation and the
    backup interval, so that both fall on epoch ends."""
    return math.gcd(eval_every, backup_every)


class StepClock(keras.callbacks.Callback):
    """The run's global step counted on the host: `step` is the number of batches trained
    (each over all replicas), from `first_step` (the restored one). Place it first.

    It follows Keras's batch index, so it stays right when `fit` runs several steps per call
    (`steps_per_execution`).
    """

    def __init__(self, first_step: int = 0):
        super().__init__()
        self.step = first_step
        self._epoch_start = first_step

    def on_epoch_begin(self, epoch, logs=None):
        self._epoch_start = self.step

    def on_train_batch_end(self, batch, logs=None):
        self.step = self._epoch_start + batch + 1


class Schedule:
    """Tells, at an epoch end, whether something periodic is due: the run has crossed a
    multiple of `every_steps` since the previous epoch end, `every_minutes` have passed since
    it was last due, or the run is stopping (`at_stop`). In a cluster `any_worker` (a
    collective, `strategy.any_across_workers`) makes the wall-clock part one decision for all.
    Several callbacks may share one: it decides once per step, and answers the others alike.
    """

    def __init__(self, steps: StepClock, every_steps: int | None,
                 every_minutes: float | None = None, at_stop: bool = True,
                 any_worker: Callable[[bool], bool] | None = None,
                 clock: Callable[[], float] = time.monotonic):
        self.steps = steps
        self.every_steps = every_steps
        self.every_seconds = None if every_minutes is None else 60.0 * every_minutes
        self.at_stop = at_stop
        self.any_worker = any_worker
        self.clock = clock
        self._last_step: int | None = None
        self._last_time = clock()
        self._answer: tuple[int, bool] | None = None

    def start(self) -> None:
        """Counts from the step and time training starts at (call at `on_train_begin`)."""
        self._last_step, self._last_time = self.steps.step, self.clock()
        self._answer = None

    def due(self, model: keras.Model) -> bool:
        """Call at epoch ends (the answer depends on the previous step's)."""
        step = self.steps.step
        if self._answer is not None and self._answer[0] == step:
            return self._answer[1]
        last, self._last_step = self._last_step, step
        by_steps = (last is None or (self.every_steps is not None
                                     and step // self.every_steps > last // self.every_steps))
        by_time = (self.every_seconds is not None
                   and self.clock() - self._last_time >= self.every_seconds)
        if self.every_seconds is not None and self.any_worker is not None:
            by_time = self.any_worker(by_time)
        due = by_steps or by_time or (self.at_stop and bool(model.stop_training))
        if due:
            self._last_time = self.clock()
        self._answer = (step, due)
        return due


class PeriodicBackup(keras.callbacks.Callback):
    """Writes a backup (`training.backup`) at the epoch ends its `Schedule` makes due, unless
    the loss or the weights are not finite; a failed write (e.g. a full disk) is reported and
    training goes on with the earlier backups intact."""

    def __init__(self, directory: str | os.PathLike, schedule: Schedule):
        super().__init__()
        self.directory = Path(directory)
        self.schedule = schedule

    def on_train_begin(self, logs=None):
        self.schedule.start()

    def on_epoch_end(self, epoch, logs=None):
        if not self.schedule.due(self.model):
            return
        step = self.schedule.steps.step
        loss = (logs or {}).get("loss")
        if loss is not None and not math.isfinite(float(loss)):
            return
        if not weights_are_finite(self.model):
            print(f"kt-train: warning: step {step} left non-finite weights; not backed up",
                  file=sys.stderr, flush=True)
            return
        try:
            write_backup(self.model, self.directory, step)
        except OSError as error:
            print(f"kt-train: warning: backup of step {step} not written to {self.directory} "
                  f"({error.strerror or error}); the earlier backups are kept, training goes "
                  "on", file=sys.stderr, flush=True)


class StopAtLimit(keras.callbacks.Callback):
    """Stops after `max_steps` global steps or `max_minutes` of wall clock (None: no limit).

    Alone, a process reads its clock after every batch. In a cluster, `any_worker` (a
    collective, see `strategy.any_across_workers`) tells at each epoch end whether any
    worker's time is up, so that all stop after the same step rather than one leaving the
    others waiting for it.
    """

    def __init__(self, steps: StepClock, max_steps: int | None = None,
                 max_minutes: float | None = None,
                 any_worker: Callable[[bool], bool] | None = None,
                 clock: Callable[[], float] = time.monotonic):
        super().__init__()
        self.steps = steps
        self.max_steps = max_steps
        self.max_seconds = None if max_minutes is None else 60.0 * max_minutes
        self.any_worker = any_worker
        self.clock = clock
        self._start = clock()

    def on_train_begin(self, logs=None):
        self._start = self.clock()
        print(f"kt-train: training from global step {self.steps.step}", file=sys.stderr)
        self._check_steps()

    def on_train_batch_end(self, batch, logs=None):
        self._check_steps()
        if self.any_worker is None and self._out_of_time():
            self.model.stop_training = True

    def on_epoch_end(self, epoch, logs=None):
        if self.any_worker is not None and self.max_seconds is not None:
            if self.any_worker(self._out_of_time()):
                self.model.stop_training = True

    def _check_steps(self) -> None:
        if self.max_steps is not None and self.steps.step >= self.max_steps:
            self.model.stop_training = True

    def _out_of_time(self) -> bool:
        return self.max_seconds is not None and self.clock() - self._start >= self.max_seconds


class PeriodicCheckpoint(keras.callbacks.Callback):
    """Writes `ckpt-<step>.weights.h5` every `every_steps` steps and every `every_minutes`
    minutes (the paper: every 10 minutes), whichever is due, and at the end, keeping the
    newest `keep`. A checkpoint holds weights only, so each process writes its own on its own
    clock."""

    def __init__(self, steps: StepClock, directory: str | os.PathLike,
                 every_steps: int | None, every_minutes: float | None, keep: int):
        super().__init__()
        if keep < 1:
            raise ValueError(f"--keep-checkpoints: must be at least 1, got {keep}")
        self.steps = steps
        self.directory = Path(directory)
        self.every_steps = every_steps
        self.every_seconds = None if every_minutes is None else 60.0 * every_minutes
        self.keep = keep
        self._last_time = time.monotonic()
        self._last_step = -1

    def on_train_begin(self, logs=None):
        self._last_time = time.monotonic()

    def on_train_batch_end(self, batch, logs=None):
        step = self.steps.step
        due_by_steps = self.every_steps is not None and step % self.every_steps == 0
        due_by_time = (self.every_seconds is not None
                       and time.monotonic() - self._last_time >= self.every_seconds)
        if due_by_steps or due_by_time:
            self._save(step)

    def on_train_end(self, logs=None):
        self._save(self.steps.step)

    def _save(self, step: int) -> None:
        if step == self._last_step:
            return
        try:
            save_checkpoint(self.model, self.directory, step, self.keep)
        except OSError as error:
            print(f"kt-train: warning: checkpoint of step {step} not written to "
                  f"{self.directory} ({error.strerror or error}); the earlier checkpoints are "
                  "kept, training goes on", file=sys.stderr, flush=True)
        self._last_step = step
        self._last_time = time.monotonic()


class TrainingPace:
    """The target tokens this process's replicas trained on (in a multi-worker cluster, this
    worker's; on one machine, all) and the seconds spent training, both counted from `start`.

    Keras restarts the token count with each epoch's metrics, so ended epochs are summed; the
    time between an epoch's last batch and the next epoch's start (evaluations, backups) is not
    training time. The callback that owns it forwards its events (`start` at `on_train_begin`,
    `epoch_begin`, `batch_end`, `epoch_end`); `rate(reading)` is the tokens per second since
    an earlier `reading()`. Reading the tokens never talks to other workers (`local_sum`).
    """

    def __init__(self, token_metric: MaskedTokenAccuracy,
                 clock: Callable[[], float] = time.monotonic):
        self.token_metric = token_metric
        self.clock = clock
        self.start(None)

    def start(self, model: keras.Model | None) -> None:
        """Counts from now, reading `model`'s distribution strategy."""
        self._model = model
        self._start = self._last_batch_end = self.clock()
        self._paused = 0.0
        self._ended_epochs_tokens = 0.0
        self._in_epoch = False

    def epoch_begin(self) -> None:
        self._paused += self.clock() - self._last_batch_end
        self._in_epoch = True

    def batch_end(self) -> None:
        self._last_batch_end = self.clock()

    def epoch_end(self) -> None:
        self._ended_epochs_tokens = self.tokens()
        self._in_epoch = False

    def tokens(self) -> float:
        """Target tokens trained on since `start`."""
        if not self._in_epoch:
            return self._ended_epochs_tokens
        epoch = local_sum(self._model.distribute_strategy, self.token_metric.count)
        return self._ended_epochs_tokens + epoch

    def seconds(self) -> float:
        """Seconds spent training since `start`: up to now within an epoch, else up to the
        last batch."""
        end = self.clock() if self._in_epoch else self._last_batch_end
        return end - self._start - self._paused

    def reading(self) -> tuple[float, float]:
        """(tokens, seconds) now, for a later `rate`."""
        return self.tokens(), self.seconds()

    def rate(self, since: tuple[float, float]) -> float:
        """Target tokens per second of training since the reading `since`."""
        tokens, seconds = self.reading()
        return (tokens - since[0]) / max(seconds - since[1], 1e-9)


class TensorBoardScalars(keras.callbacks.Callback):
    """Scalars for TensorBoard at the global step: the training curve every `every_steps`
    steps (0: none), and the evaluations (its `Schedule`).

    Every `every_steps` steps it writes the step's logs (loss, token_accuracy, perplexity: the
    running values of the epoch so far), `learning_rate`, and `tokens_per_second` since the
    previous point. At each evaluation it adds `learning_rate` and `tokens_per_second` (of the
    epoch just ended) to the logs and writes each scalar of the logs not written at that step
    already (dev BLEU, and the rest when the evaluation falls between points). Place it after
    callbacks that add scalars (dev BLEU); throughput counts training time only (`TrainingPace`),
    so evaluation time does not lower it.
    """

    def __init__(self, writer: tf.summary.SummaryWriter, token_metric: MaskedTokenAccuracy,
                 schedule: Schedule, every_steps: int = 50,
                 clock: Callable[[], float] = time.monotonic):
        super().__init__()
        if every_steps < 0:
            raise ValueError(f"--log-every-steps: must be 0 or more, got {every_steps}")
        self.writer = writer
        self.schedule = schedule
        self.every_steps = every_steps
        self.pace = TrainingPace(token_metric, clock)
        self._written_step: int | None = None
        self._written: set[str] = set()  # the tags written at `_written_step`

    def on_train_begin(self, logs=None):
        self.schedule.start()
        self.pace.start(self.model)
        self._point = self._epoch = self.pace.reading()
        self._point_step = self.schedule.steps.step

    def on_epoch_begin(self, epoch, logs=None):
        self.pace.epoch_begin()
        self._epoch = self.pace.reading()

    def on_train_batch_end(self, batch, logs=None):
        self.pace.batch_end()
        step, every = self.schedule.steps.step, self.every_steps
        if not every or step // every == self._point_step // every:
            return
        scalars = {**(logs or {}), "learning_rate": self._learning_rate(),
                   "tokens_per_second": self.pace.rate(self._point)}
        self._point, self._point_step = self.pace.reading(), step
        self._write(scalars, step)

    def on_epoch_end(self, epoch, logs=None):
        self.pace.epoch_end()
        if not self.schedule.due(self.model):
            return
        logs = {} if logs is None else logs
        logs["tokens_per_second"] = self.pace.rate(self._epoch)
        logs["learning_rate"] = self._learning_rate()
        step = self.schedule.steps.step
        written = self._written if self._written_step == step else set()
        self._write({name: value for name, value in logs.items() if name not in written}, step)

    def _learning_rate(self) -> float:
        return float(keras.ops.convert_to_numpy(self.model.optimizer.learning_rate))

    def _write(self, scalars: dict[str, float], step: int) -> None:
        with self.writer.as_default():
            for name, value in scalars.items():
                write_scalar(name, float(value), step)
        self.writer.flush()
        if self._written_step != step:
            self._written_step, self._written = step, set()
        self._written |= set(scalars)


class DevEvaluation(keras.callbacks.Callback):
    """At each evaluation (its `Schedule`): the dev figures `score()` gives (name -> value:
    `dev_bleu`, and with several language pairs each pair's `dev_bleu/SRC-TGT`) into the logs
    and `bleu_curve.tsv` (step, wall-clock seconds of the run, then each figure: a column
    each), and attention heatmaps of fixed dev pairs to TensorBoard (`attention(*item)` for
    each item of `attention_pairs`, e.g. (source, target))."""

    def __init__(self, score: Callable[[], dict[str, float]],
                 attention: Callable[..., list[AttentionMap]],
                 attention_pairs: Sequence[tuple], writer: tf.summary.SummaryWriter,
                 curve_path: str | os.PathLike, schedule: Schedule):
        super().__init__()
        self.schedule = schedule
        self.score = score
        self.attention = attention
        self.attention_pairs = list(attention_pairs)
        self.writer = writer
        self.curve_path = Path(curve_path)
        self._start = time.monotonic()
        self._offset = _last_elapsed(self.curve_path)

    def on_train_begin(self, logs=None):
        self.schedule.start()
        self._start = time.monotonic()
        self._offset = _last_elapsed(self.curve_path)

    def on_epoch_end(self, epoch, logs=None):
        if not self.schedule.due(self.model):
            return
        step = self.schedule.steps.step
        scores = self.score()
        if logs is not None:
            logs.update(scores)
        elapsed = self._offset + time.monotonic() - self._start
        new_file = not self.curve_path.exists()
        with open(self.curve_path, "a", encoding="utf-8") as curve:
            if new_file:
                curve.write("\t".join(["step", "seconds", *scores]) + "\n")
            curve.write("\t".join([str(step), f"{elapsed:.0f}",
                                   *(f"{value:.2f}" for value in scores.values())]) + "\n")
        self._write_attention(step)

    def _write_attention(self, step: int) -> None:
        with self.writer.as_default(step=step):
            for index, item in enumerate(self.attention_pairs):
                for attention in self.attention(*item):
                    png = figure_png(attention_figure(attention, average_heads=True))
                    height, width = tf.io.decode_png(png).shape[:2]
                    write_png(f"attention/sentence{index}/{attention.name}", png, width,
                              height, step)
        self.writer.flush()


def _last_elapsed(curve_path: Path) -> float:
    """Wall-clock seconds recorded by the previous segments of a resumed run."""
    if not curve_path.is_file():
        return 0.0
    lines = curve_path.read_text(encoding="utf-8").strip().splitlines()
    return float(lines[-1].split("\t")[1]) if len(lines) > 1 else 0.0


# TensorBoard records written with core TensorFlow ops only: `tf.summary.scalar`/`image` live in
# the `tensorboard` package, which viewing the logs needs but training should not.
def _metadata(plugin: str) -> bytes:
    metadata = summary_pb2.SummaryMetadata()
    metadata.plugin_data.plugin_name = plugin
    return metadata.SerializeToString()


def write_scalar(tag: str, value: float, step: int) -> None:
    """A scalar for TensorBoard's Scalars tab (call under `writer.as_default()`)."""
    tf.summary.write(tag, tf.constant(float(value), tf.float32), step=step,
                     metadata=_metadata("scalars"))


def write_png(tag: str, png: bytes, width: int, height: int, step: int) -> None:
    """A PNG image for TensorBoard's Images tab (the images plugin's [w, h, png] layout)."""
    tensor = tf.constant([str(width).encode(), str(height).encode(), png])
    tf.summary.write(tag, tensor, step=step, metadata=_metadata("images"))
