"""Bucketed batches keep the number of train-step traces bounded over a long run."""
import pytest

import keras_transformer as kt
from keras_transformer.data import make_training_dataset
from keras_transformer.training.run import compiled_model


@pytest.mark.slow
def test_train_step_traces_stay_bounded_over_many_bucket_shapes(demo_train, demo_tokenizer):
    recipe = kt.Recipe.preset("tiny", vocab_size=demo_tokenizer.vocab_size, batch_tokens=512)
    sources, targets = (side[:3000] for side in demo_train)
    batches = make_training_dataset(sources, targets, demo_tokenizer, recipe.training.batch_tokens,
                                    recipe.architecture.max_length, seed=0)
    shapes = [tuple(source.shape) for (source, _), _ in batches]
    assert len(set(shapes)) >= 5, shapes  # Otherwise the test proves nothing.
    model, _ = compiled_model(recipe)
    traces = []
    train_step = model.train_step
    model.train_step = lambda data: traces.append(1) or train_step(data)
    # Two passes' worth of steps from the repeated stream: Keras warns when a dataset of
    # unknown length runs out, and about `shuffle` for any dataset.
    model.fit(batches.repeat(), epochs=2, steps_per_epoch=len(shapes), shuffle=False, verbose=0)
    # The first call traces twice (it creates the optimizer's variables); reduce_retracing
    # then generalizes the shapes instead of compiling one graph per batch shape.
    assert len(traces) <= 3, f"{len(traces)} traces for {len(set(shapes))} batch shapes"
