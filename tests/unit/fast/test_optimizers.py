"""FusedAdam: the same updates as keras.optimizers.Adam through TensorFlow's fused kernel."""
import textwrap

import keras
import numpy as np
import pytest
import tensorflow as tf

import keras_transformer as kt
from keras_transformer.fast import implementation_scope
from keras_transformer.fast.optimizers import FusedAdam
from helpers import run_script_json

SHAPES = [(50, 8), (8, 16), (16,), (3, 4, 5)]


def run_steps(optimizer, densify: bool = False, steps: int = 6):
    """Variables and slots after `steps` updates with seeded gradients. The first variable's
    gradient is an IndexedSlices with a repeated row, as an embedding lookup gives; `densify`
    converts it to the dense gradient it stands for."""
    rng = np.random.default_rng(0)
    variables = [keras.Variable(rng.normal(size=shape).astype("float32")) for shape in SHAPES]
    optimizer.build(variables)

    @tf.function
    def apply(grads):
        optimizer.apply(grads, variables)

    for _ in range(steps):
        grads = [tf.constant(rng.normal(size=shape).astype("float32")) for shape in SHAPES]
        rows = tf.constant([1, 7, 7, 30])
        grads[0] = tf.IndexedSlices(tf.gather(grads[0], rows), rows, tf.constant(SHAPES[0]))
        if densify:
            grads[0] = tf.convert_to_tensor(grads[0])
        apply(grads)
    return ([v.numpy() for v in variables],
            [v.numpy() for v in optimizer._momentums + optimizer._velocities])


def test_fused_adam_matches_keras_adam_with_the_paper_schedule():
    settings = dict(beta_1=0.9, beta_2=0.98, epsilon=1e-9)
    schedule = lambda: kt.TransformerSchedule(16, warmup_steps=3, scale=50.0)  # noqa: E731
    fused, fused_slots = run_steps(FusedAdam(schedule(), **settings))
    # Keras's Adam squares the slices of a sparse gradient before adding up repeated rows; the
    # update Adam defines (and FusedAdam makes) uses the summed gradient.
    reference, reference_slots = run_steps(keras.optimizers.Adam(schedule(), **settings),
                                           densify=True)
    rng = np.random.default_rng(0)
    initial = [rng.normal(size=shape).astype("float32") for shape in SHAPES]
    for got, want, start in zip(fused, reference, initial):
        assert np.abs(want - start).max() > 1e-2  # the steps moved every variable
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    for got, want in zip(fused_slots, reference_slots):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-7)


def test_fused_adam_runs_one_kernel_per_variable_and_shares_the_scalars():
    optimizer = FusedAdam(1e-3)
    variables = [keras.Variable(np.ones(shape, "float32")) for shape in SHAPES]
    optimizer.build(variables)
    graph = tf.function(lambda grads: optimizer.apply(grads, variables)).get_concrete_function(
        [tf.TensorSpec(shape, tf.float32) for shape in SHAPES]).graph
    op_types = [op.type for op in graph.get_operations()]
    assert op_types.count("ResourceApplyAdam") == len(SHAPES)
    assert op_types.count("Pow") == 2  # beta_1^t and beta_2^t, once per step


def test_fused_adam_serializes_and_refuses_amsgrad():
    optimizer = FusedAdam(kt.TransformerSchedule(512, 4000), beta_1=0.9, beta_2=0.98,
                          epsilon=1e-9, clipnorm=1.0)
    restored = keras.saving.deserialize_keras_object(keras.saving.serialize_keras_object(optimizer))
    assert type(restored) is FusedAdam
    assert (restored.beta_2, restored.epsilon, restored.clipnorm) == (0.98, 1e-9, 1.0)
    with implementation_scope("fast"):
        assert isinstance(kt.make_optimizer(64), FusedAdam)
    with implementation_scope("reference"):
        optimizer = kt.make_optimizer(64)
        assert type(optimizer) is keras.optimizers.Adam
    with pytest.raises(ValueError, match="amsgrad"):
        FusedAdam(1e-3, amsgrad=True)


MIRRORED_SCRIPT = textwrap.dedent("""
    import json
    import numpy as np
    from keras_transformer.training.strategy import make_strategy
    strategy = make_strategy(cpu_replicas=2)
    import keras, tensorflow as tf
    from keras_transformer.fast.optimizers import FusedAdam

    def replica_values(optimizer_class):
        rng = np.random.default_rng(0)
        with strategy.scope():
            variable = keras.Variable(rng.normal(size=(6, 4)).astype("float32"))
            optimizer = optimizer_class(0.1, beta_1=0.9, beta_2=0.98, epsilon=1e-9)
            optimizer.build([variable])

        @tf.function
        def step(direction):
            def replica_step():  # each replica's gradient is `direction`; they add up
                with tf.GradientTape() as tape:
                    loss = tf.reduce_sum(variable * direction)
                optimizer.apply(tape.gradient(loss, [variable]), [variable])
            strategy.run(replica_step)

        for _ in range(3):
            step(tf.constant(rng.normal(size=(6, 4)).astype("float32")))
        return [component.numpy().tolist()
                for component in strategy.experimental_local_results(variable.value)]

    print(json.dumps({"fused": replica_values(FusedAdam),
                      "keras": replica_values(keras.optimizers.Adam)}))
""")


@pytest.mark.slow
def test_fused_adam_updates_every_mirrored_replica_like_keras_adam(warm):
    result = run_script_json(MIRRORED_SCRIPT, warm)
    fused, reference = np.array(result["fused"]), np.array(result["keras"])
    assert fused.shape == reference.shape == (2, 6, 4)
    np.testing.assert_allclose(fused[0], fused[1])  # both replicas got the update
    np.testing.assert_allclose(fused, reference, rtol=1e-5, atol=1e-6)
