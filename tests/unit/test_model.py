"""Transformer model properties: causality, padding invariance, attention maps, saving."""
import numpy as np
import pytest

import keras
import tensorflow as tf

import keras_transformer as kt
from keras_transformer import fast
from keras_transformer.fast import packed
from helpers import VARIANTS, assert_equal_to_rounding, random_ids, tiny_model



@pytest.mark.parametrize("variant", VARIANTS)
def test_logits_shape(rng, variant):
    model = tiny_model(**VARIANTS[variant])
    logits = model((random_ids(rng, (2, 7)), random_ids(rng, (2, 5))), training=False)
    assert logits.shape == (2, 5, model.config.target_vocab_size)


PRECISIONS = pytest.mark.parametrize("precision", ["float32", "mixed_bfloat16"], indirect=True)
# bfloat16 cases of 2-4 s each: in the whole suite, float32 in the quick tier too.
PRECISIONS_BFLOAT16_SLOW = pytest.mark.parametrize(
    "precision", ["float32", pytest.param("mixed_bfloat16", marks=pytest.mark.slow)],
    indirect=True)


@PRECISIONS_BFLOAT16_SLOW
@pytest.mark.parametrize("variant", VARIANTS)
def test_causality(rng, precision, variant):
    """Target tokens after position t change no logit up to t, and change those after it.
    One call: row t + 1 is row 0 with new tokens after t (a batch's rows are computed apart)."""
    model = tiny_model(**VARIANTS[variant])
    source, target = random_ids(rng, (1, 6)), random_ids(rng, (1, 8))
    sources, targets = np.repeat(source, 8, axis=0), np.repeat(target, 8, axis=0)
    for t in range(7):
        targets[t + 1, t + 1:] = random_ids(rng, (8 - t - 1,))
    logits = np.asarray(model((sources, targets)))
    base = logits[0]
    for t in range(7):
        assert_equal_to_rounding(logits[t + 1, :t + 1], base[:t + 1], precision)
        assert not np.allclose(logits[t + 1, t + 1:], base[t + 1:])


@PRECISIONS
@pytest.mark.parametrize("variant", VARIANTS)
def test_padding_invariance(rng, precision, variant):
    model = tiny_model(**VARIANTS[variant])
    source, target = random_ids(rng, (1, 4)), random_ids(rng, (1, 3))
    alone = np.asarray(model((source, target)))
    batch_source = np.zeros((3, 9), "int32")
    batch_target = np.zeros((3, 7), "int32")
    batch_source[0, :4], batch_target[0, :3] = source[0], target[0]
    batch_source[1:], batch_target[1:] = random_ids(rng, (2, 9)), random_ids(rng, (2, 7))
    batched = np.asarray(model((batch_source, batch_target)))
    assert_equal_to_rounding(batched[0, :3], alone[0], precision)


def test_attention_probabilities_of_every_layer_and_head():
    model = tiny_model()
    source = np.array([[5, 6, 7, 3, 0, 0]], "int32")
    target = np.array([[2, 8, 9, 0]], "int32")
    maps = model.attention_probabilities(source, target)
    heads, layers = model.config.num_heads, model.config.num_layers
    expected_shapes = {"encoder_self": (1, heads, 6, 6), "decoder_self": (1, heads, 4, 4),
                       "encoder_decoder": (1, heads, 4, 6)}
    for kind, shape in expected_shapes.items():
        assert len(maps[kind]) == layers
        for weights in maps[kind]:
            weights = np.asarray(weights)
            assert weights.shape == shape
            np.testing.assert_allclose(weights.sum(-1), 1.0, rtol=1e-5)
    for weights in maps["encoder_self"] + maps["encoder_decoder"]:
        assert np.all(np.asarray(weights)[..., 4:] == 0.0)  # padded source keys
    for weights in maps["decoder_self"]:
        assert np.all(np.triu(np.asarray(weights)[0, 0], k=1) == 0.0)  # no look-ahead


