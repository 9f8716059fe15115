"""Training that loses nothing beyond the last backup: torn, garbled and missing backups and
checkpoints, failed writes (a full disk), non-finite weights, loss-scale overflow, and runs
killed with SIGKILL at many moments."""
import errno
import json
import os
import random
import re
import shutil
import signal
import subprocess
import time
from pathlib import Path

import keras
import numpy as np
import pytest

import keras_transformer as kt
from helpers import final_json, final_weights
from keras_transformer.data import SubwordTokenizer
from keras_transformer.training.backup import (BackupError, list_backups, restore_latest,
                                               write_backup)
from keras_transformer.training.batch_log import read_batch_log
from keras_transformer.training.checkpoints import save_checkpoint
from keras_transformer.precision import precision_scope
from keras_transformer.training.run_dir import RunDir
from trainers import average_checkpoints, evaluate, export, train
from keras_transformer.training.run import compiled_model
from helpers import demo_corpus, run_args, start_training
from warm_commands import start_warm

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

# The runs compared with `uninterrupted`: their steps and options (but `--steps`).
STEPS = 32
RESTARTED = ("--eval-every", "12", "--backup-every", "4", "--checkpoint-every-steps", "6",
             "--keep-checkpoints", "3", "--log-batches")


@pytest.fixture(scope="module")
def uninterrupted(warm, tmp_path_factory) -> tuple[dict, Path]:
    """A run of `STEPS` steps with the options `RESTARTED` that nothing stops (started warm):
    what the runs that are stopped and restarted (killed, out of disk space) are compared
    with (`assert_trains_as`). Its data (`demo_corpus`, which they train on too) and its run
    directory."""
    root = tmp_path_factory.mktemp("uninterrupted")
    data, run_dir, log = demo_corpus(root / "data"), root / "run", root / "run.log"
    process = start_warm(warm, "kt-train", run_args(data, run_dir, "--steps", str(STEPS),
                                                    *RESTARTED), log)
    assert process.wait(timeout=600) == 0, log.read_text()[-3000:]
    return data, run_dir


def assert_trains_as(run_dir: Path, reference_dir: Path) -> None:
    """The finished run in `run_dir` trained each of its `STEPS` steps on the batch the run in
    `reference_dir` did, to the same weights."""
    expected = read_batch_log(reference_dir / "batches.tsv")
    trained_on = read_batch_log(run_dir / "batches.tsv")
    assert ([trained_on[step] for step in range(1, STEPS + 1)]
            == [expected[step] for step in range(1, STEPS + 1)])
    for ours, theirs in zip(final_weights(run_dir), final_weights(reference_dir)):
        np.testing.assert_allclose(ours, theirs, rtol=1e-5, atol=1e-6)


