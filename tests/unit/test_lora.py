"""Keras's LoRA and int8 APIs on the Transformer's projections: `Transformer.enable_lora`
(adapters trained, everything else frozen), `merge_lora` (a plain model computing the same),
saving and loading either, and `model.quantize("int8")`."""
import warnings

import keras
import numpy as np
import pytest
import tensorflow as tf

import keras_transformer as kt
from keras_transformer import compat, fast
from keras_transformer.decoding.transformer_search import beam_search
from keras_transformer.layers import HeadsDense
from keras_transformer.training.checkpoints import save_checkpoint
from keras_transformer.training.run_dir import RunDir
from helpers import VARIANTS, random_ids, tiny_model
from trainers import average_checkpoints



# int8 quantization follows Keras's QuantizationConfig API, which older Keras releases lack.
QUANTIZATION_API = pytest.mark.skipif(
    not hasattr(keras.quantizers, "QuantizationConfig"),
    reason="this Keras has no keras.quantizers.QuantizationConfig")


def lora_model(rank: int = 2, model_class=kt.Transformer, **overrides) -> kt.Transformer:
    """A one-layer tiny model with LoRA adapters of `rank` whose product is not zero (as after
    some training), so that they change the outputs."""
    config = kt.TransformerConfig.preset("tiny", vocab_size=60, dropout=0.0, num_layers=1,
                                         **overrides)
    model = model_class(config, lora_rank=rank, lora_alpha=2 * rank)
    generator = np.random.default_rng(0)
    for dense in model.projections():
        dense.lora_kernel_b.assign(generator.normal(scale=0.1, size=dense.lora_kernel_b.shape))
    return model


def adapters(model: kt.Transformer) -> list:
    return [weight for dense in model.projections()
            for weight in (dense.lora_kernel_a, dense.lora_kernel_b)]


def test_enable_lora_freezes_all_but_the_adapters_of_every_projection():
    model = tiny_model(attention_bias=True, output_bias=True)
    plain_weights = len(model.weights)
    model.enable_lora(4)
    # Per layer: 4 attention projections (8 in a decoder layer) and 2 feed-forward maps.
    assert len(model.projections()) == 2 * 6 + 2 * 10
    assert sorted(id(weight) for weight in model.trainable_weights) == sorted(
        id(weight) for weight in adapters(model))
    assert len(model.weights) == plain_weights + 2 * len(model.projections())
    query = model.encoder_layers[0].self_attention.query_dense
    assert query.lora_kernel_a.shape == (64, 4) and query.lora_kernel_b.shape == (4, 64)
    assert model.get_config()["lora_rank"] == 4 and model.get_config()["lora_alpha"] == 4
    with pytest.raises(ValueError, match="already enabled"):
        model.enable_lora(2)


@pytest.mark.slow
def test_fit_changes_only_the_adapters(rng):
    """A few training steps (kt-train's model and loss) move every adapter and nothing else."""
    recipe = kt.Recipe.preset("tiny", vocab_size=60, dropout=0.1, warmup_steps=1,
                              num_layers=1)
    model = fast.FastTransformer(recipe.architecture, lora_rank=2)
    model.compile(optimizer=kt.make_optimizer(recipe.architecture.d_model, recipe.training),
                  loss=kt.LabelSmoothedCrossEntropy(recipe.training.label_smoothing))
    frozen = {weight.path: weight.numpy() for weight in model.weights
              if all(weight is not adapter for adapter in adapters(model))}
    before = [adapter.numpy() for adapter in adapters(model)]
    model.fit((random_ids(rng, (8, 6)), random_ids(rng, (8, 5))), random_ids(rng, (8, 5)),
              batch_size=4, epochs=2, verbose=0)
    for weight in model.weights:
        if weight.path in frozen:
            np.testing.assert_array_equal(weight.numpy(), frozen[weight.path], err_msg=weight.path)
    assert len(frozen) == len(model.weights) - len(before) > 30
    for adapter, start in zip(adapters(model), before):
        assert np.abs(adapter.numpy() - start).max() > 0, adapter.path


