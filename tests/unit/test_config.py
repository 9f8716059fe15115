"""Presets, recipes, validation and the parameter counts of Table 3."""
import dataclasses

import pytest

import keras_transformer as kt

VOCAB = 37000

# Table 3 of the paper: (overrides, parameters x 10^6) for rows (B) and (C), plus base and big.
TABLE3_ROWS = [
    ({"key_dim": 16}, 58), ({"key_dim": 32}, 60),
    ({"num_layers": 2}, 36), ({"num_layers": 4}, 50), ({"num_layers": 8}, 80),
    ({"d_model": 256, "key_dim": 32, "value_dim": 32}, 28),
    ({"d_model": 1024, "key_dim": 128, "value_dim": 128}, 168),
    ({"d_ff": 1024}, 53), ({"d_ff": 4096}, 90),
]


def parameters(**overrides) -> int:
    config = kt.TransformerConfig.preset("base", vocab_size=VOCAB, **overrides)
    return kt.Transformer(config).count_params()


def test_base_has_about_65m_parameters():
    assert parameters() == pytest.approx(65e6, rel=0.05)


@pytest.mark.slow
def test_big_has_about_213m_parameters():
    big = kt.Transformer(kt.TransformerConfig.preset("big", vocab_size=VOCAB)).count_params()
    assert big == pytest.approx(213e6, rel=0.03)


@pytest.mark.slow
def test_table3_rows_b_and_c_match_counts_and_ordering():
    ours = [parameters(**overrides) for overrides, _ in TABLE3_ROWS]
    for (overrides, paper), count in zip(TABLE3_ROWS, ours):
        assert count == pytest.approx(paper * 1e6, rel=0.08), overrides
    paper_order = sorted(range(len(TABLE3_ROWS)), key=lambda i: TABLE3_ROWS[i][1])
    assert sorted(range(len(ours)), key=lambda i: ours[i]) == paper_order


def test_paper_presets_hold_the_papers_values():
    base, big = kt.Recipe.preset("base"), kt.TransformerConfig.preset("big")
    assert (base.training.average_last, kt.Recipe.preset("big").training.average_last) == (5, 20)
    assert base.architecture == kt.TransformerConfig.preset("base") == kt.TransformerConfig()
    model = base.architecture
    assert (model.num_layers, model.d_model, model.d_ff, model.num_heads, model.key_dim,
            model.value_dim, model.dropout) == (6, 512, 2048, 8, 64, 64, 0.1)
    assert base.training == kt.TrainingSettings(label_smoothing=0.1, warmup_steps=4000,
                                                learning_rate_scale=1.0, batch_tokens=25000,
                                                average_last=5)
    assert (big.d_model, big.d_ff, big.num_heads, big.dropout) == (1024, 4096, 16, 0.3)
    assert base.search == kt.SearchSettings(beam_size=4, length_penalty=0.6, max_decode_extra=50)
    parsing = kt.Recipe.preset("parsing")
    assert (parsing.architecture.num_layers, parsing.architecture.d_model) == (4, 1024)
    assert parsing.search == kt.SearchSettings(21, 0.3, 300)


@pytest.mark.parametrize("overrides", [
    {"num_heads": 1, "key_dim": 512, "value_dim": 512},  # (A)
    {"num_heads": 16, "key_dim": 32, "value_dim": 32},  # (A)
    {"dropout": 0.0}, {"label_smoothing": 0.2},  # (D)
    {"positional": "learned"},  # (E)
])
def test_table3_rows_a_d_e_are_expressible(overrides):
    recipe = kt.Recipe.preset("base", **overrides)
    for field, value in overrides.items():
        part = recipe.training if field == "label_smoothing" else recipe.architecture
        assert getattr(part, field) == value
    assert recipe.to_dict() == {**kt.Recipe().to_dict(), **overrides}


@pytest.mark.parametrize("overrides, field", [
    ({"d_model": 100, "num_heads": 8}, "num_heads"),
    ({"dropout": -0.1}, "dropout"),
    ({"num_layers": 0}, "num_layers"),
    ({"positional": "rotary"}, "positional"),
    ({"norm": "sandwich"}, "norm"),
    ({"label_smoothing": 1.0}, "label_smoothing"),
    ({"warmup_steps": 0}, "warmup_steps"),
    ({"learning_rate_scale": 0.0}, "learning_rate_scale"),
    ({"batch_tokens": 1.5}, "batch_tokens"),
    ({"average_last": -1}, "average_last"),
    ({"subword_dropout": 1.0}, "subword_dropout"),
    ({"word_dropout": -0.1}, "word_dropout"),
    ({"beam_size": 0}, "beam_size"),
    ({"key_dim": 0}, "key_dim"),
    ({"num_encoder_layers": 0}, "num_encoder_layers"),
    ({"num_decoder_layers": 1.5}, "num_decoder_layers"),
    ({"target_vocab_size": 500}, "target_vocab_size"),
])
def test_invalid_recipes_name_the_field(overrides, field):
    with pytest.raises(ValueError, match=field):
        kt.Recipe.preset("base", **overrides)


