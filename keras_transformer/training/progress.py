"""Progress lines a person (or a nohup log) can follow: step, loss, throughput, elapsed, ETA
during training (`ProgressLines`), work counted as it is done (`CountProgress`), and the start
and end of each long stage (`stage`), so that no command is silent for long."""
from __future__ import annotations

import contextlib
import sys
import time
from typing import Callable, Iterator, Optional, TextIO

import keras

from keras_transformer.metrics import MaskedTokenAccuracy
from keras_transformer.training.callbacks import Schedule, TrainingPace


def duration(seconds: float) -> str:
    """`1h02m`, `4m10s` or `12s`."""
    seconds = max(0, int(round(seconds)))
    hours, rest = divmod(seconds, 3600)
    minutes, seconds = divmod(rest, 60)
    if hours:
        return f"{hours}h{minutes:02d}m"
    return f"{minutes}m{seconds:02d}s" if minutes else f"{seconds}s"


def print_line(command: str, text: str, stream: Optional[TextIO] = None) -> None:
    """`COMMAND: TEXT` on `stream` (None: `sys.stderr` at the time of the line), flushed."""
    print(f"{command}: {text}", file=stream or sys.stderr, flush=True)


@contextlib.contextmanager
def stage(command: str, what: str, stream: Optional[TextIO] = None,
          clock: Callable[[], float] = time.monotonic) -> Iterator[None]:
    """`COMMAND: WHAT ...` as a stage starts and `COMMAND: WHAT: done in 12s` as it ends (on
    `stream`, default stderr); a stage that raises prints no end line."""
    start = clock()
    print_line(command, f"{what} ...", stream)
    yield
    print_line(command, f"{what}: done in {duration(clock() - start)}", stream)


class CountProgress:
    """`COMMAND: [DOING: ]DONE/TOTAL UNIT, R UNIT/s, ETA 1m10s` as `advance` counts work done:
    at most every `every_seconds`, and when the last of `total` is done; nothing when `quiet`.
    While `total` is None (not known yet; it may be set later), lines say `DONE UNIT, R
    UNIT/s`."""

    def __init__(self, command: str, total: Optional[int], unit: str = "sentences",
                 every_seconds: float = 10.0, quiet: bool = False,
                 stream: Optional[TextIO] = None, clock: Callable[[], float] = time.monotonic,
                 doing: str = ""):
        self.command, self.total, self.unit = command, total, unit
        self.prefix = f"{doing}: " if doing else ""
        self.every_seconds, self.quiet = every_seconds, quiet
        self.stream, self.clock = stream, clock
        self.done = 0
        self._start = self._last = clock()

    def advance(self, count: int) -> None:
        """Counts `count` more done; prints a line if one is due."""
        self.done += count
        now = self.clock()
        finished = self.total is not None and self.done >= self.total
        if self.quiet or (now - self._last < self.every_seconds and not finished):
            return
        self._last = now
        rate = self.done / max(now - self._start, 1e-9)
        if self.total is None:
            counted = f"{self.done:,} {self.unit}"
        else:
            counted = f"{self.done:,}/{self.total:,} {self.unit}"
        eta = (f", ETA {duration((self.total - self.done) / rate)}"
               if self.total is not None and 0 < self.done < self.total else "")
        print_line(self.command, f"{self.prefix}{counted}, {rate:,.1f} {self.unit}/s{eta}",
                   self.stream)


class ProgressLines(keras.callbacks.Callback):
    """Every `every_seconds` of wall clock (and when the run stops): one plain line with the
    global step (of `max_steps`), the epoch's running loss, target tokens/s since the last line
    (of this process's replicas: in a multi-worker cluster, this worker's), the elapsed time
    and the ETA against `max_steps` or `max_minutes`, whichever ends first.
    At each evaluation (`schedule`, the one the dev evaluation follows): the logs (dev BLEU,
    the last epoch's loss and metrics, learning rate), each under its key or the console name
    `names` gives it (e.g. `dev_bleu` -> `dev greedy BLEU (200 sentences)`). Place it after
    the callbacks that add to the logs.
    """

    def __init__(self, max_steps: Optional[int], max_minutes: Optional[float],
                 token_metric: MaskedTokenAccuracy, schedule: Schedule,
                 every_seconds: float = 30.0, stream: Optional[TextIO] = None,
                 clock: Callable[[], float] = time.monotonic,
                 names: Optional[dict[str, str]] = None):
        super().__init__()
        self.names = names or {}
        self.schedule = schedule
        self.max_steps = max_steps
        self.max_seconds = None if max_minutes is None else 60.0 * max_minutes
        self.every_seconds = every_seconds
        self.stream = stream  # None: sys.stderr at the time of each line
        self.clock = clock
        # Epochs are short (a backup or evaluation interval), so lines span them, every
        # `every_seconds` of training (evaluations and backups between epochs left out).
        self.pace = TrainingPace(token_metric, clock)

    def on_train_begin(self, logs=None):
        self.schedule.start()
        self.pace.start(self.model)
        self._start = self.clock()
        self._first_step = self._last_step = self.schedule.steps.step
        self._last_line = self.pace.reading()

    def on_epoch_begin(self, epoch, logs=None):
        self.pace.epoch_begin()

    def on_train_batch_end(self, batch, logs=None):
        self.pace.batch_end()
        if self.pace.seconds() - self._last_line[1] >= self.every_seconds:
            self._report((logs or {}).get("loss"))

    def on_epoch_end(self, epoch, logs=None):
        self.pace.epoch_end()
        if not self.schedule.due(self.model):
            return
        step = self.schedule.steps.step
        values = ", ".join(f"{self.names.get(name, name)} {_number(value)}"
                           for name, value in (logs or {}).items())
        self._print(f"step {step}: {values}")

    def on_train_end(self, logs=None):
        if self.schedule.steps.step != self._last_step:
            self._report((logs or {}).get("loss"))

    def _report(self, loss) -> None:
        step = self.schedule.steps.step
        self._last_step = step
        rate = self.pace.rate(self._last_line)
        self._last_line = self.pace.reading()
        elapsed = self.clock() - self._start
        parts = [f"step {step}" + (f"/{self.max_steps} ({100 * step / self.max_steps:.0f}%)"
                                   if self.max_steps else "")]
        if loss is not None:
            parts.append(f"loss {float(loss):.4f}")
        parts += [f"{rate:,.0f} target tok/s", f"elapsed {duration(elapsed)}"]
        eta = self._eta(step, elapsed)
        if eta is not None:
            parts.append(f"ETA {duration(eta)}")
        self._print(", ".join(parts))

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
        print_line("kt-train", text, self.stream)


def _number(value) -> str:
    value = float(value)
    return f"{value:.4g}" if abs(value) < 1e4 else f"{value:,.0f}"