@pytest.mark.parametrize("variant", VARIANTS)
def test_the_merged_model_computes_what_the_lora_model_computes(rng, variant):
    """The same logits from a plain model (plain kernels only, every weight trainable); the
    LoRA model is left as it was."""
    model = lora_model(**VARIANTS[variant])
    merged = model.merge_lora()
    assert type(merged) is type(model) and "lora_rank" not in merged.get_config()
    assert len(merged.weights) == len(model.weights) - len(adapters(model))
    assert len(merged.trainable_weights) == len(merged.weights)
    assert model.lora_rank == 2 and len(model.trainable_weights) == len(adapters(model))
    inputs = (random_ids(rng, (2, 6)), random_ids(rng, (2, 5)))
    logits = np.asarray(model(inputs))
    np.testing.assert_allclose(np.asarray(merged(inputs)), logits, rtol=1e-6, atol=1e-6)
    plain = kt.Transformer(model.config)
    plain.set_weights(merged.get_weights())
    np.testing.assert_allclose(np.asarray(plain(inputs)), logits, rtol=1e-6, atol=1e-6)
    plain.set_weights([weight.numpy() for weight in model.weights
                       if all(weight is not adapter for adapter in adapters(model))])
    assert not np.allclose(np.asarray(plain(inputs)), logits)  # the adapters do change them


def test_the_merged_model_translates_as_the_lora_model(rng):
    """Beam search with the cached step (which reads the projections' `matrix()`) and without
    (which calls the layers) finds the same translations in both models."""
    model = lora_model(rank=4)
    merged = model.merge_lora()
    source_ids = random_ids(rng, (3, 6))
    for use_cache in (True, False):
        expected, got = (beam_search(m, source_ids, beam_size=2, max_decode_extra=4,
                                     use_cache=use_cache) for m in (model, merged))
        np.testing.assert_array_equal(got.ids.numpy(), expected.ids.numpy())
        np.testing.assert_allclose(got.scores.numpy(), expected.scores.numpy(), rtol=1e-5)


@pytest.mark.parametrize("suffix", [".keras", ".weights.h5"])
def test_a_saved_lora_model_reloads_with_its_adapters(rng, suffix, tmp_path):
    model = lora_model(rank=3)
    path = tmp_path / f"model{suffix}"
    if suffix == ".keras":
        model.save(path)
        restored = keras.models.load_model(path)
    else:
        model.save_weights(path)
        restored = kt.Transformer(model.config, lora_rank=3, lora_alpha=6)
        restored.load_weights(path)
    assert (restored.lora_rank, restored.lora_alpha) == (3, 6)
    for saved, loaded in zip(model.weights, restored.weights):
        assert saved.path.split("/")[1:] == loaded.path.split("/")[1:]  # the model's name aside
        assert saved.trainable == loaded.trainable
        np.testing.assert_array_equal(loaded.numpy(), saved.numpy(), err_msg=saved.path)
    inputs = (random_ids(rng, (2, 6)), random_ids(rng, (2, 5)))
    np.testing.assert_array_equal(np.asarray(restored(inputs)), np.asarray(model(inputs)))


def test_lora_weights_do_not_load_into_a_plain_model(tmp_path):
    """The error names the layer and the way out, not a count mismatch of Keras's."""
    path = tmp_path / "lora.weights.h5"
    lora_model().save_weights(path)
    plain = kt.Transformer(lora_model().config)
    with pytest.raises(ValueError, match=r"layer '\S+_attention/(query|key|value|output)'.*"
                                         "LoRA enabled at the same rank"):
        plain.load_weights(path)


