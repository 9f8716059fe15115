"""kt-train runs stopped and started again in processes of their own: killed with SIGKILL at
many moments, out of disk space, and restarted on another number of replicas. A resumed run
trains the batches of an uninterrupted one to its weights, or a restart that would change the
data stream is refused naming the old and new values."""
import errno
import json
import os
import random
import re
import signal
import subprocess
import time
from pathlib import Path

import keras
import numpy as np
import pytest

from helpers import demo_corpus, final_json, final_weights, run_args, start_training
from keras_transformer.data import write_demo_corpus
from keras_transformer.training.backup import list_backups
from keras_transformer.training.batch_log import read_batch_log
from trainers import train
from warm_commands import start_warm

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


@pytest.mark.slow
@pytest.mark.system
def test_a_restart_on_another_number_of_replicas_is_refused(tmp_path, capsys, warm):
    """Each replica takes batch_tokens / replicas: another count is another batch plan, so
    the restored step would index other pairs. (The 2-replica run in a process of its own,
    started warm: devices are fixed at TensorFlow's start; the refused restart in this one.)"""
    data = write_demo_corpus(tmp_path / "data")
    first = start_warm(warm, "kt-train", run_args(
        data, tmp_path / "run", "--cpu-replicas", "2", "--steps", "2", "--backup-every", "2"),
        tmp_path / "first.log")
    assert first.wait(timeout=600) == 0, (tmp_path / "first.log").read_text()[-2000:]
    capsys.readouterr()
    assert train.main(run_args(data, tmp_path / "run", "--steps", "4", "--backup-every",
                               "2")) == 2
    err = capsys.readouterr().err
    assert "replicas: 2 -> 1" in err, err[-2000:]
