"""Checkpoint files: element-wise averaging, retention of the newest K, atomic writes."""
import numpy as np
import pytest

import keras_transformer as kt
from keras_transformer.training.checkpoints import (average_weights, list_checkpoints,
                                                    save_checkpoint, save_weights_atomic)

CONFIG = kt.TransformerConfig.preset("tiny", vocab_size=30, d_model=16, d_ff=32, num_heads=2,
                                     num_layers=1)


def randomized(model, seed):
    rng = np.random.default_rng(seed)
    model.set_weights([rng.normal(size=w.shape).astype(w.dtype) for w in model.get_weights()])
    return model.get_weights()


def test_average_of_three_checkpoints_is_elementwise_mean(tmp_path):
    model = kt.Transformer(CONFIG)
    saved = []
    for step in (10, 20, 30):
        saved.append(randomized(model, step))
        save_checkpoint(model, tmp_path, step, keep=5)
    averaged = kt.Transformer(CONFIG)
    average_weights(averaged, list_checkpoints(tmp_path))
    for got, *parts in zip(averaged.get_weights(), *saved):
        np.testing.assert_allclose(got, np.mean(parts, axis=0), rtol=1e-6, atol=1e-6)


def test_keeps_only_newest_checkpoints_in_step_order(tmp_path):
    model = kt.Transformer(CONFIG)
    for step in (5, 100, 40, 7):
        save_checkpoint(model, tmp_path, step, keep=2)
    assert [path.name for path in list_checkpoints(tmp_path)] == [
        "ckpt-00000040.weights.h5", "ckpt-00000100.weights.h5"]


def test_failed_write_keeps_previous_checkpoint_readable(tmp_path, monkeypatch):
    model = kt.Transformer(CONFIG)
    good = randomized(model, 1)
    path = save_weights_atomic(model, tmp_path / "ckpt-00000001.weights.h5")
    randomized(model, 2)

    def crash(filepath, overwrite=True):
        with open(filepath, "wb") as partial:
            partial.write(b"half a file")
        raise OSError("disk full")

    monkeypatch.setattr(model, "save_weights", crash)
    with pytest.raises(OSError):
        save_weights_atomic(model, path)
    assert sorted(p.name for p in tmp_path.iterdir()) == [path.name]  # no temporary left
    restored = kt.Transformer(CONFIG)
    restored.load_weights(path)
    for got, want in zip(restored.get_weights(), good):
        np.testing.assert_array_equal(got, want)


def test_average_names_missing_checkpoint(tmp_path):
    with pytest.raises(FileNotFoundError, match="nope.weights.h5"):
        average_weights(kt.Transformer(CONFIG), [tmp_path / "nope.weights.h5"])


def test_evaluate_and_export_take_the_same_default_weights(tmp_path):
    """One rule for both command lines: averaged, else final, else the newest checkpoint."""
    from keras_transformer.training.run_dir import RunDir
    from trainers.common import run_model
    from trainers.export import load_model

    run = RunDir(tmp_path)
    run.write_json("config.json", CONFIG.to_dict())
    model = kt.Transformer(CONFIG)
    with pytest.raises(FileNotFoundError, match="no weights"):
        run.default_weights()
    weights = {}
    for name, seed in (("checkpoint", 1), ("newer checkpoint", 2), ("final", 3),
                       ("averaged", 4)):
        weights[name] = randomized(model, seed)
        if name.endswith("checkpoint"):
            save_checkpoint(model, run.checkpoints, seed, keep=5)
        else:
            save_weights_atomic(model, getattr(run, f"{name}_weights"))
    for expected, remove in (("averaged", None), ("final", "averaged"),
                             ("newer checkpoint", "final")):
        if remove:
            getattr(run, f"{remove}_weights").unlink()
        for loaded in (run_model(str(tmp_path)), load_model(str(tmp_path))[0]):
            for got, want in zip(loaded.get_weights(), weights[expected]):
                np.testing.assert_array_equal(got, want)