def test_tied_embedding_is_one_matrix():
    model = tiny_model()
    names = [w.path for w in model.weights if "embedding" in w.path]
    assert len(names) == 1 and names[0].endswith("shared_embedding/embeddings")
    untied = tiny_model(**VARIANTS["pre_norm_learned_untied_uneven"])
    assert len([w for w in untied.weights if w.path.endswith("embeddings")]) == 2


@pytest.mark.parametrize("variant", VARIANTS)
def test_keras_save_load_gives_identical_outputs(rng, variant, tmp_path):
    model = tiny_model(**VARIANTS[variant])
    inputs = (random_ids(rng, (2, 6)), random_ids(rng, (2, 4)))
    path = tmp_path / "model.keras"
    model.save(path)
    restored = keras.saving.load_model(path)
    assert isinstance(restored, kt.Transformer) and restored.config == model.config
    np.testing.assert_array_equal(np.asarray(restored(inputs)), np.asarray(model(inputs)))


# The layers of each side of the models whose train and test steps the tests below trace
# (seconds a layer, more under XLA): what they check, every layer does alike (a compiled
# model's saving and restoring, the loss the steps report, where it reaches the weights).
STEP_LAYERS = 1


def compiled_core_model(recipe: kt.Recipe) -> kt.Transformer:
    """The core `Transformer` compiled as kt-train compiles its `FastTransformer` (its
    optimizer built before the first step, which is then traced once, not twice)."""
    model = kt.Transformer(recipe.architecture)
    model.compile(optimizer=kt.make_optimizer(recipe.architecture.d_model, recipe.training),
                  loss=kt.LabelSmoothedCrossEntropy(recipe.training.label_smoothing),
                  metrics=[kt.MaskedTokenAccuracy(), kt.Perplexity()])
    model.optimizer.build(model.trainable_variables)
    return model


def compiled_fast_model(recipe: kt.Recipe) -> kt.Transformer:
    """kt-train's model, compiled."""
    from keras_transformer.training.run import compiled_model

    return compiled_model(recipe)[0]


@pytest.mark.slow
@pytest.mark.parametrize("compiled", [compiled_core_model, compiled_fast_model])
def test_a_saved_compiled_model_reloads_compiled_and_trains_on(rng, compiled, tmp_path):
    recipe = kt.Recipe.preset("tiny", vocab_size=60, dropout=0.0, warmup_steps=10,
                              num_layers=STEP_LAYERS)
    model = compiled(recipe)
    batch = ((random_ids(rng, (4, 6)), random_ids(rng, (4, 5))), random_ids(rng, (4, 5)))
    model.fit(*batch, epochs=1, verbose=0)
    path = tmp_path / "model.keras"
    model.save(path)
    restored = keras.models.load_model(path)
    assert type(restored) is type(model) and restored.compiled
    assert restored.get_compile_config() == model.get_compile_config()
    assert isinstance(restored.loss, kt.LabelSmoothedCrossEntropy)
    schedule = kt.TransformerSchedule(recipe.architecture.d_model, warmup_steps=10)
    assert int(restored.optimizer.iterations) == 1
    assert float(restored.optimizer.learning_rate) == pytest.approx(float(schedule(1)))
    for saved, loaded in zip(model.optimizer.variables, restored.optimizer.variables):
        np.testing.assert_array_equal(loaded.numpy(), saved.numpy())
    expected = {name: values[0] for name, values in
                model.fit(*batch, epochs=1, verbose=0).history.items()}
    logs = {name: values[0] for name, values in
            restored.fit(*batch, epochs=1, verbose=0).history.items()}
    assert logs == pytest.approx(expected) and set(logs) == {"loss", "token_accuracy",
                                                             "perplexity"}
    assert int(restored.optimizer.iterations) == 2
    assert float(restored.optimizer.learning_rate) == pytest.approx(float(schedule(2)))
    # Adam moves a weight by about the learning rate whatever the gradient's size, so a wrong
    # moment would move most weights by about that much. Rounding (another order of summation
    # in a gradient) moves the ratio m/sqrt(v) far less, but by more where a gradient element is
    # the near-cancelling sum of large terms (measured: one element in 16,384 by 2.3e-3 of it).
    rate = float(schedule(2))
    for saved, loaded in zip(model.weights, restored.weights):
        difference = np.abs(loaded.numpy() - saved.numpy())
        assert difference.max() < 0.1 * rate, saved.path
        assert np.mean(difference > 1e-3 * rate) < 0.01, saved.path


