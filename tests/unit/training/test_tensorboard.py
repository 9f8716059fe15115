"""TensorBoard scalars: a training curve every `--log-every-steps` steps beside the
evaluations' figures, each tag written once per step, throughput over training time only."""
from types import SimpleNamespace

import pytest
import tensorflow as tf

from keras_transformer.metrics import MaskedTokenAccuracy
from keras_transformer.training.callbacks import Schedule, StepClock, TensorBoardScalars
from helpers import FakeClock


def scalars(log_dir) -> dict[str, list[tuple[int, float]]]:
    """Tag -> [(step, value)] of the event files under `log_dir`."""
    found: dict[str, list[tuple[int, float]]] = {}
    for path in sorted(log_dir.rglob("events.out.tfevents.*")):
        for event in tf.compat.v1.train.summary_iterator(str(path)):
            for value in event.summary.value:
                found.setdefault(value.tag, []).append(
                    (event.step, float(tf.make_ndarray(value.tensor))))
    return found


def run_epochs(tmp_path, every_steps: int) -> dict[str, list[tuple[int, float]]]:
    """Six epochs of 20 one-second steps of 50 target tokens each, 100 s of evaluation or
    backup between epochs, an evaluation every 100 steps."""
    clock, steps, tokens = FakeClock(), StepClock(), MaskedTokenAccuracy()
    writer = tf.summary.create_file_writer(str(tmp_path))
    callback = TensorBoardScalars(writer, tokens, Schedule(steps, 100, clock=clock), every_steps,
                                  clock=clock)
    callback.set_model(SimpleNamespace(
        distribute_strategy=tf.distribute.get_strategy(), stop_training=False,
        optimizer=SimpleNamespace(learning_rate=tf.constant(0.001))))
    callback.on_train_begin()
    for epoch in range(6):
        tokens.count.assign(0.0)  # Keras resets the metrics with each epoch
        steps.on_epoch_begin(epoch)
        callback.on_epoch_begin(epoch)
        for batch in range(20):
            clock.now += 1.0
            tokens.count.assign_add(50.0)
            steps.on_train_batch_end(batch)
            callback.on_train_batch_end(batch, {"loss": 3.0 - 0.01 * steps.step})
        callback.on_epoch_end(epoch, {"loss": 3.0 - 0.01 * steps.step, "dev_bleu": 7.5})
        clock.now += 100.0
    writer.close()
    return scalars(tmp_path)


def test_training_scalars_every_n_steps_beside_the_evaluations(tmp_path):
    found = run_epochs(tmp_path, every_steps=50)
    for tag in ("loss", "learning_rate", "tokens_per_second"):
        assert [step for step, _ in found[tag]] == [50, 100], tag  # once per step
    assert found["loss"] == [(50, pytest.approx(2.5)), (100, pytest.approx(2.0))]
    assert found["tokens_per_second"] == [(50, pytest.approx(50.0)), (100, pytest.approx(50.0))]
    assert found["dev_bleu"] == [(100, 7.5)]


def test_no_training_curve_at_zero_steps(tmp_path):
    found = run_epochs(tmp_path, every_steps=0)
    assert [step for step, _ in found["loss"]] == [100]
    assert found["tokens_per_second"] == [(100, pytest.approx(50.0))]  # the epoch's
    with pytest.raises(ValueError, match="--log-every-steps"):
        TensorBoardScalars(None, MaskedTokenAccuracy(), Schedule(StepClock(), 1), -1)