def test_export_of_a_run_directory_takes_the_recipes_search_settings(tmp_path):
    """kt-export fixes a run's own search settings (e.g. the parsing presets' beam and +300
    output tokens) unless flags override them; a .keras file gets the paper's."""
    from keras_transformer.training.run_dir import RunDir
    from trainers.export import load_model

    recipe = kt.Recipe(architecture=CONFIG, search=kt.SearchSettings(3, 0.3, 300))
    run = RunDir(tmp_path / "run")
    run.write_json("config.json", recipe.to_dict())
    model = kt.Transformer(CONFIG)
    save_weights_atomic(model, run.final_weights)
    assert load_model(str(run.root))[1] == kt.SearchSettings(3, 0.3, 300)
    model.save(tmp_path / "model.keras")
    assert load_model(str(tmp_path / "model.keras"))[1] == kt.SearchSettings()


@pytest.mark.parametrize("average_last, expected", [(2, "averaged"), (1, "error")])
def test_average_checkpoints_defaults_to_the_recipes_average_last(tmp_path, average_last,
                                                                   expected):
    from keras_transformer.training.run_dir import RunDir
    from trainers import average_checkpoints

    run = RunDir(tmp_path)
    run.write_json("config.json", kt.Recipe(
        architecture=CONFIG, training=kt.TrainingSettings(average_last=average_last)).to_dict())
    model = kt.Transformer(CONFIG)
    saved = []
    for step in (10, 20, 30):
        saved.append(randomized(model, step))
        save_checkpoint(model, run.checkpoints, step, keep=5)
    code = average_checkpoints.main([str(tmp_path)])
    if expected == "error":
        assert code == 2 and not run.averaged_weights.exists()
        return
    assert code == 0
    model.load_weights(run.averaged_weights)
    for got, *parts in zip(model.get_weights(), *saved[-2:]):
        np.testing.assert_allclose(got, np.mean(parts, axis=0), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("average_wins", [True, False])
def test_run_result_keeps_the_better_of_average_and_final_on_dev(tmp_path, average_wins):
    """The end of kt-train: the last checkpoints are averaged, both are scored on dev, the
    better one stays in the model and in result.json, and evaluation/export default to it."""
    from keras_transformer.training.run_dir import RunDir
    from keras_transformer.training.run_dir import keep_better_of_average_and_final

    run = RunDir(tmp_path)
    model = kt.Transformer(CONFIG)
    saved = []
    for step in (10, 20, 30):
        saved.append(randomized(model, step))
        save_checkpoint(model, run.checkpoints, step, keep=5)
    save_weights_atomic(model, run.final_weights)
    average = [np.mean(parts, axis=0) for parts in zip(*saved[-2:])]
    sign = 1.0 if average_wins else -1.0  # "BLEU" rises (or falls) as weights near the average

    def dev_bleu():
        return -sign * float(np.abs(model.get_weights()[0] - average[0]).sum())

    result = keep_better_of_average_and_final(model, run, 2, dev_bleu)
    assert result["averaged"] == ["ckpt-00000020.weights.h5", "ckpt-00000030.weights.h5"]
    assert set(result["dev_bleu"]) == {"final", "averaged"}
    expected = average if average_wins else saved[-1]
    for got, want in zip(model.get_weights(), expected):
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)
    chosen = run.averaged_weights if average_wins else run.final_weights
    assert result["weights"] == str(chosen) and run.default_weights() == chosen
    assert run.averaged_weights.is_file()


def test_run_result_without_enough_checkpoints_is_the_final_weights(tmp_path):
    from keras_transformer.training.run_dir import RunDir
    from keras_transformer.training.run_dir import keep_better_of_average_and_final

    run = RunDir(tmp_path)
    model = kt.Transformer(CONFIG)
    save_checkpoint(model, run.checkpoints, 5, keep=5)
    save_weights_atomic(model, run.final_weights)
    result = keep_better_of_average_and_final(model, run, 5, lambda: 12.345)
    assert result["dev_bleu"] == {"final": 12.35} and result["averaged"] == []
    assert not run.averaged_weights.exists() and run.default_weights() == run.final_weights


