"""Progress lines a person (or a nohup log) can follow: step, loss, throughput, elapsed, ETA."""
from __future__ import annotations

import sys
import time
from typing import Callable, Optional, TextIO

import keras

from keras_transformer.metrics import MaskedTokenAccuracy
from keras_transformer.training.callbacks import Schedule
from keras_transformer.training.strategy import local_sum


def duration(seconds: float) -> str:
    """`1h02m`, `4m10s` or `12s`."""
    seconds = max(0, int(round(seconds)))
    hours, rest = divmod(seconds, 3600)
    minutes, seconds = divmod(rest, 60)
    if hours:
        return f"{hours}h{minutes:02d}m"
    return f"{minutes}m{seconds:02d}s" if minutes else f"{seconds}s"


class ProgressLines(keras.callbacks.Callback):
    """Every `every_seconds` of wall clock (and when the run stops): one plain line with the
    global step (of `max_steps`), the epoch's running loss, target tokens/s since the last line
    (of this process's replicas: in a multi-worker cluster, this worker's), the elapsed time
    and the ETA against `max_steps` or `max_minutes`, whichever ends first.
    At each evaluation (`schedule`, the one the dev evaluation follows): the logs (dev BLEU,
    the last epoch's loss and metrics, learning rate). Place it after the callbacks that add
    to the logs.
    """

    def __init__(self, max_steps: Optional[int], max_minutes: Optional[float],
                 token_metric: MaskedTokenAccuracy, schedule: Schedule,
                 every_seconds: float = 30.0, stream: Optional[TextIO] = None,
                 clock: Callable[[], float] = time.monotonic):
        super().__init__()
        self.schedule = schedule
        self.max_steps = max_steps
        self.max_seconds = None if max_minutes is None else 60.0 * max_minutes
        self.token_metric = token_metric
        self.every_seconds = every_seconds
        self.stream = stream  # None: sys.stderr at the time of each line
        self.clock = clock

    def on_train_begin(self, logs=None):
        self.schedule.start()
        self._start = self._last_time = self._last_batch_end = self.clock()
        self._first_step = self._last_step = self.schedule.steps.step
        # Keras restarts the token count with each epoch's metrics: ended epochs are summed.
        self._ended_epochs_tokens = self._last_tokens = 0.0
        self._in_epoch = False

    def on_epoch_begin(self, epoch, logs=None):
        # Epochs are short (a backup or evaluation interval), so lines span them: the time
        # between the last batch and now (evaluations, backups) is not training time.
        self._last_time += self.clock() - self._last_batch_end
        self._in_epoch = True

    def on_train_batch_end(self, batch, logs=None):
        self._last_batch_end = self.clock()
        if self._last_batch_end - self._last_time >= self.every_seconds:
            self._report((logs or {}).get("loss"))

    def on_epoch_end(self, epoch, logs=None):
        self._ended_epochs_tokens = self._tokens()
        self._in_epoch = False
        if not self.schedule.due(self.model):
            return
        step = self.schedule.steps.step
        values = ", ".join(f"{name} {_number(value)}" for name, value in (logs or {}).items())
        self._print(f"step {step}: {values}")

    def on_train_end(self, logs=None):
        if self.schedule.steps.step != self._last_step:
            self._report((logs or {}).get("loss"))

    def _report(self, loss) -> None:
        now, step = self.clock(), self.schedule.steps.step
        self._last_step = step
        tokens = self._tokens()
        rate = (tokens - self._last_tokens) / max(now - self._last_time, 1e-9)
        self._last_time, self._last_tokens = now, tokens
        elapsed = now - self._start
        parts = [f"step {step}" + (f"/{self.max_steps} ({100 * step / self.max_steps:.0f}%)"
                                   if self.max_steps else "")]
        if loss is not None:
            parts.append(f"loss {float(loss):.4f}")
        parts += [f"{rate:,.0f} target tok/s", f"elapsed {duration(elapsed)}"]
        eta = self._eta(step, elapsed)
        if eta is not None:
            parts.append(f"ETA {duration(eta)}")
        self._print(", ".join(parts))

    def _tokens(self) -> float:
        """Target tokens this process's replicas trained on since it started."""
        if not self._in_epoch:
            return self._ended_epochs_tokens
        epoch = local_sum(self.model.distribute_strategy, self.token_metric.count)
        return self._ended_epochs_tokens + epoch

    def _eta(self, step: int, elapsed: float) -> Optional[float]:
        """Seconds left: to the step budget at this process's pace, or to the time limit."""
        candidates = []
        done = step - self._first_step
        if self.max_steps and done > 0:
            candidates.append((self.max_steps - step) * elapsed / done)
        if self.max_seconds is not None:
            candidates.append(self.max_seconds - elapsed)
        return min(candidates) if candidates else None

    def _print(self, text: str) -> None:
        print(f"kt-train: {text}", file=self.stream or sys.stderr, flush=True)


def _number(value) -> str:
    value = float(value)
    return f"{value:.4g}" if abs(value) < 1e4 else f"{value:,.0f}"