def test_a_model_given_lora_rank_builds_its_adapters_with_public_keras_only(monkeypatch):
    """`lora_rank=` creates the adapters as the layers are built: no private Keras API (the
    compat module's unlocking, patched to fail here, is for `enable_lora` on a built model),
    and the same model as `enable_lora` gives, its other weights a plain model's."""
    def refuse(layer):
        raise AssertionError(f"{layer.name}: unlocked")

    config = kt.TransformerConfig.preset("tiny", vocab_size=60, num_layers=1,
                                         attention_bias=True)
    monkeypatch.setattr(compat, "unlocked_state", refuse)
    model = kt.Transformer(config, lora_rank=2, lora_alpha=4)
    layer = HeadsDense((3, 4), lora_rank=2)
    layer.build((None, 8))
    assert layer.lora_enabled and layer.lora_kernel_b.shape == (2, 12)
    with pytest.raises(AssertionError, match="unlocked"):
        kt.Transformer(config).enable_lora(2)
    monkeypatch.undo()
    enabled = kt.Transformer(config, name=model.name)
    enabled.enable_lora(2, 4)
    assert [(weight.path, weight.trainable) for weight in model.weights] == [
        (weight.path, weight.trainable) for weight in enabled.weights]
    assert sorted(weight.path for weight in model.trainable_weights) == sorted(
        weight.path for weight in model.lora_adapters()) and len(model.lora_adapters()) == 32
    adapters = {id(adapter) for adapter in model.lora_adapters()}
    assert [weight.path for weight in model.weights if id(weight) not in adapters] == [
        weight.path for weight in kt.Transformer(config, name=model.name).weights]
    assert (model.lora_rank, model.lora_alpha) == (2, 4)


def test_kt_average_checkpoints_averages_a_lora_run_s_merged_models(rng, tmp_path):
    """On a run whose run.json records LoRA, each projection's averaged kernel is the mean of
    the checkpoints' effective kernels W + (alpha/rank) A_i B_i (numpy), not the product of
    the adapters' means; the averaged file is plain weights."""
    recipe = kt.Recipe.preset("tiny", vocab_size=60, num_layers=1)
    run = RunDir(tmp_path / "run")
    run.write_json("config.json", recipe.to_dict())
    run.write_json("run.json", {"lora_rank": 2, "lora_alpha": 6.0})
    model = kt.Transformer(recipe.architecture, lora_rank=2, lora_alpha=6.0)
    products = []
    for step in (1, 2):
        for adapter in model.lora_adapters():
            adapter.assign(rng.normal(scale=0.3, size=adapter.shape))
        products.append([(dense.lora_kernel_a.numpy(), dense.lora_kernel_b.numpy())
                         for dense in model.projections()])
        save_checkpoint(model, run.checkpoints, step, keep=5)
    assert average_checkpoints.main([str(run.root), "--last", "2"]) == 0
    averaged = kt.Transformer(recipe.architecture)
    averaged.load_weights(run.averaged_weights)
    for index, (dense, plain) in enumerate(zip(model.projections(), averaged.projections())):
        base = next(weight for weight in dense.weights if weight.name == "kernel").numpy()
        matrix = base.reshape(dense.matrix("float32")[0].shape)
        pairs = [checkpoint[index] for checkpoint in products]
        expected = matrix + 3.0 * np.mean([a @ b for a, b in pairs], axis=0)
        got = plain.matrix("float32")[0].numpy()
        np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5, err_msg=dense.path)
        adapters_averaged = matrix + 3.0 * (np.mean([a for a, _ in pairs], axis=0)
                                            @ np.mean([b for _, b in pairs], axis=0))
        assert np.abs(got - adapters_averaged).max() > 0.01  # what averaging A and B gives
    kernels = {id(dense.kernel) for dense in averaged.projections()}
    adapters = {id(adapter) for adapter in model.lora_adapters()}
    frozen = [weight for weight in model.weights if id(weight) not in adapters]
    for weight, plain in zip(frozen, averaged.weights, strict=True):
        if id(plain) not in kernels:  # embeddings, norms, biases: the same in each
            np.testing.assert_array_equal(plain.numpy(), weight.numpy(), err_msg=weight.path)