def test_each_setting_has_one_home():
    """A training or search setting given to the architecture is named with its owner."""
    with pytest.raises(ValueError, match="warmup_steps is a TrainingSettings field"):
        kt.TransformerConfig.preset("base", warmup_steps=100)
    with pytest.raises(ValueError, match="beam_size is a SearchSettings field"):
        kt.TransformerConfig.from_dict({"beam_size": 3})
    fields = [[field.name for field in dataclasses.fields(part)] for part in
              (kt.TransformerConfig, kt.TrainingSettings, kt.SearchSettings)]
    assert sum(map(len, fields)) == len(set().union(*fields)) == len(kt.Recipe().to_dict())


def test_recipe_round_trips_and_splits_run_configs_of_earlier_versions():
    recipe = kt.Recipe.preset("parsing-small", warmup_steps=123, beam_size=3)
    assert kt.Recipe.from_saved(recipe.to_dict()) == recipe
    assert recipe.replace(d_model=128).architecture.d_model == 128
    # A run directory's config.json of before the split: one flat object, no attention_bias.
    earlier = recipe.to_dict()
    del earlier["attention_bias"]
    restored = kt.Recipe.from_saved(earlier)
    assert restored.architecture.attention_bias is True
    assert (restored.training, restored.search) == (recipe.training, recipe.search)
    assert kt.TransformerConfig.from_saved(earlier) == restored.architecture


def loaded_as_saved_before(model, tmp_path, changes: dict[bytes, bytes]):
    """`model` saved as a `.keras` file, the file rewritten as an earlier version wrote it (each
    text of `changes`, found once in its config.json, replaced by its value) and loaded."""
    import zipfile

    import keras

    path, old_path = tmp_path / "new.keras", tmp_path / "old.keras"
    model.save(path)
    with zipfile.ZipFile(path) as new_file, zipfile.ZipFile(old_path, "w") as old_file:
        for item in new_file.infolist():
            data = new_file.read(item)
            if item.filename == "config.json":
                for new, old in changes.items():
                    assert data.count(new) == 1
                    data = data.replace(new, old)
            old_file.writestr(item, data)
    return keras.saving.load_model(old_path)


def test_each_side_takes_its_own_depth_and_runs_saved_before_still_load(tmp_path):
    """`num_layers` sets both sides unless a side's own field is set; the parameter count is
    the layers' sum; a `.keras` file whose config has no per-side fields (every file written
    before they existed) loads with `num_layers` on both sides and gives the same outputs."""
    import numpy as np

    even = kt.TransformerConfig.preset("tiny", vocab_size=60)
    uneven = even.replace(num_encoder_layers=3, num_decoder_layers=1)
    assert (even.encoder_depth, even.decoder_depth) == (2, 2)
    assert (uneven.encoder_depth, uneven.decoder_depth) == (3, 1)
    assert even.replace(num_layers=5).decoder_depth == 5
    assert uneven.replace(num_layers=5).decoder_depth == 1
    models = {name: kt.Transformer(config) for name, config in
              (("even", even), ("uneven", uneven), ("one", even.replace(num_layers=1)))}
    assert (len(models["uneven"].encoder_layers), len(models["uneven"].decoder_layers)) == (3, 1)
    per_encoder_layer = (models["even"].count_params() - models["one"].count_params()
                         - sum(layer.count_params() for layer in
                               models["even"].decoder_layers[1:]))
    assert models["uneven"].count_params() == (
        models["one"].count_params() + 2 * per_encoder_layer)

    model = models["even"]
    ids = np.array([[5, 6, 7, 0]], "int32")
    restored = loaded_as_saved_before(model, tmp_path, {b'"num_encoder_layers": null, ': b"",
                                                        b'"num_decoder_layers": null, ': b""})
    assert (restored.config.encoder_depth, restored.config.decoder_depth) == (2, 2)
    np.testing.assert_allclose(restored((ids, ids)), model((ids, ids)), atol=1e-6)


def test_d_model_not_divisible_by_heads_is_fine_with_explicit_head_sizes():
    config = kt.TransformerConfig.preset("tiny", d_model=60, num_heads=8, key_dim=8, value_dim=8)
    assert (config.key_dim, config.value_dim) == (8, 8)


def test_unknown_preset_and_unknown_field_are_named():
    with pytest.raises(ValueError, match="huge"):
        kt.TransformerConfig.preset("huge")
    with pytest.raises(ValueError, match="d_hidden"):
        kt.TransformerConfig.preset("base", d_hidden=3)
    with pytest.raises(ValueError, match="d_hidden"):
        kt.Recipe.preset("base", d_hidden=3)


