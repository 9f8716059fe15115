"""Training that loses nothing beyond the last backup: torn, garbled and missing backups and
checkpoints, failed writes, non-finite weights, loss-scale overflow, and a diverged run (runs
killed with SIGKILL and out of disk space: tests/system/test_resumed_runs.py)."""
import errno
import json
import shutil
from pathlib import Path

import keras
import numpy as np
import pytest

import keras_transformer as kt
from keras_transformer.data import SubwordTokenizer
from keras_transformer.training.backup import (BackupError, list_backups, restore_latest,
                                               write_backup)
from keras_transformer.training.checkpoints import save_checkpoint
from keras_transformer.precision import precision_scope
from keras_transformer.training.run_dir import RunDir
from trainers import average_checkpoints, evaluate, export, train
from keras_transformer.training.run import compiled_model
from helpers import demo_corpus, run_args

RECIPE = kt.Recipe.preset("tiny", vocab_size=50, num_layers=1, max_length=16)
BATCH = np.random.default_rng(0).integers(3, 50, size=(4, 8)).astype("int32")


def trained(steps: int) -> keras.Model:
    """A compiled tiny model after `steps` training steps (optimizer and seeds advanced)."""
    model, _ = compiled_model(RECIPE)
    for _ in range(steps):
        model.train_on_batch((BATCH, BATCH), BATCH)
    return model


def fresh() -> keras.Model:
    return compiled_model(RECIPE)[0]


def same_variables(a: keras.Model, b: keras.Model) -> bool:
    return all(np.array_equal(x.numpy(), y.numpy()) for x, y in
               zip(a.variables + a.optimizer.variables, b.variables + b.optimizer.variables))