def test_get_config_round_trip_keeps_lora():
    model = lora_model(rank=2)
    clone = kt.Transformer.from_config(model.get_config())
    assert (clone.lora_rank, clone.lora_alpha) == (2, 4)
    assert clone.get_config() == model.get_config()
    assert [weight.path for weight in clone.trainable_weights] == [
        weight.path for weight in model.trainable_weights]


@pytest.mark.parametrize("implementation", fast.IMPLEMENTATIONS)
def test_the_training_loss_reaches_the_adapters(rng, implementation):
    """The loss's gradient, through either implementation's `linear`, reaches both adapters of every
    projection and no frozen weight."""
    with fast.implementation_scope(implementation):
        model = lora_model()
        source, target_in, target_out = (random_ids(rng, (3, 6)), random_ids(rng, (3, 5)),
                                         random_ids(rng, (3, 5)))
        loss = kt.LabelSmoothedCrossEntropy(0.1)
        with tf.GradientTape() as tape:
            value = loss(target_out, model((source, target_in), training=True))
        gradients = tape.gradient(value, model.trainable_weights)
    assert len(gradients) == len(adapters(model))
    for weight, gradient in zip(model.trainable_weights, gradients):
        assert gradient is not None and np.abs(np.asarray(gradient)).max() > 0, weight.path


@QUANTIZATION_API
@pytest.mark.slow
def test_an_int8_model_s_logits_are_the_float_model_s_to_int8_rounding(rng, tmp_path):
    """`model.quantize("int8")` rewrites every projection (and the untied output projection,
    Keras's Dense): the logits move by int8 rounding only, the kernels decoding reads
    (`matrix()`, `pre_softmax_projection()`) are the float ones to half a quantization step, and the
    int8 weights reload into a model quantized the same way."""
    model = tiny_model(num_layers=1, tie_output=False, share_embeddings=False,
                       attention_bias=True)
    inputs = (random_ids(rng, (3, 7)), random_ids(rng, (3, 6)))
    float_logits = np.asarray(model(inputs))
    float_kernels = [np.asarray(dense.matrix("float32")[0]) for dense in model.projections()]
    float_kernels.append(np.asarray(model.pre_softmax_projection().matrix))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # Keras's note per layer class it cannot quantize
        model.quantize("int8")
    for dense in model.projections():  # the float kernel dropped, not kept beside the int8 one
        kernels = [weight.dtype for weight in dense.weights if weight.name == "kernel"]
        assert dense.quantization_mode == "int8" and kernels == ["int8"], dense.path
    logits = np.asarray(model(inputs))
    error = np.abs(logits - float_logits).max()
    assert 0 < error < 0.02 * np.abs(float_logits).max()
    kernels = [np.asarray(dense.matrix("float32")[0]) for dense in model.projections()]
    kernels.append(np.asarray(model.pre_softmax_projection().matrix))
    for kernel, float_kernel in zip(kernels, float_kernels):
        half_step = np.abs(float_kernel).max(axis=0) / 127 / 2
        assert np.all(np.abs(kernel - float_kernel) <= half_step * 1.001 + 1e-7)
    path = tmp_path / "int8.weights.h5"
    model.save_weights(path)
    restored = kt.Transformer(model.config)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        restored.quantize("int8")
    restored.load_weights(path)
    np.testing.assert_array_equal(np.asarray(restored(inputs)), logits)


@QUANTIZATION_API
def test_quantizing_a_lora_model_asks_for_the_merged_model():
    """Refused before any layer changes (Keras's `Model.quantize` would quantize the layers
    before the first projection)."""
    model = lora_model(tie_output=False, share_embeddings=False)
    with pytest.raises(ValueError, match=r"quantize the merged model \(merge_lora\(\)\)"):
        model.quantize("int8")
    assert model.output_projection.quantization_mode is None
    with pytest.raises(ValueError, match="merge_lora"):
        model.encoder_layers[0].feed_forward.inner.quantize("int8")
