"""The step and time limits of a run: alone, a process stops after the batch its clock runs
out at; in a cluster, every worker stops at the epoch end where any worker's clock ran out."""
from types import SimpleNamespace

import pytest

from keras_transformer.training.callbacks import Schedule, StepClock, StopAtLimit
from helpers import FakeClock


def started_limit(max_steps, max_minutes, any_worker=None):
    clock, steps = FakeClock(), StepClock()
    limit = StopAtLimit(steps, max_steps, max_minutes, any_worker, clock=clock)
    model = SimpleNamespace(stop_training=False)
    limit.set_model(model)
    limit.on_train_begin()
    return limit, clock, steps, model


def run_batches(limit, clock, steps, model, count, seconds_each):
    """An epoch of batches of `seconds_each`; returns the step after which training stopped
    (or None)."""
    steps.on_epoch_begin(0)
    for batch in range(count):
        clock.now += seconds_each
        steps.on_train_batch_end(batch)
        limit.on_train_batch_end(batch)
        if model.stop_training:
            return steps.step
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
                        and steps.step >= others_out_from_step)

    limit, clock, steps, model = started_limit(None, own_minutes, any_worker)
    for epoch in range(5):  # epochs of 4 one-second batches
        assert run_batches(limit, clock, steps, model, 4, 1.0) is None
        limit.on_epoch_end(epoch)
        if model.stop_training:
            break
    assert steps.step == 8 and asked == answers


def test_a_schedule_is_due_by_steps_by_time_and_at_the_stop():
    """Due at the epoch ends that cross a multiple of its steps, or that come its minutes after
    the last time it was due (in a cluster: when any worker's minutes are up), and at the
    stop; callbacks sharing one get one answer per step."""
    clock, steps = FakeClock(), StepClock()
    model = SimpleNamespace(stop_training=False)
    asked = []

    def any_worker(flag: bool) -> bool:  # stands for the collective: another worker's is up
        asked.append(flag)
        return flag or steps.step == 8

    schedule = Schedule(steps, every_steps=16, every_minutes=1.0, any_worker=any_worker,
                        clock=clock)
    schedule.start()
    due = []
    for epoch in range(9):  # epochs of 4 batches of 5 s
        steps.on_epoch_begin(epoch)
        for batch in range(4):
            clock.now += 5.0
            steps.on_train_batch_end(batch)
        model.stop_training = epoch == 8
        due.append(schedule.due(model))
        assert schedule.due(model) == due[-1]  # a second caller, same answer
    # Step 8: another worker's minute is up; 16 and 32: by steps; 28: this worker's minute
    # since step 16 (t = 80 s -> 140 s); 36: the stop.
    assert [4 * (index + 1) for index, answer in enumerate(due) if answer] == [8, 16, 28, 32,
                                                                                36]
    assert asked == [False, False, False, False, False, False, True, False, False]