def wait_for(condition, process: subprocess.Popen, seconds: float = 240.0,
             every: float = 0.0005) -> bool:
    """Polls `condition()` until it holds (True), or the process ends or time runs out."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and process.poll() is None:
        if condition():
            return True
        time.sleep(every)
    return False


@pytest.mark.slow
@pytest.mark.system
def test_killed_runs_train_the_same_batches_to_the_same_weights(tmp_path, warm,
                                                                uninterrupted):
    """A run finished at half the steps, then continued with the whole `--steps` (a longer
    budget) and killed with SIGKILL at four moments (during a backup's and a checkpoint's
    write, during a dev evaluation, at a random time); restarted with the same command each
    time, it ends at the same step as an uninterrupted run, every step trained on the same
    batch, with the same weights; the last start's output is kt-train's own lines and
    summary only (nothing from TensorFlow, sentencepiece or Python warnings). The starts
    before the last are warm (forks of a process that imported TensorFlow: `warm`);
    the last is a user's, from the shell. The uninterrupted run is `uninterrupted`."""
    def start(argv: list[str], log: Path):
        return start_warm(warm, "kt-train", argv, log)

    steps, (data, reference_dir) = STEPS, uninterrupted
    killed_dir, log = tmp_path / "killed", tmp_path / "killed.log"
    argv = run_args(data, killed_dir, "--steps", str(steps), *RESTARTED)
    half = start(argv + ["--steps", str(steps // 2)], log)  # the last --steps counts
    assert half.wait(timeout=600) == 0, log.read_text()[-3000:]
    assert final_json(log.read_text())["steps"] == steps // 2
    backup, checkpoints = killed_dir / "backup", killed_dir / "checkpoints"
    rng = random.Random(7)

    def partial_writes() -> bool:
        return any(directory.is_dir() and any(name.startswith(".tmp-")
                                              for name in os.listdir(directory))
                   for directory in (backup, checkpoints))

    def writing(directory: Path):
        return lambda: directory.is_dir() and any(name.startswith(".tmp-")
                                                  for name in os.listdir(directory))

    def evaluating(seen: set):
        # An evaluation step's backup is written just before the evaluation starts.
        return lambda: any(int(mark.name[5:13]) % 12 == 0 and mark.name not in seen
                           for mark in list_backups(backup))

    # The last kill at a random step of the rest of the run (after the evaluation of 3/4 of
    # the steps, which the third kill stops; 4 steps before the end at the latest), a random
    # time into the step.
    moments = ["backup write", "checkpoint write", "evaluation",
               rng.randrange(steps * 3 // 4 + 2, steps - 4)]
    kills, torn = 0, 0
    for moment in moments:
        seen = {mark.name for mark in list_backups(backup)}
        offset = log.stat().st_size if log.exists() else 0

        def output() -> str:  # of this process
            return log.read_bytes()[offset:].decode(errors="replace")

        process = start(argv, log)
        wait_for(lambda: "training from global step" in output(), process)
        if isinstance(moment, int):
            wait_for(lambda: f"step {moment}/{steps} " in output(), process, every=0.01)
            time.sleep(rng.uniform(0.0, 0.1))
        elif moment == "evaluation":
            wait_for(evaluating(seen), process)
            time.sleep(0.2)
        else:
            wait_for(writing(backup if moment == "backup write" else checkpoints), process)
        if process.poll() is None:
            process.send_signal(signal.SIGKILL)
            kills += 1
        process.wait()
        torn += partial_writes()
    offset = log.stat().st_size
    last = start_training(argv, log)
    assert last.wait(timeout=600) == 0, log.read_text()[-3000:]
    assert kills >= 3 and torn >= 1, (kills, torn, log.read_text()[-3000:])
    summary = final_json(log.read_text())
    assert summary["steps"] == steps
    others = [line for line in log.read_bytes()[offset:].decode().splitlines()
              if not line.startswith("kt-train: ")]
    assert json.loads("\n".join(others)) == summary, "\n".join(others)
    # What each kill lost: the steps after the newest backup, at most one backup interval.
    runs = log.read_text(errors="replace").split("training from global step ")[1:]
    for killed, resumed in zip(runs, runs[1:]):
        reached = max([int(step) for step in re.findall(r"step (\d+)/", killed)], default=0)
        assert int(resumed.split()[0]) >= reached - 4, (reached, resumed.split()[0])
    assert_trains_as(killed_dir, reference_dir)


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


@pytest.mark.slow
@pytest.mark.system  # compared with a run of its own process (`uninterrupted`)
def test_a_full_disk_costs_backups_not_the_run(tmp_path, monkeypatch, capsys, uninterrupted):
    """Writes fail (ENOSPC) while the disk is full: backups and checkpoints are skipped with a
    warning and training goes on; a full disk at the end stops the run with a message, and
    the same command finishes it from the last backup once there is space, having trained
    the batches of a run with a disk never full (`uninterrupted`) to its weights."""
    real_save = keras.Model.save_weights
    full = {"from_step": 7, "to_step": 13}

    def save_weights(self, filepath, overwrite=True):
        step = int(self.optimizer.iterations.numpy()) if self.optimizer else 0
        if full["from_step"] <= step <= full["to_step"]:
            Path(filepath).write_bytes(b"\x89HDF\r\n partial")
            raise OSError(errno.ENOSPC, "No space left on device", str(filepath))
        return real_save(self, filepath, overwrite=overwrite)

    monkeypatch.setattr(keras.Model, "save_weights", save_weights)
    data, reference_dir = uninterrupted
    argv = run_args(data, tmp_path / "run", "--steps", "24", *RESTARTED)
    assert train.main(argv) == 0
    error = capsys.readouterr().err
    for step in (8, 12):
        assert f"backup of step {step} not written" in error
    assert "checkpoint of step 12 not written" in error
    run = tmp_path / "run"
    assert [mark.name for mark in list_backups(run / "backup")] == ["step-00000020.json",
                                                                   "step-00000024.json"]
    assert sorted(path.name for path in (run / "checkpoints").iterdir()) == [
        "ckpt-00000006.weights.h5", "ckpt-00000018.weights.h5", "ckpt-00000024.weights.h5"]

    # The disk fills up again at the very end: no final weights, a clear error, exit 1.
    full.update(from_step=30, to_step=10**9)
    argv[argv.index("24")] = str(STEPS)  # 32: full from step 30, after the backup of 28
    assert train.main(argv) == 1
    error = capsys.readouterr().err
    assert "No space left on device" in error and "run the same command again" in error
    full.update(from_step=10**9)
    assert train.main(argv) == 0
    error = capsys.readouterr().err
    assert "restored step 28" in error
    assert_trains_as(run, reference_dir)
