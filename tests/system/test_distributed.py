"""Mirrored training over 8 logical CPU replicas matches one device; two multi-worker
processes agree, fail together and resume together. Each runs in a process of its own (devices
are fixed at TF start), started warm (the `warm` fixture: a fork of a process that imported
TensorFlow)."""
import json
import os
import socket
import subprocess
import textwrap
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from helpers import demo_corpus, final_json, final_weights, run_script_json
from warm_commands import SCRIPT_COMMAND, WarmProcess, start_warm

pytestmark = pytest.mark.system  # clusters and replicas in processes of their own
# Replicas of the tests of what unequal replicas do (an overflow on one, the logged loss): two
# show it as eight do (replica 1 is one whose gradients Keras's own loss scaling never reads,
# and its batch has other rows and tokens than replica 0's), at a quarter of the tracing (each
# replica's step is a copy of the graph); `test_eight_cpu_replicas_match_one_device` keeps
# eight.
REPLICAS = 2


def micro_run(paths: dict[str, tuple[str, str]], batch_tokens: int, *options: str) -> list[str]:
    """kt-train's options of a one-layer model of width 32 on the demo corpus `paths`
    (`demo_corpus`), `batch_tokens` tokens a step, with no attention images and no export;
    then `options`."""
    return ["--set", "vocab_size=400", "--set", "d_model=32", "--set", "d_ff=64",
            "--set", "num_layers=1", "--set", f"batch_tokens={batch_tokens}",
            "--set", "max_length=48", "--train-src", paths["train"][0],
            "--train-tgt", paths["train"][1], "--dev-src", paths["dev"][0],
            "--dev-tgt", paths["dev"][1], "--attention-sentences", "0", "--no-export", *options]


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
def test_eight_cpu_replicas_match_one_device(warm):
    result = run_script_json(ONE_STEP_SCRIPT, warm)
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