def corrupt(path: Path, how: str) -> None:
    """Damages `path` as a crash or a bad disk would."""
    if how == "zero-byte":
        path.write_bytes(b"")
    elif how == "truncated":
        path.write_bytes(path.read_bytes()[:len(path.read_bytes()) // 3])
    elif how == "garbled":  # same size, bytes changed in the middle (h5py may still open it)
        data = bytearray(path.read_bytes())
        middle = len(data) // 2
        data[middle:middle + 64] = bytes(64)
        path.write_bytes(bytes(data))
    elif how == "missing":
        path.unlink()


@pytest.fixture(scope="module")
def states(tmp_path_factory):
    """Backups at steps 2 and 3 and a checkpoint at step 1 of one training, written once for
    the module (a model's first train step is traced, seconds a test): their directory, and
    the model at step 3, which only the test of an exact restore trains further."""
    directory = tmp_path_factory.mktemp("states")
    model = trained(1)
    save_checkpoint(model, directory / "checkpoints", 1, keep=5)
    for step in (2, 3):
        model.train_on_batch((BATCH, BATCH), BATCH)
        write_backup(model, directory / "backup", step)
    return directory, model


@pytest.fixture
def three_states(states, tmp_path):
    """The test's own copy of `states`' backups (steps 2 and 3) and checkpoint (step 1), which
    it may damage: the backup and checkpoint directories."""
    shutil.copytree(states[0], tmp_path, dirs_exist_ok=True)
    return tmp_path / "backup", tmp_path / "checkpoints"


def restored_at(backup: Path, checkpoints: Path, step: int) -> keras.Model:
    """A compiled model holding the state of `step` restored from `backup` (exactly: weights,
    optimizer and dropout seeds), as training left it at that step."""
    model = fresh()
    assert restore_latest(model, backup, checkpoints, at_most=step).step == step
    return model


def test_backup_restores_weights_optimizer_step_and_dropout_seeds_exactly(states, three_states):
    backup, checkpoints = three_states
    model = states[1]  # as it wrote the backup of step 3
    restored_model = fresh()
    restored = restore_latest(restored_model, backup, checkpoints)
    assert restored.step == 3 and restored.exact and restored.source.name.startswith("step-")
    assert same_variables(model, restored_model)
    # The next step draws the same dropout masks: the same loss and weights to the last bit.
    # (Keras 3.10 accumulates train_on_batch's metrics over calls: reset them first.)
    model.reset_metrics()
    assert (model.train_on_batch((BATCH, BATCH), BATCH)
            == restored_model.train_on_batch((BATCH, BATCH), BATCH))
    assert same_variables(model, restored_model)


@pytest.mark.slow
@pytest.mark.parametrize("how", ["zero-byte", "truncated", "garbled", "missing"])
def test_a_damaged_newest_backup_falls_back_to_the_one_before(three_states, how):
    backup, checkpoints = three_states
    newest = backup / "step-00000003.weights.h5"
    corrupt(newest, how)
    warnings = []
    restored = restore_latest(fresh(), backup, checkpoints, warn=warnings.append)
    assert restored.step == 2 and restored.exact
    assert len(warnings) == 1 and "step-00000003" in warnings[0]


@pytest.mark.slow
def test_damaged_backups_fall_back_to_a_checkpoint_then_fail_naming_every_file(three_states):
    backup, checkpoints = three_states
    corrupt(backup / "step-00000003.weights.h5", "truncated")
    (backup / "step-00000002.json").write_text("{not json")
    warnings = []
    restored = restore_latest(fresh(), backup, checkpoints, warn=warnings.append)
    assert restored.step == 1 and not restored.exact
    assert restored.source == checkpoints / "ckpt-00000001.weights.h5"
    assert any("step-00000002.json" in warning for warning in warnings)
    corrupt(checkpoints / "ckpt-00000001.weights.h5", "zero-byte")
    with pytest.raises(BackupError) as raised:
        restore_latest(fresh(), backup, checkpoints, warn=lambda _: None)
    for name in ("step-00000003", "step-00000002.json", "ckpt-00000001.weights.h5"):
        assert name in str(raised.value)
    assert restore_latest(fresh(), backup.parent / "none", checkpoints.parent / "none").step == 0


@pytest.mark.slow
def test_a_backup_of_the_earlier_keras_layout_still_restores(three_states, tmp_path):
    """Runs backed up by Keras's BackupAndRestore (before our own backups) resume from it: the
    weights, optimizer and step, not the dropout seeds (that file lacks them)."""
    model = restored_at(*three_states, step=2)
    legacy, checkpoints = tmp_path / "legacy" / "backup", tmp_path / "legacy" / "checkpoints"
    legacy.mkdir(parents=True)
    model.save_weights(legacy / "latest.weights.h5")
    restored_model = fresh()
    restored = restore_latest(restored_model, legacy, checkpoints)
    assert restored.step == 2 and not restored.exact
    assert all(np.array_equal(x.numpy(), y.numpy()) for x, y in
               zip(model.weights + model.optimizer.variables,
                   restored_model.weights + restored_model.optimizer.variables))
    # Its step is only known once loaded: a cluster's agreed step (from file names) keeps it.
    assert restore_latest(fresh(), legacy, checkpoints, at_most=0).step == 2


def test_backups_with_non_finite_weights_are_refused(three_states):
    backup, checkpoints = three_states
    model = restored_at(backup, checkpoints, step=3)
    model.trainable_weights[0].assign(np.full(model.trainable_weights[0].shape, np.nan))
    write_backup(model, backup, 4)
    warnings = []
    assert restore_latest(fresh(), backup, checkpoints, warn=warnings.append).step == 3
    assert "not all finite" in warnings[0]


@pytest.mark.slow
def test_a_failed_write_keeps_the_earlier_backups(three_states, monkeypatch):
    """A disk that fills up mid-write: the partial file goes, the earlier backups stay."""
    backup, checkpoints = three_states
    model = fresh()  # the disk fails whatever the model holds

    def full_disk(self, filepath, overwrite=True):
        Path(filepath).write_bytes(b"\x89HDF\r\n partial")
        raise OSError(errno.ENOSPC, "No space left on device", filepath)

    monkeypatch.setattr(keras.Model, "save_weights", full_disk)
    with pytest.raises(OSError):
        write_backup(model, backup, 4)
    assert [mark.name for mark in list_backups(backup)] == ["step-00000002.json",
                                                           "step-00000003.json"]
    assert not list(backup.glob(".tmp-*")) and not (backup / "step-00000004.weights.h5").exists()
    monkeypatch.undo()
    assert restore_latest(fresh(), backup, checkpoints).step == 3


def test_loss_scale_skips_an_overflowing_step_and_recovers():
    """mixed_float16: an infinite gradient leaves the weights alone and halves the scale; the
    next finite step trains."""
    with precision_scope("mixed_float16"):
        model, _ = compiled_model(RECIPE)
    optimizer = model.optimizer
    assert isinstance(optimizer, keras.optimizers.LossScaleOptimizer)
    optimizer.build(model.trainable_variables)
    before = [variable.numpy() for variable in model.trainable_variables]
    scale = float(optimizer.dynamic_scale.numpy())
    overflow = [np.full(v.shape, np.inf, v.dtype) for v in model.trainable_variables]
    optimizer.apply(overflow, model.trainable_variables)
    assert float(optimizer.dynamic_scale.numpy()) == scale / 2
    assert all(np.array_equal(b, v.numpy()) for b, v in zip(before, model.trainable_variables))
    finite = [np.full(v.shape, 0.5, v.dtype) for v in model.trainable_variables]
    optimizer.apply(finite, model.trainable_variables)
    assert not np.array_equal(before[0], model.trainable_variables[0].numpy())
    assert all(np.all(np.isfinite(v.numpy())) for v in model.trainable_variables)


@pytest.mark.slow
def test_a_backup_after_a_skipped_float16_step_resumes_at_its_step(tmp_path):
    """mixed_float16: a step whose gradients overflow is skipped (the optimizer's update count
    stays), yet it trained on a batch. The backup of step 3 records both, and restores step 3,
    the place in the data, not the 2 updates."""
    with precision_scope("mixed_float16"):
        model, _ = compiled_model(RECIPE)
    model.train_on_batch((BATCH, BATCH), BATCH)
    overflow = [np.full(v.shape, np.inf, v.dtype) for v in model.trainable_variables]
    model.optimizer.apply(overflow, model.trainable_variables)  # step 2, skipped
    model.train_on_batch((BATCH, BATCH), BATCH)
    assert int(model.optimizer.iterations.numpy()) == 2
    write_backup(model, tmp_path / "backup", 3)
    mark = json.loads((tmp_path / "backup" / "step-00000003.json").read_text())
    assert (mark["step"], mark["iterations"]) == (3, 2)
    with precision_scope("mixed_float16"):
        restored_model, _ = compiled_model(RECIPE)
    restored = restore_latest(restored_model, tmp_path / "backup", tmp_path / "checkpoints")
    assert restored.step == 3 and restored.exact
    assert int(restored_model.optimizer.iterations.numpy()) == 2
    assert same_variables(model, restored_model)


def test_tools_name_an_unreadable_weights_file(tmp_path, demo_vocab, capsys):
    import shutil

    recipe = kt.Recipe.preset("tiny", vocab_size=SubwordTokenizer.load(demo_vocab).vocab_size,
                              num_layers=1, max_length=24)
    run = RunDir(tmp_path / "run")
    run.write_json("config.json", recipe.to_dict())
    shutil.copytree(demo_vocab, run.vocab)
    model = kt.Transformer(recipe.architecture)
    for step in (1, 2):
        save_checkpoint(model, run.checkpoints, step, keep=5)
    corrupt(run.checkpoints / "ckpt-00000002.weights.h5", "truncated")
    assert average_checkpoints.main([str(run.root), "--last", "2"]) == 2
    assert "ckpt-00000002.weights.h5" in capsys.readouterr().err
    bad = run.checkpoints / "ckpt-00000002.weights.h5"
    source = tmp_path / "x.en"
    source.write_text("one cat\n")
    assert evaluate.main([str(run.root), "--weights", str(bad), "--src", str(source),
                          "--ref", str(source)]) == 2
    assert str(bad) in capsys.readouterr().err
    assert export.main([str(run.root), str(run.vocab), "--name", "x", "--weights", str(bad),
                        "--base-dir", str(tmp_path / "exports")]) == 2
    assert str(bad) in capsys.readouterr().err


# --- whole runs -------------------------------------------------------------------------------

@pytest.mark.slow
def test_a_diverged_run_stops_and_resumes_from_its_last_finite_backup(tmp_path, capsys):
    argv = run_args(demo_corpus(tmp_path / "data"), tmp_path / "run", "--steps", "40",
                    "--eval-every", "20", "--backup-every", "1", "--set",
                    "learning_rate_scale=1e6", "--set", "warmup_steps=1")
    assert train.main(argv) == 2
    error = capsys.readouterr().err
    assert "loss became NaN at step" in error
    diverged = int(error.split("loss became NaN at step ")[1].split(";")[0])
    marks = list_backups(tmp_path / "run" / "backup")
    assert marks and int(marks[-1].name[5:13]) < diverged  # no backup of a diverged step
    assert train.main(argv) == 2  # the same learning rate diverges again, from there
    restored = int(capsys.readouterr().err.split("restored step ")[1].split(" ")[0])
    assert restored == int(marks[-1].name[5:13])
