"""Progress lines: ETA against the step budget or the time limit, whichever ends first."""
import io
from types import SimpleNamespace

import pytest
import tensorflow as tf

from keras_transformer.metrics import MaskedTokenAccuracy
from keras_transformer.training.callbacks import Schedule, StepClock
from keras_transformer.training.progress import ProgressLines, duration
from conftest import FakeClock


def started_progress(max_steps, max_minutes):
    """A started `ProgressLines` (every 30 s) on a fake clock, token count and step counter."""
    clock, stream = FakeClock(), io.StringIO()
    tokens = MaskedTokenAccuracy()
    steps = StepClock()
    progress = ProgressLines(max_steps, max_minutes, tokens, Schedule(steps, 1000),
                             every_seconds=30, stream=stream, clock=clock)
    progress.set_model(SimpleNamespace(distribute_strategy=tf.distribute.get_strategy(),
                                       stop_training=False))
    progress.on_train_begin()
    return progress, clock, stream, tokens, steps


@pytest.mark.parametrize("max_steps, max_minutes, expected_eta", [
    (1000, None, "ETA 15m00s"),      # 100 steps in 100 s: 900 steps left
    (None, 10.0, "ETA 8m20s"),       # 600 s allowed, 100 s gone
    (1000, 5.0, "ETA 3m20s"),        # the time limit comes first
    (None, None, None),              # unbounded: no ETA
])
def test_eta_follows_the_budget_that_ends_first(max_steps, max_minutes, expected_eta):
    progress, clock, stream, tokens, steps = started_progress(max_steps, max_minutes)
    steps.on_epoch_begin(0)
    progress.on_epoch_begin(0)
    for step in range(1, 101):
        clock.now = float(step)
        steps.on_train_batch_end(step - 1)
        tokens.count.assign_add(50.0)
        progress.on_train_batch_end(step - 1, {"loss": 2.5})
    lines = stream.getvalue().splitlines()
    assert len(lines) == 3  # at 30, 60 and 90 s
    assert "50 target tok/s" in lines[-1] and "elapsed 1m30s" in lines[-1]
    progress.on_train_end({"loss": 2.5})
    last = stream.getvalue().splitlines()[-1]
    assert last.startswith("kt-train: step 100")
    assert (expected_eta in last) if expected_eta else "ETA" not in last


def test_lines_span_epochs_shorter_than_their_interval():
    """Keras restarts the token count every epoch (a backup interval, often shorter than the
    line interval) and evaluations pause training between epochs: lines still come every 30 s
    of training, with the rate over the tokens of every epoch since the last line."""
    progress, clock, stream, tokens, steps = started_progress(None, None)
    for epoch in range(10):  # 10 steps of 1 s each, then a 100 s evaluation
        tokens.count.assign(0.0)
        steps.on_epoch_begin(epoch)
        progress.on_epoch_begin(epoch)
        for batch in range(10):
            clock.now += 1.0
            steps.on_train_batch_end(batch)
            tokens.count.assign_add(50.0)
            progress.on_train_batch_end(batch, {"loss": 2.5})
        progress.on_epoch_end(epoch)
        clock.now += 100.0
    lines = stream.getvalue().splitlines()
    assert [line.split(",")[0] for line in lines] == [
        "kt-train: step 30", "kt-train: step 60", "kt-train: step 90"]
    assert all("50 target tok/s" in line for line in lines)


def test_duration_reads_like_a_clock():
    assert [duration(s) for s in (5, 250, 3720)] == ["5s", "4m10s", "1h02m"]