def test_get_config_from_config_round_trip(rng):
    model = tiny_model(norm="pre")
    clone = kt.Transformer.from_config(model.get_config())
    clone.set_weights(model.get_weights())
    inputs = (random_ids(rng, (2, 6)), random_ids(rng, (2, 4)))
    np.testing.assert_array_equal(np.asarray(clone(inputs)), np.asarray(model(inputs)))


def test_dropout_only_in_training(rng):
    model = kt.Transformer(kt.TransformerConfig.preset("tiny", vocab_size=60, dropout=0.3))
    inputs = (random_ids(rng, (2, 6)), random_ids(rng, (2, 4)))
    np.testing.assert_array_equal(model(inputs, training=False), model(inputs, training=False))
    assert not np.allclose(model(inputs, training=True), model(inputs, training=False))


@PRECISIONS
@pytest.mark.parametrize("variant", VARIANTS)
def test_decode_step_matches_teacher_forced_decoder(rng, precision, variant):
    """A step's log-probabilities are the teacher-forced decoder's log-softmax, PAD and BOS
    left out (-inf)."""
    model = tiny_model(**VARIANTS[variant])
    source = np.array([[5, 6, 7, 3, 0], [8, 9, 10, 11, 3]], "int32")
    target = random_ids(rng, (2, 6))
    full = tf.nn.log_softmax(model((source, target))).numpy()
    constants, cache = model.init_decoding(model.encode(source), source != 0,
                                           rows_per_sentence=1, cache_length=8)
    emitted = np.ones(full.shape[-1], bool)
    emitted[[kt.PAD_ID, kt.BOS_ID]] = False
    for step in range(6):
        log_probs, cache = model.decode_step(target[:, step:step + 1], step, cache, constants)
        log_probs = np.asarray(log_probs[:, 0])
        assert np.all(log_probs[:, ~emitted] == -np.inf)
        assert_equal_to_rounding(log_probs[:, emitted], full[:, step, emitted], precision)


def test_logits_at_positions_equal_the_full_logits_there(rng):
    model = tiny_model()
    source, target = random_ids(rng, (3, 6)), random_ids(rng, (3, 5))
    positions = np.array([[0, 0], [0, 4], [2, 1], [1, 3]], dtype=np.int64)
    full = model((source, target)).numpy()
    at_positions = model((source, target), **packed.call_arguments(
        model, (source, target), positions)).logits.numpy()
    np.testing.assert_allclose(at_positions, full[positions[:, 0], positions[:, 1]], atol=1e-5)


