"""The step and time limits of a run: alone, a process stops after the batch its clock runs
out at; in a cluster, every worker stops at the epoch end where any worker's clock ran out."""
from types import SimpleNamespace

import pytest
import tensorflow as tf

from keras_transformer.training.callbacks import StopAtLimit
from conftest import FakeClock


def started_limit(max_steps, max_minutes, any_worker=None):
    clock = FakeClock()
    limit = StopAtLimit(max_steps, max_minutes, any_worker, clock=clock)
    iterations = tf.Variable(0, dtype=tf.int64)
    model = SimpleNamespace(optimizer=SimpleNamespace(iterations=iterations), stop_training=False)
    limit.set_model(model)
    limit.on_train_begin()
    return limit, clock, iterations, model


def run_batches(limit, clock, iterations, model, count, seconds_each):
    """Batches of `seconds_each`; returns the step after which training stopped (or None)."""
    for _ in range(count):
        clock.now += seconds_each
        iterations.assign_add(1)
        limit.on_train_batch_end(0)
        if model.stop_training:
            return int(iterations.numpy())
    return None


def test_a_lone_process_stops_after_its_step_budget_or_at_its_time_limit():
    assert run_batches(*started_limit(7, None), count=20, seconds_each=1.0) == 7
    assert run_batches(*started_limit(None, 0.1), count=20, seconds_each=1.0) == 6
    assert run_batches(*started_limit(50, 0.1), count=20, seconds_each=1.0) == 6


@pytest.mark.parametrize("own_minutes, others_out_from_step, answers", [
    (10.0, 8, [False, False]),  # another worker's clock runs out
    (0.1, None, [False, True]),  # this worker's runs out at step 6, mid-epoch
])
def test_workers_stop_together_at_the_epoch_end_where_any_ran_out_of_time(
        own_minutes, others_out_from_step, answers):
    asked = []

    def any_worker(flag: bool) -> bool:  # stands for the collective over the cluster
        asked.append(flag)
        return flag or (others_out_from_step is not None
                        and int(iterations.numpy()) >= others_out_from_step)

    limit, clock, iterations, model = started_limit(None, own_minutes, any_worker)
    for epoch in range(5):  # epochs of 4 one-second batches
        assert run_batches(limit, clock, iterations, model, 4, 1.0) is None
        limit.on_epoch_end(epoch)
        if model.stop_training:
            break
    assert int(iterations.numpy()) == 8 and asked == answers