def batches(run_dirs: list[Path], steps: int) -> list[list[str]]:
    """The digests of the batches each of the first `steps` steps trained on (`--log-batches`),
    replica by replica: `run_dirs` holds one run over two replicas, or the two one-replica
    workers of a cluster in worker order."""
    from keras_transformer.training.batch_log import read_batch_log

    logs = [read_batch_log(run_dir / "batches.tsv", per_step=2 // len(run_dirs))
            for run_dir in run_dirs]
    return [[digest for log in logs for digest in log[step]] for step in range(1, steps + 1)]


@pytest.mark.slow
def test_two_workers_agree_fail_together_and_resume_together(tmp_path, warm):
    """Two MultiWorkerMirroredStrategy processes: a worker killed mid-run makes the other stop
    within a bounded time with a clear error; both restarted resume from their newest common
    backup and end with the same weights, those of one process with two replicas trained on
    the same batches (each worker's are those of one of its replicas)."""
    import numpy as np

    paths = demo_corpus(tmp_path / "data", train_lines=3000)
    # A backup every 3 steps: the kill, once step 6 is backed up, lands mid-run, before the dev
    # evaluation at step 12.
    steps = 24
    common = micro_run(paths, 512, "--precision", "float32", "--kernels", "fast",
                       "--steps", str(steps), "--eval-every", "12", "--eval-sentences", "4",
                       "--backup-every", "3", "--log-batches")
    workers = [f"localhost:{port}" for port in free_ports(2)]
    logs = [tmp_path / f"worker{index}.log" for index in range(2)]
    # Progress lines on different clocks (one every step, almost none) must not make the
    # workers' collectives differ.
    progress = ["0.001", "1000"]

    def start(index: int) -> WarmProcess:
        tf_config = {"cluster": {"worker": workers}, "task": {"type": "worker", "index": index}}
        return start_warm(warm, "kt-train", [*common, "--output-dir",
                                             str(tmp_path / f"worker{index}"),
                                             "--progress-seconds", progress[index]], logs[index],
                          env={**os.environ, "TF_CONFIG": json.dumps(tf_config)})

    processes = [start(0), start(1)]
    try:
        deadline = time.monotonic() + 300
        backups = tmp_path / "worker1" / "backup"
        while time.monotonic() < deadline and not list(backups.glob("step-0000000[6-9].json")):
            time.sleep(0.05)
        processes[1].kill()
        killed = time.monotonic()
        assert processes[0].wait(timeout=180) == 2
        assert time.monotonic() - killed < 180
        assert "another worker of the cluster stopped" in logs[0].read_text()
        processes = [start(0), start(1)]
        codes = [process.wait(timeout=600) for process in processes]
    finally:
        for process in processes:
            if process.poll() is None:
                process.kill()
    outputs = [log.read_text() for log in logs]
    assert codes == [0, 0], outputs[0][-2000:] + outputs[1][-2000:]
    resumed = [int(output.split("restored step ")[1].split(" ")[0]) for output in outputs]
    assert resumed[0] == resumed[1] > 0 and resumed[0] % 3 == 0
    assert all(final_json(output)["steps"] == steps for output in outputs)
    cluster = [tmp_path / "worker0", tmp_path / "worker1"]
    for ours, theirs in zip(*map(final_weights, cluster)):
        np.testing.assert_allclose(ours, theirs, rtol=1e-6, atol=1e-7)

    # One process with two replicas trains on the same global batches to the same weights.
    single = start_warm(warm, "kt-train", [*common, "--cpu-replicas", "2", "--output-dir",
                                           str(tmp_path / "single")], tmp_path / "single.log")
    assert single.wait(timeout=600) == 0, (tmp_path / "single.log").read_text()[-3000:]
    assert batches(cluster, steps) == batches([tmp_path / "single"], steps)
    # The cluster's all-reduce sums the gradients in another order than one process does;
    # Adam can turn that float noise in a rarely-updated weight's near-zero gradient into a
    # step: up to ~5e-5 over 60 steps (measured). A run one step short differs in 26 of the 31
    # weight arrays, by up to 6e-4.
    for ours, theirs in zip(final_weights(cluster[0]), final_weights(tmp_path / "single")):
        np.testing.assert_allclose(ours, theirs, rtol=1e-3, atol=1e-4)


# --- replicas that differ: dropout, float16 overflow, token counts ----------------------------

# Appended to a script that sets up its strategy and data and defines `measure()`: its figures
# under each implementation, in one process (the set-up, and the process, shared by the tests of
# both sets; each set's model and steps are traced anew under it).
EACH_KERNEL_SET = textwrap.dedent("""
    from keras_transformer import fast
    results = {}
    for kernels in fast.IMPLEMENTATIONS:
        with fast.implementation_scope(kernels):
            results[kernels] = {"kernels": fast.active(), **measure()}
    print(json.dumps(results))
""")


@pytest.fixture(scope="module")
def by_implementation(warm) -> Callable[[str], dict[str, dict]]:
    """Runs a script (`EACH_KERNEL_SET`) once for the module, within 240 s (a replica that
    waited on another would hang it); its figures by implementation."""
    results: dict[str, dict[str, dict]] = {}

    def figures(script: str) -> dict[str, dict]:
        if script not in results:
            results[script] = run_script_json(script + EACH_KERNEL_SET, warm, timeout=240)
        return results[script]

    return figures


DROPOUT_SCRIPT = textwrap.dedent("""
    import json
    import numpy as np
    from keras_transformer.training.strategy import make_strategy
    strategy = make_strategy(cpu_replicas=8)
    import tensorflow as tf
    from keras_transformer.layers import HookDropout

    def masks(seed):
        with strategy.scope():
            layer = HookDropout(0.5, seed=seed)
        ones = tf.ones((64, 64))
        drawn = strategy.run(tf.function(lambda: layer(ones, training=True)))
        return [(mask.numpy() == 0) for mask in strategy.experimental_local_results(drawn)]

    def measure():
        first, again, other = masks(3), masks(3), masks(4)
        alone = HookDropout(0.5, seed=3)(tf.ones((64, 64)), training=True).numpy() == 0
        return {
            "distinct": len({mask.tobytes() for mask in first}),
            "pairwise_agreement": max(float((a == b).mean()) for i, a in enumerate(first)
                                      for b in first[i + 1:]),
            "repeat": all(np.array_equal(a, b) for a, b in zip(first, again)),
            "other_seed_differs": not any(np.array_equal(a, b) for a, b in zip(first, other)),
            "replica_0_as_alone": bool(np.array_equal(first[0], alone))}
""")


@pytest.mark.slow
@pytest.mark.parametrize("kernels", ["reference", "fast"])
def test_replicas_draw_their_own_dropout_masks_repeatably(kernels, by_implementation):
    """Eight replicas of one HookDropout draw eight different masks (about half their
    positions agree, as independent masks at rate 0.5 do), the same eight again from the same
    seed, and replica 0 the mask a lone device draws."""
    result = by_implementation(DROPOUT_SCRIPT)[kernels]
    assert result["kernels"] == kernels
    assert result["distinct"] == 8
    assert result["pairwise_agreement"] < 0.6
    assert result["repeat"] and result["other_seed_differs"] and result["replica_0_as_alone"]


OVERFLOW_SCRIPT = textwrap.dedent("""
    import json
    import numpy as np
    from keras_transformer.training.strategy import make_strategy
    strategy = make_strategy(cpu_replicas=REPLICAS)
    import tensorflow as tf
    import keras_transformer as kt
    from keras_transformer.precision import precision_scope
    from keras_transformer.training.run import compiled_model

    overflowing = REPLICAS - 1  # the replica whose gradients overflow: not replica 0
    recipe = kt.Recipe.preset("tiny", vocab_size=40, d_model=32, d_ff=64, num_layers=1)

    def replica_batches():
        # Two steps; element r of a step is replica r's batch (rows differ between replicas).
        # In step 1 one replica's batch has a loss gradient that overflows float16.
        rng = np.random.default_rng(0)  # the same batches for each implementation
        for step in range(2):
            for replica in range(REPLICAS):
                rows = 2 + replica
                ids = rng.integers(4, 40, size=(rows, 6)).astype("int32")
                weights = np.ones((rows, 6), "float32")
                if step == 0 and replica == overflowing:
                    weights[0, 0] = 1e30
                yield (ids, ids), ids, weights

    spec = tf.TensorSpec([None, None], tf.int32)
    data = strategy.distribute_datasets_from_function(lambda context: (
        tf.data.Dataset.from_generator(replica_batches, output_signature=(
            (spec, spec), spec, tf.TensorSpec([None, None], tf.float32)))))

    def measure():
        with strategy.scope(), precision_scope("mixed_float16"):
            model, _ = compiled_model(recipe)
        initial_scale = model.optimizer.initial_scale
        history = model.fit(data, epochs=2, steps_per_epoch=1, verbose=0)
        optimizer = model.optimizer
        return {
            "optimizer": type(optimizer).__name__, "losses": history.history["loss"],
            "weights_finite": all(bool(np.isfinite(w).all()) for w in model.get_weights()),
            "moments_finite": all(bool(np.isfinite(v.numpy()).all())
                                  for v in optimizer.inner_optimizer.variables),
            "scale_ratio": float(optimizer.dynamic_scale.numpy()) / initial_scale,
            "iterations": int(optimizer.iterations.numpy())}
""").replace("REPLICAS", str(REPLICAS))


@pytest.mark.slow
@pytest.mark.parametrize("kernels", ["fast", "reference"])
def test_an_overflow_on_any_replica_skips_the_step_on_all(kernels, by_implementation):
    """mixed_float16 over 2 replicas of unequal batches, kt-train's model and optimizer (the
    fused Adam with fast kernels): a float16 overflow in the gradients of replica 1 skips the
    step everywhere and halves the loss scale once; the next step trains; no inf or NaN
    reaches a weight or an Adam moment (Keras's own loss scaling decides from replica 0's
    gradients alone). The step finishes within the script's time bound (no replica waits on
    another)."""
    result = by_implementation(OVERFLOW_SCRIPT)[kernels]
    assert result["kernels"] == kernels and result["optimizer"] == "LossScaleOptimizer"
    assert result["weights_finite"] and result["moments_finite"]
    assert result["scale_ratio"] == 0.5
    assert result["iterations"] == 1  # the overflowing step skipped, the next one applied
    assert result["losses"][0] > 1e20 and result["losses"][1] < 10  # logged, not applied


LOGGED_LOSS_SCRIPT = textwrap.dedent("""
    import json
    import numpy as np
    from keras_transformer.training.strategy import make_strategy
    strategy = make_strategy(cpu_replicas=REPLICAS)
    import keras, tensorflow as tf
    import keras_transformer as kt
    from keras_transformer import fast

    config = kt.TransformerConfig.preset("tiny", vocab_size=40, d_model=32, d_ff=64,
                                         num_layers=1, dropout=0.0)
    rng = np.random.default_rng(1)
    batches = []  # replica r's batch: 1 + 2r rows of their own length, unevenly padded
    for replica in range(REPLICAS):
        rows, width = 1 + 2 * replica, int(rng.integers(3, 12))
        ids = np.zeros((rows, width), "int32")
        for row, length in enumerate(rng.integers(1, width + 1, size=rows)):
            ids[row, :length] = rng.integers(4, 40, size=length)
        batches.append(((ids, ids), ids))
    keras.utils.set_random_seed(0)
    initial = kt.Transformer(config).get_weights()

    def logged_loss(strategy, data):
        with strategy.scope():
            model = fast.FastTransformer(config)
            model.set_weights(initial)
            model.compile(optimizer=keras.optimizers.SGD(0.0),
                          loss=kt.LabelSmoothedCrossEntropy(0.1))
        return model.fit(data, epochs=1, steps_per_epoch=1, verbose=0).history["loss"][0]

    spec = tf.TensorSpec([None, None], tf.int32)
    per_replica = strategy.distribute_datasets_from_function(lambda context: (
        tf.data.Dataset.from_generator(lambda: iter(batches),
                                       output_signature=((spec, spec), spec))))
    width = max(batch[1].shape[1] for batch in batches)
    whole = np.concatenate([np.pad(batch[1], [(0, 0), (0, width - batch[1].shape[1])])
                            for batch in batches])
    one_device = tf.data.Dataset.from_tensors(((whole, whole), whole))

    def measure():
        return {"replicas": logged_loss(strategy, per_replica),
                "one": logged_loss(tf.distribute.get_strategy(), one_device)}
""").replace("REPLICAS", str(REPLICAS))


@pytest.mark.slow
@pytest.mark.parametrize("kernels", ["reference", "fast"])
def test_the_logged_loss_is_the_global_batch_per_token_loss(kernels, by_implementation):
    """Two replicas with batches of 1 and 3 rows and different padding log the loss one
    device logs on all their rows together (Keras's own steps weight replicas by rows)."""
    result = by_implementation(LOGGED_LOSS_SCRIPT)[kernels]
    assert result["kernels"] == kernels
    assert result["replicas"] == pytest.approx(result["one"], rel=1e-5)


WORKER_OVERFLOW_SCRIPT = textwrap.dedent("""
    import json
    import numpy as np
    from keras_transformer.training.strategy import make_strategy
    strategy = make_strategy()
    import tensorflow as tf
    import keras_transformer as kt
    from keras_transformer.precision import precision_scope
    from keras_transformer.training.run import compiled_model

    worker = strategy.cluster_resolver.task_id
    recipe = kt.Recipe.preset("tiny", vocab_size=40, d_model=32, d_ff=64, num_layers=1)

    def batches(context):
        rng = np.random.default_rng(context.input_pipeline_id)
        def generate():
            for step in range(2):  # worker 1's first batch overflows float16
                ids = rng.integers(4, 40, size=(3, 6)).astype("int32")
                weights = np.ones((3, 6), "float32")
                if step == 0 and context.input_pipeline_id == 1:
                    weights[0, 0] = 1e30
                yield (ids, ids), ids, weights
        spec = tf.TensorSpec([3, 6], tf.int32)
        return tf.data.Dataset.from_generator(generate, output_signature=(
            (spec, spec), spec, tf.TensorSpec([3, 6], tf.float32)))

    with strategy.scope(), precision_scope("mixed_float16"):
        model, _ = compiled_model(recipe)
    initial_scale = model.optimizer.initial_scale
    model.fit(strategy.distribute_datasets_from_function(batches), epochs=2,
              steps_per_epoch=1, verbose=0)
    optimizer = model.optimizer
    print(json.dumps({
        "worker": worker,
        "weights_finite": all(bool(np.isfinite(w).all()) for w in model.get_weights()),
        "moments_finite": all(bool(np.isfinite(v.numpy()).all())
                              for v in optimizer.inner_optimizer.variables),
        "scale_ratio": float(optimizer.dynamic_scale.numpy()) / initial_scale,
        "iterations": int(optimizer.iterations.numpy()),
        "weights_sum": float(sum(np.abs(w).sum() for w in model.get_weights()))}))
""")


@pytest.mark.slow
def test_an_overflow_on_one_worker_skips_the_step_on_both(warm):
    """Two MultiWorkerMirroredStrategy processes under mixed_float16: an overflow in worker 1's
    gradients skips the step on both workers, halves both scales once, and both finish (no
    worker waits on a collective the other skipped) with equal, finite weights and moments.
    (XLA-compiled, the step cannot run here: TensorFlow compiles no collective for CPUs.)"""
    workers = [f"localhost:{port}" for port in free_ports(2)]
    processes = []
    for index in range(2):
        tf_config = {"cluster": {"worker": workers}, "task": {"type": "worker", "index": index}}
        processes.append(start_warm(
            warm, SCRIPT_COMMAND, ["-c", WORKER_OVERFLOW_SCRIPT], stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, text=True,
            env={**os.environ, "TF_CONFIG": json.dumps(tf_config)}))
    try:
        outputs = [process.communicate(timeout=300) for process in processes]
    finally:
        for process in processes:
            process.kill()
    assert [process.returncode for process in processes] == [0, 0], (
        outputs[0][1][-2000:] + outputs[1][1][-2000:])
    results = [json.loads(stdout.strip().splitlines()[-1]) for stdout, _ in outputs]
    for result in results:
        assert result["weights_finite"] and result["moments_finite"]
        assert result["scale_ratio"] == 0.5 and result["iterations"] == 1
    assert results[0]["weights_sum"] == pytest.approx(results[1]["weights_sum"], rel=1e-6)


@pytest.mark.slow
def test_workers_take_the_chiefs_hardware_choices(tmp_path, monkeypatch, warm):
    """Two workers whose probes would choose differently (their probe caches disagree: the
    chief's says float32 and the reference kernels, the other's bfloat16 and the fast ones)
    both train with the chief's choices, to the same weights."""
    import numpy as np
    import tensorflow as tf

    from keras_transformer.training import probes
    from keras_transformer.training.run import hardware_choices
    from trainers import train

    paths = demo_corpus(tmp_path / "data", train_lines=3000)
    common = micro_run(paths, 512, "--precision", "auto", "--kernels", "auto", "--steps", "2",
                       "--eval-every", "2", "--eval-sentences", "4", "--backup-every", "2")
    winners = [("float32", "reference"), ("bfloat16", "fast")]  # the chief's, the other's
    for index, (dtype, kernels) in enumerate(winners):  # each worker's cache, as kt-train keys it
        monkeypatch.setenv("KT_CACHE_DIR", str(tmp_path / f"cache{index}"))
        monkeypatch.setattr(probes, "_matmul_gflops",
                            lambda candidate, *sizes, dtype=dtype: 400.0 if candidate == dtype
                            else 100.0)
        monkeypatch.setattr(probes, "_training_steps_per_second",
                            lambda candidate, *sizes, kernels=kernels: 2.0
                            if candidate == kernels else 1.0)
        command = train.parse_args([*common, "--output-dir", str(tmp_path / f"probe{index}")])
        chosen = hardware_choices(command.options, command.recipe, {},
                                  tf.distribute.get_strategy())
        assert chosen[:2] == (probes.POLICY_OF_DTYPE[dtype], kernels)
    monkeypatch.undo()

    workers = [f"localhost:{port}" for port in free_ports(2)]
    processes = []
    for index in range(2):
        tf_config = {"cluster": {"worker": workers}, "task": {"type": "worker", "index": index}}
        processes.append(start_warm(
            warm, "kt-train", [*common, "--output-dir", str(tmp_path / f"worker{index}")],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
            env={**os.environ, "TF_CONFIG": json.dumps(tf_config),
                 "KT_CACHE_DIR": str(tmp_path / f"cache{index}")}))
    try:
        outputs = [process.communicate(timeout=400)[0] for process in processes]
    finally:
        for process in processes:
            process.kill()
    assert [process.returncode for process in processes] == [0, 0], (
        outputs[0][-2000:] + outputs[1][-2000:])
    for output in outputs:
        summary = final_json(output)
        assert (summary["precision"], summary["kernels"]) == ("float32", "reference")
    assert "precision float32 (the chief's choice)" in outputs[1]
    assert "kernels reference (the chief's choice)" in outputs[1]
    for ours, theirs in zip(*map(final_weights, [tmp_path / "worker0", tmp_path / "worker1"])):
        np.testing.assert_allclose(ours, theirs, rtol=1e-6, atol=1e-7)


@pytest.mark.slow
def test_replicas_with_dropout_and_float16_resume_exactly(tmp_path, warm):
    """kt-train over 2 CPU replicas with dropout on and mixed_float16 (dynamic loss scaling):
    a run stopped after 4 steps and started again ends with the weights of an uninterrupted
    8-step run, each step trained on the same batches. (Two, not eight: each kt-train start
    traces a copy of the step per replica, minutes over 8 logical CPUs on some CPUs;
    `test_eight_cpu_replicas_match_one_device` keeps eight.)"""
    import numpy as np

    paths = demo_corpus(tmp_path / "data", train_lines=3000)
    # The stop at step 4 falls on a backup and a dev evaluation.
    common = micro_run(paths, 2048, "--set", "dropout=0.3", "--cpu-replicas", "2",
                       "--precision", "mixed_float16", "--kernels", "fast", "--eval-every", "4",
                       "--eval-sentences", "2", "--backup-every", "4", "--log-batches")

    def run(name: str, steps: int) -> str:
        process = start_warm(warm, "kt-train", [*common, "--steps", str(steps), "--output-dir",
                                                str(tmp_path / name)],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        stderr = process.communicate(timeout=600)[1]
        assert process.returncode == 0, stderr[-3000:]
        return stderr

    run("uninterrupted", 8)
    run("resumed", 4)
    assert "restored step 4 " in run("resumed", 8)
    assert batches([tmp_path / "resumed"], 8) == batches([tmp_path / "uninterrupted"], 8)
    for ours, theirs in zip(final_weights(tmp_path / "resumed"),
                            final_weights(tmp_path / "uninterrupted")):
        np.testing.assert_allclose(ours, theirs, rtol=1e-6, atol=1e-7)