@PRECISIONS_BFLOAT16_SLOW
@pytest.mark.parametrize("variant", VARIANTS)
def test_packed_layers_equal_padded_layers_in_value_and_gradient(rng, precision, variant):
    """The fast path's packed forward pass runs the layers on real tokens only (`TokenLayout`):
    its logits and weight gradients are those of the core model's padded computation."""
    model = tiny_model(**VARIANTS[variant])
    source, target = random_ids(rng, (3, 7)), random_ids(rng, (3, 6))
    source[0, 4:] = source[2, 6:] = target[0, 3:] = target[1, 5:] = kt.PAD_ID
    positions = np.argwhere(target != kt.PAD_ID)
    projection = rng.normal(size=(len(positions), model.config.target_vocab_size))

    def logits_and_gradients(forward, pick):
        with tf.GradientTape() as tape:
            logits = pick(forward((source, target), training=False))
            loss = tf.reduce_sum(logits * projection.astype("float32"))
        return logits.numpy(), tape.gradient(loss, model.trainable_variables)

    def packed_model(inputs, training=False):
        return model(inputs, training=training,
                     **packed.call_arguments(model, inputs, positions)).logits

    padded = logits_and_gradients(model, lambda x: tf.gather_nd(x, positions))
    on_tokens = logits_and_gradients(packed_model, lambda x: x)
    assert_equal_to_rounding(on_tokens[0], padded[0], precision)
    gradients = [[tf.convert_to_tensor(g).numpy() for g in run[1]] for run in (on_tokens, padded)]
    largest = max(float(np.abs(g).max()) for g in gradients[1])
    for variable, packed_gradient, padded_gradient in zip(model.trainable_variables, *gradients):
        # A key's bias adds one constant to a query's every score, which softmax drops: its
        # gradient is zero in exact arithmetic, rounding of the model's largest terms alone.
        scale = largest if variable.path.endswith("key/bias") else None
        assert_equal_to_rounding(packed_gradient, padded_gradient, precision, scale)
    graph = tf.function(packed_model).get_concrete_function(
        (tf.TensorSpec([None, None], tf.int32), tf.TensorSpec([None, None], tf.int32))).graph
    assert "Cumsum" in {op.type for op in graph.get_operations()}  # the TokenLayout ran


@pytest.mark.slow
def test_fit_rejects_labels_at_padded_target_inputs(rng):
    """The packed decoder computes nothing at padding, so a label there is an error, not a
    silently meaningless logit."""
    from keras_transformer.training.run import compiled_model

    with fast.implementation_scope("fast"):
        model, _ = compiled_model(kt.Recipe.preset("tiny", vocab_size=60, num_layers=STEP_LAYERS))
        source, target_in = random_ids(rng, (2, 6)), random_ids(rng, (2, 5))
        target_out = random_ids(rng, (2, 5))
        target_in[1, 3:] = kt.PAD_ID
        with pytest.raises(tf.errors.InvalidArgumentError, match="target input is padding"):
            model.fit((source, target_in), target_out, epochs=1, verbose=0)


@pytest.mark.slow
@pytest.mark.parametrize("jit_compile", [False, True])
def test_fit_and_evaluate_score_only_real_target_tokens(rng, jit_compile):
    """train/test steps project only the real target positions (all of them under XLA); the
    loss they report equals the loss of the full `[batch, len, vocab]` logits, padding masked."""
    from keras_transformer.training.run import compiled_model

    model, _ = compiled_model(kt.Recipe.preset("tiny", vocab_size=60, dropout=0.0,
                                               num_layers=STEP_LAYERS), jit_compile=jit_compile)
    source, target_in, target_out = (random_ids(rng, (4, 6)), random_ids(rng, (4, 5)),
                                     random_ids(rng, (4, 5)))
    target_in[1:, 3:] = target_out[1:, 3:] = kt.PAD_ID
    expected = kt.LabelSmoothedCrossEntropy(kt.TrainingSettings().label_smoothing)(
        target_out, model((source, target_in)))
    logs = model.evaluate((source, target_in), target_out, verbose=0, return_dict=True)
    assert logs["loss"] == pytest.approx(float(expected), rel=1e-5)
    history = model.fit((source, target_in), target_out, epochs=1, verbose=0)
    assert history.history["loss"][0] == pytest.approx(float(expected), rel=1e-5)