def test_json_round_trip():
    config = kt.TransformerConfig.preset("small", positional="learned", norm="pre")
    assert kt.TransformerConfig.from_json(config.to_json()) == config


def test_attention_projections_have_no_bias_as_in_the_paper_unless_asked():
    """W^Q, W^K, W^V, W^O are matrices only (3.2.2); `attention_bias=True` adds d_k, d_k, d_v
    per head and d_model biases to each of the 3N attention layers."""
    config = kt.TransformerConfig.preset("tiny", vocab_size=60)
    plain = kt.Transformer(config)
    biased = kt.Transformer(config.replace(attention_bias=True))
    names = [w.path for w in plain.weights]
    assert not any("attention" in name and name.endswith("bias") for name in names)
    per_layer = config.num_heads * (2 * config.key_dim + config.value_dim) + config.d_model
    assert (biased.count_params() - plain.count_params()
            == 3 * config.num_layers * per_layer)


def test_configs_saved_before_attention_bias_existed_rebuild_their_model(tmp_path):
    """A saved config without the field (every earlier version had attention biases) loads
    with them, so its weights still fit; a new config's default is the paper's."""
    import numpy as np

    saved = kt.TransformerConfig.preset("tiny", vocab_size=60, attention_bias=True).to_dict()
    del saved["attention_bias"]
    assert kt.TransformerConfig.from_saved(saved).attention_bias is True
    assert kt.TransformerConfig.from_dict(saved).attention_bias is False
    old_json = kt.TransformerConfig.from_saved(saved).to_json().replace(
        '"attention_bias": true,', "")
    assert kt.TransformerConfig.from_json(old_json).attention_bias is True
    model = kt.Transformer(saved)
    ids = np.array([[5, 6, 7, 0]], "int32")
    restored = loaded_as_saved_before(model, tmp_path, {b'"attention_bias": true, ': b""})
    assert restored.config.attention_bias is True
    np.testing.assert_allclose(restored((ids, ids)), model((ids, ids)), atol=1e-6)


def test_head_sizes_saved_under_their_earlier_names_load_with_the_same_outputs(tmp_path):
    """`key_dim`/`value_dim` were saved as `d_k`/`d_v`: a run directory's config and a `.keras`
    file with those keys load the same model (identical outputs); None follows `d_model`
    through `replace`, and a value given under both names is refused."""
    import numpy as np

    recipe = kt.Recipe.preset("tiny", vocab_size=60, key_dim=8, value_dim=12)
    earlier = {("d_k" if key == "key_dim" else "d_v" if key == "value_dim" else key): value
               for key, value in recipe.to_dict().items()}
    assert kt.Recipe.from_saved(earlier) == recipe
    assert kt.Recipe.preset("tiny", **{"d_k": 8, "d_v": 12}) == recipe.replace(vocab_size=1000)
    with pytest.raises(ValueError, match="d_k: the earlier name of key_dim"):
        kt.TransformerConfig.from_dict({"d_k": 8, "key_dim": 8})
    derived = kt.TransformerConfig.preset("tiny")
    assert (derived.key_dim, derived.to_dict()["key_dim"]) == (16, None)
    assert derived.replace(d_model=128).key_dim == 32
    model = kt.Transformer(recipe.architecture)
    ids = np.array([[5, 6, 7, 0]], "int32")
    restored = loaded_as_saved_before(model, tmp_path, {b'"key_dim": 8': b'"d_k": 8',
                                                        b'"value_dim": 12': b'"d_v": 12'})
    assert restored.config == recipe.architecture
    np.testing.assert_array_equal(restored((ids, ids)), model((ids, ids)))


@pytest.mark.parametrize("name", sorted(kt.PRESETS))
def test_every_preset_is_a_valid_recipe_that_round_trips(name):
    recipe = kt.Recipe.preset(name)
    assert kt.Recipe.from_saved(recipe.to_dict()) == recipe
    assert recipe.architecture == kt.TransformerConfig.preset(name)


def test_multi30k_recipe_is_the_published_tiny_model_at_its_peak_learning_rate():
    recipe = kt.Recipe.preset("multi30k")
    model = recipe.architecture
    assert (model.num_layers, model.d_model, model.d_ff, model.num_heads) == (4, 128, 256, 4)
    assert (model.dropout, model.attention_dropout, model.share_embeddings) == (0.3, 0.0, True)
    schedule = kt.TransformerSchedule(model.d_model, recipe.training.warmup_steps,
                                      recipe.training.learning_rate_scale)
    rates = [float(schedule(step - 1)) for step in (1999, 2000, 2001)]
    assert max(rates) == rates[1] == pytest.approx(5e-3, rel=0.02)   # fairseq's --lr 0.005
    assert recipe.training.average_last == 10 and recipe.search.beam_size == 5