@pytest.mark.parametrize("average_wins", [True, False])
def test_averaging_again_updates_the_runs_result(tmp_path, average_wins, capsys):
    """kt-average-checkpoints rewriting a finished run's averaged weights brings result.json
    in line: it names the checkpoints averaged now and no longer the earlier average's dev
    BLEU; the chosen weights stay. An average written elsewhere leaves it as it was."""
    import json

    from keras_transformer.training.run_dir import RunDir, keep_better_of_average_and_final
    from trainers import average_checkpoints

    run = RunDir(tmp_path)
    run.write_json("config.json", kt.Recipe(architecture=CONFIG).to_dict())
    model = kt.Transformer(CONFIG)
    for step in (10, 20, 30):
        randomized(model, step)
        save_checkpoint(model, run.checkpoints, step, keep=5)
    save_weights_atomic(model, run.final_weights)
    scores = iter([1.0, 2.0] if average_wins else [2.0, 1.0])  # final's, then the average's
    keep_better_of_average_and_final(model, run, 2, lambda: next(scores))
    before = json.loads((tmp_path / "result.json").read_text())
    assert before["weights"] == ("averaged" if average_wins else "model") + ".weights.h5"
    assert before["averaged"] == ["ckpt-00000020.weights.h5", "ckpt-00000030.weights.h5"]

    assert average_checkpoints.main([str(tmp_path), "--last", "2", "--output",
                                     str(tmp_path / "elsewhere.weights.h5")]) == 0
    assert json.loads((tmp_path / "result.json").read_text()) == before
    assert average_checkpoints.main([str(tmp_path), "--last", "3"]) == 0
    after = json.loads((tmp_path / "result.json").read_text())
    assert after["averaged"] == [f"ckpt-000000{step}.weights.h5" for step in (10, 20, 30)]
    assert after["average_last"] == 3 and after["weights"] == before["weights"]
    assert after["dev_bleu"] == {"final": before["dev_bleu"]["final"], "averaged": None}
    assert "result.json: names these checkpoints" in capsys.readouterr().out
    weights, why = run.chosen_weights()
    assert weights.name == before["weights"]
    assert ("not scored on dev" in why) == (weights == run.averaged_weights)


@pytest.mark.parametrize("kept, last, expected, note", [
    (4, 10, 4, "4 of the newest 10 checkpoints asked (only 4 kept)"),
    (6, 5, 5, "the newest 5 checkpoints"),
    (1, 5, 0, "one checkpoint: nothing to average"),
    (0, 5, 0, "no checkpoint: nothing to average"),
    (6, 1, 0, "average_last 1: no averaging"),
])
def test_what_is_averaged_is_said(tmp_path, kept, last, expected, note):
    from keras_transformer.training.checkpoints import checkpoints_to_average

    checkpoints = [tmp_path / f"ckpt-{step:08d}.weights.h5" for step in range(kept)]
    assert checkpoints_to_average(checkpoints, last) == (checkpoints[kept - expected:]
                                                         if expected else [], note)


def test_a_run_with_one_checkpoint_says_why_nothing_was_averaged(tmp_path):
    import json

    from keras_transformer.training.run_dir import RunDir, keep_better_of_average_and_final

    run = RunDir(tmp_path)
    model = kt.Transformer(CONFIG)
    save_checkpoint(model, run.checkpoints, 5, keep=5)
    save_weights_atomic(model, run.final_weights)
    keep_better_of_average_and_final(model, run, 5, lambda: 12.345)
    recorded = json.loads((tmp_path / "result.json").read_text())
    assert recorded["averaged"] == [] and recorded["averaging"] == (
        "one checkpoint: nothing to average")


def test_average_checkpoints_takes_what_was_kept_as_kt_train_does(tmp_path, capsys):
    """Without --last: the recipe's average_last, or every checkpoint kept when fewer (as
    kt-train's end does), said so; --last K asks for exactly K, and 1 is refused as --last's."""
    from keras_transformer.training.run_dir import RunDir
    from trainers import average_checkpoints

    run = RunDir(tmp_path)
    run.write_json("config.json", kt.Recipe(
        architecture=CONFIG, training=kt.TrainingSettings(average_last=10)).to_dict())
    model = kt.Transformer(CONFIG)
    for step in (10, 20, 30, 40):
        randomized(model, step)
        save_checkpoint(model, run.checkpoints, step, keep=10)
    assert average_checkpoints.main([str(tmp_path)]) == 0
    assert capsys.readouterr().out.startswith(
        "averaged 4 of the newest 10 checkpoints asked (only 4 kept): ckpt-00000010")
    assert run.averaged_weights.is_file()
    assert average_checkpoints.main([str(tmp_path), "--last", "5"]) == 2
    assert "--last 5: only 4 checkpoint(s)" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        average_checkpoints.main([str(tmp_path), "--last", "1"])
    error = capsys.readouterr().err
    assert "--last: must be at least 2" in error and "recipe" not in error