@pytest.mark.slow
@pytest.mark.parametrize("variant", VARIANTS)
def test_training_differentiates_the_loss_through_the_logit_factors(rng, variant):
    """With fast kernels the train step's loss reaches the weights through `hidden @ kernel`
    (tied or not) and only the real target tokens, with no one-hot over `[tokens, vocab]`; the
    gradients are those of the core model's padded, autodiff loss with the reference kernels
    (with an output bias too, whose loss goes through the packed logits instead)."""
    from keras_transformer.training.run import compiled_model

    # One layer a side, but the uneven variant's own depths (3 and 1).
    model, _ = compiled_model(kt.Recipe.preset("tiny", vocab_size=60, dropout=0.0,
                                               **{"num_layers": STEP_LAYERS, **VARIANTS[variant]}))
    source, target_in, target_out = (random_ids(rng, (3, 6)), random_ids(rng, (3, 5)),
                                     random_ids(rng, (3, 5)))
    target_in[1:, 3:] = target_out[1:, 3:] = kt.PAD_ID
    data = (tf.constant(source), tf.constant(target_in)), tf.constant(target_out)

    def traced_gradients(implementation):
        @tf.function
        def gradients(data):
            with tf.GradientTape() as tape:
                if implementation == "fast":
                    x, y, weights, positions = model._at_target_tokens(data)
                    factors = model(x, training=True,
                                    **packed.call_arguments(model, x, positions))
                    value = model._loss(x, y, factors.logits, factors, weights,
                                        training=True)
                else:
                    x, y = data
                    value = model.compute_loss(x=x, y=y, y_pred=model(x, training=True))
            return tape.gradient(value, model.trainable_variables)

        with fast.implementation_scope(implementation):
            return gradients(data), gradients.get_concrete_function(data).graph

    ours, fast_graph = traced_gradients("fast")
    reference, reference_graph = traced_gradients("reference")
    with fast.implementation_scope("fast"):
        step_graph = tf.function(model.train_step).get_concrete_function(data).graph
    # An output bias is a term the factors do not carry: that loss runs on the logits.
    through_factors = model.output_bias is None
    assert ("OneHot" not in {op.type for op in step_graph.get_operations()}) == through_factors
    for got, want in zip(ours, reference):
        np.testing.assert_allclose(tf.convert_to_tensor(got).numpy(),
                                   tf.convert_to_tensor(want).numpy(), rtol=1e-4, atol=1e-6)
    assert "Cumsum" in {op.type for op in fast_graph.get_operations()}  # TokenLayout ran
    assert "Cumsum" not in {op.type for op in reference_graph.get_operations()}


@pytest.mark.parametrize("tied_rows", [False, True])
def test_output_bias_and_embedding_norm_follow_their_formulas(rng, tied_rows):
    """Logits `h E^T + b` at every position and in the decoding step (also of a shortlist's
    columns; E transposed once or read as stored), and the embedding layer norm's output
    `LN(E[ids] sqrt(d) + PE)`."""
    model = tiny_model(output_bias=True, embedding_norm=True)
    source, target = random_ids(rng, (2, 5)), random_ids(rng, (2, 4))
    hidden = model.decoder_layers[-1](
        model.embed(target, "target", False), model.encode(source),
        self_mask=kt.model.causal_mask(target),
        cross_mask=np.ones((2, 1, 5), bool))
    table, bias = np.asarray(model.target_embedding.embeddings), np.asarray(model.output_bias)
    np.testing.assert_allclose(model.output_logits(hidden), np.asarray(hidden) @ table.T + bias,
                               rtol=1e-5, atol=1e-5)
    shortlist = np.array([3, 7, 11], "int32")
    projection = model.pre_softmax_projection(shortlist, rows_as_stored=tied_rows)
    assert projection.transposed == tied_rows
    d_model = model.config.d_model
    assert projection.matrix.shape == ((3, d_model) if tied_rows else (d_model, 3))
    step_logits = model.output_logits(hidden[:, :1], projection)
    np.testing.assert_allclose(step_logits, np.asarray(model.output_logits(hidden[:, :1]))[
        ..., shortlist], rtol=1e-5, atol=1e-5)
    embedded = table[target] * np.sqrt(model.config.d_model) + np.asarray(
        model.target_positions(np.zeros((1, 4, model.config.d_model), "float32")))
    normalized = (embedded - embedded.mean(-1, keepdims=True)) / np.sqrt(
        embedded.var(-1, keepdims=True) + model.config.layer_norm_epsilon)
    np.testing.assert_allclose(model.embed(target, "target", False), normalized, rtol=1e-4,
                               atol=1e-4)
