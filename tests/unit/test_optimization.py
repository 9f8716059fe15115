"""The learning-rate schedule of eq. (3) and the optimizer factory."""
import keras
import numpy as np
import pytest

import keras_transformer as kt


def paper_rate(step, d_model=512, warmup=4000):
    return d_model ** -0.5 * min(step ** -0.5, step * warmup ** -1.5)


@pytest.mark.parametrize("step", [1, 10, 1000, 3999, 4000, 4001, 10000, 100000])
def test_schedule_equals_equation_3(step):
    schedule = kt.TransformerSchedule(512, warmup_steps=4000)
    # Keras passes the optimizer's iteration count, which starts at 0 for the paper's step 1.
    assert float(schedule(step - 1)) == pytest.approx(paper_rate(step), rel=1e-5)


def test_schedule_peaks_at_warmup_and_scales():
    schedule = kt.TransformerSchedule(256, warmup_steps=100, scale=2.0)
    rates = np.array([float(schedule(i)) for i in range(400)])
    assert int(np.argmax(rates)) + 1 == 100
    assert rates.max() == pytest.approx(2.0 * paper_rate(100, 256, 100), rel=1e-5)


def test_schedule_serializes():
    schedule = kt.TransformerSchedule(512, warmup_steps=123, scale=0.5)
    restored = keras.saving.deserialize_keras_object(keras.saving.serialize_keras_object(schedule))
    assert float(restored(50)) == pytest.approx(float(schedule(50)))


def test_optimizer_uses_paper_adam_settings():
    optimizer = kt.make_optimizer(64, kt.Recipe.preset("tiny").training)
    assert (optimizer.beta_1, optimizer.beta_2, optimizer.epsilon) == (0.9, 0.98, 1e-9)
    assert isinstance(optimizer._learning_rate, kt.TransformerSchedule)


def test_invalid_warmup_is_named():
    with pytest.raises(ValueError, match="warmup_steps"):
        kt.TransformerSchedule(512, warmup_steps=0)
