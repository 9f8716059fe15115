"""Mirrored training over 8 logical CPU replicas matches one device; two multi-worker
processes train to completion. Each runs in a subprocess: devices are fixed at TF start."""
import json
import os
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from keras_transformer.data import write_demo_corpus
from conftest import final_json, run_script_json

ROOT = Path(__file__).resolve().parents[1]

ONE_STEP_SCRIPT = textwrap.dedent("""
    import json, sys
    import numpy as np
    from keras_transformer.training.strategy import make_strategy
    mirrored = make_strategy(cpu_replicas=8)
    import keras, tensorflow as tf
    import keras_transformer as kt

    config = kt.TransformerConfig.preset("tiny", vocab_size=40, d_model=32, d_ff=64,
                                         num_layers=1, dropout=0.0)
    rng = np.random.default_rng(0)
    lengths = rng.integers(2, 9, size=(16, 2))  # uneven padding: replicas see unequal tokens
    def padded(rows):
        out = np.zeros((16, 9), "int32")
        for i, row in enumerate(rows):
            out[i, :len(row)] = row
        return out
    sources = [list(rng.integers(4, 40, n)) + [kt.EOS_ID] for n in lengths[:, 0]]
    targets = [list(rng.integers(4, 40, n)) for n in lengths[:, 1]]
    batch = ((padded(sources), padded([[kt.BOS_ID] + t for t in targets])),
             padded([t + [kt.EOS_ID] for t in targets]))
    keras.utils.set_random_seed(0)
    initial = kt.Transformer(config).get_weights()

    def one_step(strategy):
        with strategy.scope():
            model = kt.Transformer(config)
            model.set_weights(initial)
            # SGD: its update is linear in the gradient. (Adam's first step is about
            # lr * sign(g), which turns float noise in near-zero gradients into full steps.)
            model.compile(optimizer=keras.optimizers.SGD(learning_rate=1.0),
                          loss=kt.LabelSmoothedCrossEntropy(0.1))
        history = model.fit(tf.data.Dataset.from_tensors(batch), epochs=1, verbose=0)
        return history.history["loss"][0], model.get_weights()

    loss_one, weights_one = one_step(tf.distribute.get_strategy())
    loss_eight, weights_eight = one_step(mirrored)
    print(json.dumps({
        "replicas": mirrored.num_replicas_in_sync, "loss_one": loss_one,
        "loss_eight": loss_eight,
        "max_weight_difference": max(float(np.max(np.abs(a - b)))
                                     for a, b in zip(weights_one, weights_eight)),
        "max_update": max(float(np.max(np.abs(a - b)))
                          for a, b in zip(weights_one, initial))}))
""")


@pytest.mark.slow
def test_eight_cpu_replicas_match_one_device():
    result = run_script_json(ONE_STEP_SCRIPT)
    assert result["replicas"] == 8
    assert result["loss_eight"] == pytest.approx(result["loss_one"], rel=1e-5)
    assert result["max_update"] > 1e-5  # the step did change the weights
    assert result["max_weight_difference"] < 1e-4 * result["max_update"]


def free_ports(count: int) -> list[int]:
    sockets = [socket.socket() for _ in range(count)]
    for sock in sockets:
        sock.bind(("localhost", 0))
    ports = [sock.getsockname()[1] for sock in sockets]
    for sock in sockets:
        sock.close()
    return ports


@pytest.mark.slow
def test_two_workers_train_to_completion(tmp_path):
    paths = write_demo_corpus(tmp_path / "data")
    workers = [f"localhost:{port}" for port in free_ports(2)]
    processes = []
    for index in range(2):
        tf_config = {"cluster": {"worker": workers}, "task": {"type": "worker", "index": index}}
        argv = [sys.executable, "-m", "trainers.train", "--set", "vocab_size=400",
                "--set", "d_model=32", "--set", "d_ff=64", "--set", "num_layers=1",
                "--set", "batch_tokens=512", "--set", "max_length=48",
                "--train-src", paths["train"][0], "--train-tgt", paths["train"][1],
                "--dev-src", paths["dev"][0], "--dev-tgt", paths["dev"][1],
                "--steps", "3", "--eval-every", "3", "--eval-sentences", "4",
                "--no-export", "--output-dir", str(tmp_path / f"worker{index}")]
        processes.append(subprocess.Popen(
            argv, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
            env={**os.environ, "TF_CONFIG": json.dumps(tf_config)}))
    try:
        outputs = [process.communicate(timeout=400)[0] for process in processes]
    finally:
        for process in processes:
            if process.poll() is None:
                process.kill()
    for process, output in zip(processes, outputs):
        assert process.returncode == 0, output[-3000:]
        assert "on 2 replica(s)" in output
        assert final_json(output)["steps"] == 3
