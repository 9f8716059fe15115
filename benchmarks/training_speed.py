"""Training throughput on CPU: our Keras 3 model vs the TF Model Garden `Seq2SeqTransformer`.

    PYTHONPATH=. python benchmarks/training_speed.py --configs small,base \
        --batch-tokens 4096,8192 --precisions float32,mixed_bfloat16 [--jit-compile] \
        [--steps 20] [--vocab-size 32000] [--model-garden-python /work/bench-venv/bin/python]

A step is a full training step: forward, label-smoothed loss, backward and the Adam update with
the paper's schedule (section 5.3). Method:

* Data: newstest2014 en->de (shared data), tokenized with an 8k-piece SubwordTokenizer learned
  on both sides, made into ((source, target_in), target_out) batches by our training pipeline
  (`make_training_dataset`: seeded shuffle, length buckets, `--batch-tokens` positions per
  side and batch, pairs over `--max-length` dropped). The first `--steps` batches of that epoch
  (cycled if the epoch is shorter) are the timed sequence; they are saved once per batch
  budget to an .npz and both systems train on exactly these batches in the same order.
  The model vocabulary is `--vocab-size` (default 32000, as in the Model Garden reference
  setup): the 8k tokenizer's ids are valid ids of that larger table, and the embedding and
  softmax cost per token is that of a 32k vocabulary.
* Each (system, config, batch budget, precision) runs in its own subprocess, so its peak RSS
  (`ru_maxrss`) is that measurement's alone. Ours:
  `keras_transformer.training.run.compiled_model` trained with `model.fit` on a tf.data
  generator with None-shaped signatures. Model Garden (in
  `--model-garden-python`'s venv, via this file's `--model-garden-worker` mode, which imports
  only TensorFlow, NumPy, tf_keras and `official`): `Seq2SeqTransformer` with the same
  dimensions, dropout and post-/pre-norm, the same loss written with TF ops, tf_keras
  Adam(0.9, 0.98, 1e-9) with the same schedule, in a `tf.function(reduce_retracing=True)`
  train step. It also updates token-accuracy and perplexity sums, as our compiled model's
  metrics do, so both steps do the same work. Model Garden shifts its `targets` right
  itself (start id 0), so it gets target_out where ours gets target_in: same shapes.
* Warm-up: one untimed step on the first batch of every distinct shape of the timed sequence
  (traces, XLA compiles with `--jit-compile`, oneDNN primitive caches); then the timed steps.
  A step's end is when its loss is back on the host. Traces count how often the Python body
  of the train step ran (it runs only while tracing), after warm-up and at the end: the first
  call traces twice (it creates the optimizer's variables), Model Garden's once more for its
  second batch shape, after which `reduce_retracing` generalizes to any shape.
* Biases: the Model Garden's one `use_bias` switch covers attention and feed-forward layers;
  it is `attention_bias` of our config (False, the paper's attention). So by default the
  Model Garden model also lacks the feed-forward biases ours has (slightly less work for it).
* MFU: `keras_transformer.training.flops.training_flops` (analytic matmul FLOPs, 3x forward, real
  non-padding lengths: padding is waste, not model FLOPs) per second, over the best
  GFLOP/s of a chain of square `tf.matmul`s of the step's compute dtype (float32 or bfloat16),
  best over `--peak-sizes` (1024^2, 2048^2, 4096^2 by default: on an AVX2-only machine the
  4096^2 chain is memory-bound and runs slower than the smaller ones),
  measured in a subprocess with the same (default) TensorFlow thread settings right before
  and right after each measurement; a row's peak is the mean of the two (this VM's speed
  drifts by 10-20% within a run: a peak taken once at the start misstated later rows' MFU,
  and one taken only before a row still missed drifts during it). Consecutive rows of the
  same dtype share the peak between them.

Caveats: CPU timings are sensitive to other load on the machine; the timed sequence is short
(a few dozen batches), so throughput depends on its mix of lengths (the same for both
systems); the Model Garden model adds a final layer norm to each post-norm stack, and ties
its embeddings and softmax always (as our presets do). Its post-norm decoder block fails
under mixed_bfloat16 (float32 layer-norm output + bfloat16 residual); such rows are rerun
pre-norm (`norm_first=True`, its default; same matmuls) and marked with `*` and a note.
Peak RSS includes the libraries each side imports (our worker imports
`keras_transformer.training.run`);
`rss_before_training_mib` in the JSON is the resident size just before the first step.
"""
from __future__ import annotations

import argparse
import inspect
import json
import math
import os
import re
import resource
import shlex
import subprocess
import sys
import tempfile
import time

import numpy as np

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PAD_ID = 0  # keras_transformer.config.PAD_ID, repeated for the worker (no package there).
PRECISIONS = ("float32", "mixed_bfloat16")
PEAK_DTYPES = {"float32": "float32", "mixed_bfloat16": "bfloat16"}
SYSTEMS = ("ours", "model_garden")


def _csv(kind):
    return lambda text: [kind(item) for item in text.split(",") if item]


def parse_args(argv=None) -> argparse.Namespace:
    # The library's rule (`data.shared_data_dir`): $KT_SHARED_DATA, else ../shared/data.
    shared = os.environ.get("KT_SHARED_DATA", os.path.join(
        os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "..", "shared", "data"))
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--configs", type=_csv(str), default=["small", "base"],
                        help="comma-separated presets (default: small,base)")
    parser.add_argument("--batch-tokens", type=_csv(int), default=[4096, 8192],
                        help="comma-separated token budgets per side and batch")
    parser.add_argument("--precisions", type=_csv(str), default=["float32"],
                        help=f"comma-separated Keras dtype policies from {PRECISIONS}")
    parser.add_argument("--jit-compile", action="store_true", help="XLA-compile both steps")
    parser.add_argument("--kernels", choices=("fast", "reference"), default="fast",
                        help="our implementation, through KT_KERNELS (default: fast)")
    parser.add_argument("--steps", type=int, default=20, help="timed steps per measurement")
    parser.add_argument("--vocab-size", type=int, default=32000, help="model vocabulary")
    parser.add_argument("--tokenizer-size", type=int, default=8000,
                        help="subword pieces learned on the data (<= --vocab-size)")
    parser.add_argument("--max-length", type=int, default=128,
                        help="longest sequence kept (ids, EOS/BOS included)")
    parser.add_argument("--seed", type=int, default=0, help="batch order and initialization")
    parser.add_argument("--data", default=os.path.join(shared, "wmt14", "newstest2014"),
                        help="corpus prefix: PREFIX.en and PREFIX.de "
                             "(default: $KT_SHARED_DATA/wmt14/newstest2014)")
    parser.add_argument("--model-garden-python", default="/work/bench-venv/bin/python",
                        help="python of a venv with tf-models-official ('' to skip)")
    parser.add_argument("--peak-sizes", type=_csv(int), default=[1024, 2048, 4096],
                        help="square matmul sizes tried for the peak (the best counts)")
    parser.add_argument("--peak-seconds", type=float, default=1.5,
                        help="seconds per timed repeat of the matmul peak, per size")
    parser.add_argument("--json", metavar="PATH", help="also write the JSON summary here")
    parser.add_argument("--workdir", help="keep the vocabulary and batch .npz files here "
                                          "(default: a temporary directory)")
    for mode in ("ours-worker", "model-garden-worker", "peak-worker"):
        parser.add_argument(f"--{mode}", metavar="SETTINGS_JSON", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if any(p not in PRECISIONS for p in args.precisions):
        parser.error(f"--precisions: choose from {PRECISIONS}, got {args.precisions}")
    if args.steps <= 0 or args.vocab_size <= 0 or not args.batch_tokens:
        parser.error("--steps, --vocab-size: must be positive; --batch-tokens: give one")
    if args.tokenizer_size > args.vocab_size:
        parser.error("--tokenizer-size: must not exceed --vocab-size")
    return args


# ------------------------------------------------------------------------ shared by workers
def load_batches(path: str) -> list[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """The (source, target_in, target_out) batches of an .npz, in run order."""
    with np.load(path) as data:
        return [(data[f"source_{i}"], data[f"target_in_{i}"], data[f"target_out_{i}"])
                for i in range(int(data["count"]))]


def batch_dataset(batches):
    """A tf.data pipeline over `batches` as ((source, target_in), target_out), None shapes."""
    import tensorflow as tf

    spec = tf.TensorSpec([None, None], tf.int32)
    return tf.data.Dataset.from_generator(
        lambda: (((s, ti), to) for s, ti, to in batches),
        output_signature=((spec, spec), spec)).prefetch(2)


def current_rss_mib() -> float:
    """Resident set size now (Linux /proc), MiB."""
    with open("/proc/self/status", encoding="ascii") as status:
        kib = next(line.split()[1] for line in status if line.startswith("VmRSS:"))
    return int(kib) / 1024


def summarize(start: float, ends: list[float], losses: list[float], traces: list[int],
              warmup: int, rss_before_mib: float) -> dict:
    """Timing of the steps after the first `warmup`, from the end time of every step.

    `rss_before_mib`: the resident size before the first step (libraries, model, optimizer
    not yet built), to tell the training's own memory from the imports'."""
    if warmup < 1 or len(ends) <= warmup:
        raise RuntimeError(f"expected more than {warmup} steps, ran {len(ends)}")
    return {"seconds": ends[-1] - ends[warmup - 1],
            "step_seconds": [b - a for a, b in zip(ends[warmup - 1:], ends[warmup:])],
            "warmup_seconds": ends[warmup - 1] - start,
            "steps": len(ends) - warmup,
            "traces_after_warmup": traces[warmup - 1], "traces_end": traces[-1],
            "loss_first": losses[0], "loss_last": losses[-1],
            "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
            "rss_before_training_mib": rss_before_mib}


# ------------------------------------------------------------------------------- workers
def ours_worker(settings: dict) -> dict:
    """Our model: `compiled_model` trained with `fit` over the saved batches."""
    sys.path.insert(0, REPO_ROOT)
    import keras_transformer  # noqa: F401  (selects the TensorFlow backend)
    import keras
    import importlib
    # A --before-tree may keep the recipe in a module of its own, or (older still) the flat
    # config only.
    for module, name in (("config", "Recipe"), ("recipe", "Recipe"),
                         ("config", "TransformerConfig")):
        try:
            Settings = getattr(importlib.import_module(f"keras_transformer.{module}"), name)
            break
        except (ImportError, AttributeError):
            continue
    from keras_transformer.training.run import compiled_model
    try:
        from keras_transformer import fast
        fast.set_implementation(settings.get("kernels", "fast"))
    except ImportError:
        pass  # a --before-tree's kernel interface reads KT_KERNELS itself

    keras.utils.set_random_seed(settings["seed"])
    keras.mixed_precision.set_global_policy(settings["precision"])
    recipe = Settings.from_dict(settings["config"])
    if "jit_compile" in inspect.signature(compiled_model).parameters:
        model, _ = compiled_model(recipe, jit_compile=settings["jit_compile"])
    else:  # compiled_model without the keyword: same compile, then set the flag.
        model, _ = compiled_model(recipe)
        model.jit_compile = settings["jit_compile"]
    traces = [0]
    train_step = model.train_step

    def counted_train_step(data):
        traces[0] += 1
        return train_step(data)

    model.train_step = counted_train_step
    ends, losses, trace_counts = [], [], []

    class Clock(keras.callbacks.Callback):
        def on_train_batch_end(self, batch, logs=None):
            losses.append(float(logs["loss"]))  # host value: the step has finished
            ends.append(time.perf_counter())
            trace_counts.append(traces[0])

    batches = load_batches(settings["npz"])
    rss_before = current_rss_mib()
    start = time.perf_counter()
    model.fit(batch_dataset(batches), epochs=1, verbose=0, callbacks=[Clock()])
    return {**summarize(start, ends, losses, trace_counts, settings["warmup"], rss_before),
            "jit_compile": bool(model.jit_compile)}  # Keras may refuse XLA for a model


def model_garden_worker(settings: dict) -> dict:
    """Model Garden's Seq2SeqTransformer with the same loss, optimizer and batches."""
    import tensorflow as tf
    import tf_keras
    from official.nlp.modeling import models

    tf.random.set_seed(settings["seed"])
    tf_keras.mixed_precision.set_global_policy(settings["precision"])
    c = settings["config"]
    layer_args = dict(num_layers=c["num_layers"], num_attention_heads=c["num_heads"],
                      intermediate_size=c["d_ff"], dropout_rate=c["dropout"],
                      attention_dropout_rate=c["attention_dropout"],
                      use_bias=c["attention_bias"],
                      norm_first=settings["norm_first"], norm_epsilon=c["layer_norm_epsilon"])
    model = models.Seq2SeqTransformer(
        vocab_size=c["vocab_size"], embedding_width=c["d_model"], dropout_rate=c["dropout"],
        encoder_layer=models.TransformerEncoder(**layer_args),
        decoder_layer=models.TransformerDecoder(**layer_args))

    class PaperSchedule(tf_keras.optimizers.schedules.LearningRateSchedule):
        """scale * d^-0.5 * min(step^-0.5, step * warmup^-1.5), step = iteration + 1."""

        def __call__(self, iteration):
            step = tf.cast(iteration, tf.float32) + 1.0
            return (c["learning_rate_scale"] * c["d_model"] ** -0.5
                    * tf.minimum(tf.math.rsqrt(step), step * c["warmup_steps"] ** -1.5))

    optimizer = tf_keras.optimizers.Adam(PaperSchedule(), beta_1=0.9, beta_2=0.98,
                                         epsilon=1e-9)
    smoothing = c["label_smoothing"]
    # Sums behind our compiled model's metrics: accuracy and perplexity totals, token count.
    sums = [tf.Variable(0.0, trainable=False) for _ in range(3)]

    def token_losses(labels, logits, eps):
        true_logits = tf.gather(logits, labels, axis=-1, batch_dims=2)
        return (tf.reduce_logsumexp(logits, -1) - (1.0 - eps) * true_logits
                - eps * tf.reduce_mean(logits, -1))

    traces = [0]

    @tf.function(reduce_retracing=True, jit_compile=settings["jit_compile"])
    def train_step(source, target_out):
        traces[0] += 1
        mask = tf.cast(tf.not_equal(target_out, PAD_ID), tf.float32)
        tokens = tf.reduce_sum(mask)
        with tf.GradientTape() as tape:
            logits = tf.cast(model({"inputs": source, "targets": target_out}, training=True),
                             tf.float32)
            loss = (tf.reduce_sum(token_losses(target_out, logits, smoothing) * mask)
                    / tf.maximum(tokens, 1.0))
        variables = model.trainable_variables
        optimizer.apply_gradients(zip(tape.gradient(loss, variables), variables))
        correct = tf.cast(tf.equal(tf.argmax(logits, -1, output_type=tf.int32), target_out),
                          tf.float32)
        sums[0].assign_add(tf.reduce_sum(correct * mask))
        sums[1].assign_add(tf.reduce_sum(token_losses(target_out, logits, 0.0) * mask))
        sums[2].assign_add(tokens)
        return loss

    ends, losses, trace_counts = [], [], []
    batches = load_batches(settings["npz"])
    rss_before = current_rss_mib()
    start = time.perf_counter()
    for (source, _), target_out in batch_dataset(batches):
        losses.append(float(train_step(source, target_out)))
        ends.append(time.perf_counter())
        trace_counts.append(traces[0])
    return {**summarize(start, ends, losses, trace_counts, settings["warmup"], rss_before),
            "jit_compile": settings["jit_compile"]}


def peak_worker(settings: dict) -> dict:
    """Best GFLOP/s over `sizes` of a chain of square matmuls x <- x @ b in one tf.function.

    Several sizes, because which one runs fastest depends on the machine: on a 2-core AVX2
    EPYC a 4096^2 chain ran at 85 GFLOP/s where 1024^2-2048^2 ran at 120-150."""
    import tensorflow as tf

    dtype = tf.as_dtype(settings["dtype"])

    def measure(n: int) -> float:
        x = tf.cast(tf.random.normal([n, n]), dtype)
        b = tf.cast(tf.random.normal([n, n], stddev=n ** -0.5), dtype)  # keeps |x| constant

        @tf.function
        def chain(x, iterations):
            for _ in tf.range(iterations):
                x = tf.matmul(x, b)
            return tf.reduce_sum(tf.cast(x[:1], tf.float32))

        def seconds(iterations: int) -> float:
            begin = time.perf_counter()
            chain(x, tf.constant(iterations)).numpy()
            return time.perf_counter() - begin

        seconds(1)
        iterations = max(2, math.ceil(settings["seconds"] / seconds(1)))
        best = min(seconds(iterations) for _ in range(settings["repeats"]))
        return 2 * n ** 3 * iterations / best / 1e9

    by_size = {n: measure(n) for n in settings["sizes"]}
    size = max(by_size, key=by_size.get)
    return {"gflops": by_size[size], "size": size,
            "gflops_by_size": {str(n): round(g, 1) for n, g in by_size.items()}}


WORKERS = {"ours_worker": ours_worker, "model_garden_worker": model_garden_worker,
           "peak_worker": peak_worker}


# ---------------------------------------------------------------------------- main process
def run_subprocess(python: str, mode: str, settings: dict, workdir: str) -> dict:
    """Runs this file's `mode` worker; its last stdout line is JSON. Errors become a dict."""
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", KT_KERNELS=settings.get("kernels", "fast"))
    if mode == "model-garden-worker":
        env.pop("PYTHONPATH", None)
    run = subprocess.run([python, os.path.abspath(__file__), f"--{mode}", json.dumps(settings)],
                         capture_output=True, text=True, env=env, cwd=workdir, check=False)
    lines = run.stdout.strip().splitlines()
    if run.returncode != 0 or not lines:
        errors = [line.strip() for line in run.stderr.splitlines()
                  if re.match(r"\s*[\w.]*(Error|Exception)\b.*:", line)]
        tail = errors[-1] if errors else (run.stderr.strip().splitlines() or ["?"])[-1]
        return {"error": f"exit {run.returncode}: {tail}"}
    return json.loads(lines[-1])


def run_model_garden(python: str, settings: dict, config, workdir: str) -> dict:
    """The Model Garden worker with the config's norm placement. Its post-norm decoder block
    adds float32 layer-norm outputs to bfloat16 residuals, which fails under mixed precision;
    then the row is measured pre-norm (Model Garden's default) and says so."""
    if config.key_dim * config.num_heads != config.d_model:
        return {"error": "Model Garden needs d_k = d_v = d_model / num_heads"}
    post_norm = config.norm == "post"
    result = run_subprocess(python, "model-garden-worker",
                            dict(settings, norm_first=not post_norm), workdir)
    if "error" in result and post_norm and settings["precision"] != "float32":
        retry = run_subprocess(python, "model-garden-worker", dict(settings, norm_first=True),
                               workdir)
        if "error" not in retry:
            return {**retry, "note": f"post-norm failed under {settings['precision']} "
                                     f"({result['error']}); measured pre-norm "
                                     "(norm_first=True) instead"}
    return result


def make_batches(args, workdir: str) -> dict[int, dict]:
    """Per batch budget: the run-order batches saved to an .npz, and their token counts."""
    sys.path.insert(0, REPO_ROOT)
    from keras_transformer.data import SubwordTokenizer, make_training_dataset, read_parallel

    sources, targets = read_parallel(f"{args.data}.en", f"{args.data}.de")
    tokenizer = SubwordTokenizer.train(sources + targets, args.tokenizer_size,
                                       os.path.join(workdir, "vocab"))
    data = {}
    for batch_tokens in args.batch_tokens:
        epoch = [(s.numpy(), ti.numpy(), to.numpy()) for (s, ti), to in make_training_dataset(
            sources, targets, tokenizer, batch_tokens, args.max_length, args.seed)]
        timed = [epoch[i % len(epoch)] for i in range(args.steps)]
        warmup = list({batch[0].shape: batch for batch in timed}.values())
        arrays = {"count": np.array(len(warmup) + len(timed))}
        for i, (source, target_in, target_out) in enumerate(warmup + timed):
            arrays.update({f"source_{i}": source, f"target_in_{i}": target_in,
                           f"target_out_{i}": target_out})
        path = os.path.join(workdir, f"batches_{batch_tokens}.npz")
        np.savez(path, **arrays)
        source_lengths = np.concatenate([(s != PAD_ID).sum(1) for s, _, _ in timed])
        target_lengths = np.concatenate([(t != PAD_ID).sum(1) for _, _, t in timed])
        positions = sum(s.size + t.size for s, _, t in timed)
        data[batch_tokens] = {
            "npz": path, "warmup": len(warmup), "epoch_batches": len(epoch),
            "timed_shapes": sorted({str(list(b[0].shape)) for b in timed}),
            "source_tokens": int(source_lengths.sum()),
            "target_tokens": int(target_lengths.sum()),
            "padding_fraction": 1 - (source_lengths.sum() + target_lengths.sum()) / positions,
            "lengths": (source_lengths.tolist(), target_lengths.tolist())}
    return data


def measure_all(args, workdir: str) -> dict:
    sys.path.insert(0, REPO_ROOT)
    from keras_transformer.training.flops import training_flops
    from keras_transformer.config import Recipe

    data = make_batches(args, workdir)
    peaks: dict[str, list] = {}

    def measure_peak(dtype: str) -> dict:
        peak = run_subprocess(sys.executable, "peak-worker", {
            "dtype": dtype, "sizes": args.peak_sizes, "seconds": args.peak_seconds,
            "repeats": 3}, workdir)
        peaks.setdefault(dtype, []).append(peak)
        print(f"matmul peak {dtype}: {peak}", file=sys.stderr, flush=True)
        return peak

    rows = []
    last_peak: tuple[str, dict] | None = None  # (dtype, peak) of the latest measurement
    for name in args.configs:
        recipe = Recipe.preset(name, vocab_size=args.vocab_size)
        config = recipe.architecture
        for batch_tokens, batches in data.items():
            flops = training_flops(config, *batches["lengths"])
            for precision in args.precisions:
                settings = {"npz": batches["npz"], "warmup": batches["warmup"],
                            "precision": precision, "jit_compile": args.jit_compile,
                            "kernels": args.kernels, "seed": args.seed,
                            "config": recipe.to_dict()}
                for system in SYSTEMS:
                    if system != "ours" and not args.model_garden_python:
                        continue
                    # This VM's speed drifts by 10-20% within a run: each measurement's MFU
                    # is against the mean of the peaks measured right before and after it.
                    dtype = PEAK_DTYPES[precision]
                    before = (last_peak[1] if last_peak and last_peak[0] == dtype
                              else measure_peak(dtype))
                    if system == "ours":
                        result = run_subprocess(sys.executable, "ours-worker", settings, workdir)
                    else:
                        result = run_model_garden(args.model_garden_python, settings, config,
                                                  workdir)
                    after = measure_peak(dtype)
                    last_peak = (dtype, after)
                    bracket = [peak["gflops"] for peak in (before, after) if "gflops" in peak]
                    row = {"config": name, "batch_tokens": batch_tokens,
                           "precision": precision, "system": system,
                           "peak_gflops": sum(bracket) / len(bracket) if bracket else None,
                           "peak_gflops_before_after": [before.get("gflops"),
                                                        after.get("gflops")], **result}
                    if "error" not in result:
                        peak_gflops = row["peak_gflops"]
                        seconds = result["seconds"]
                        row.update({
                            "target_tokens_per_second": batches["target_tokens"] / seconds,
                            "source_tokens_per_second": batches["source_tokens"] / seconds,
                            "seconds_per_step": seconds / result["steps"],
                            "model_tflops_per_second": flops / seconds / 1e12,
                            "mfu": (flops / seconds / (peak_gflops * 1e9)
                                    if peak_gflops else None)})
                    rows.append(row)
                    print(f"done: {format_row(row)}", file=sys.stderr, flush=True)
    for batches in data.values():
        del batches["lengths"], batches["npz"]
    return {"peaks": peaks, "data": data, "rows": rows}


HEADER = (f"{'config':<6} {'batch':>6} {'precision':<14} {'system':<13} {'tgt tok/s':>10} "
          f"{'src tok/s':>10} {'s/step':>8} {'peak':>6} {'MFU %':>6} {'RSS MiB':>8} "
          f"{'traces':>7}")


def format_row(row: dict) -> str:
    system = row["system"] + ("*" if "note" in row else "")
    head = (f"{row['config']:<6} {row['batch_tokens']:>6} {row['precision']:<14} "
            f"{system:<13}")
    if "error" in row:
        return f"{head} FAILED: {row['error'].splitlines()[-1][:200]}"
    mfu = f"{100 * row['mfu']:6.2f}" if row["mfu"] is not None else f"{'-':>6}"
    peak = f"{row['peak_gflops']:6.1f}" if row.get("peak_gflops") else f"{'-':>6}"
    traces = f"{row['traces_after_warmup']}/{row['traces_end']}"
    return (f"{head} {row['target_tokens_per_second']:10.1f} "
            f"{row['source_tokens_per_second']:10.1f} {row['seconds_per_step']:8.3f} {peak} {mfu} "
            f"{row['peak_rss_mib']:8.0f} {traces:>7}")


def print_report(command: str, summary: dict) -> None:
    print(f"command: {command}")
    for dtype, measured in summary["peaks"].items():
        values = [peak["gflops"] for peak in measured if "gflops" in peak]
        print(f"matmul peak {dtype}: {min(values, default=0):.1f}-{max(values, default=0):.1f} "
              f"GFLOP/s over {len(values)} of {len(measured)} measurements "
              "(before and after each row)")
    for batch_tokens, info in summary["data"].items():
        print(f"batch {batch_tokens}: {summary['settings']['steps']} timed steps "
              f"({info['epoch_batches']} batches per epoch), {info['warmup']} warm-up shapes, "
              f"{info['target_tokens']} target / {info['source_tokens']} source tokens, "
              f"padding {100 * info['padding_fraction']:.1f}%")
    print(HEADER + "   (traces: after warm-up/end)")
    for row in summary["rows"]:
        print(format_row(row))
    for row in summary["rows"]:
        if "note" in row:
            print(f"* {row['config']} {row['batch_tokens']} {row['precision']} "
                  f"{row['system']}: {row['note']}")
    by_key = {}
    for row in summary["rows"]:
        by_key.setdefault((row["config"], row["batch_tokens"], row["precision"]),
                          {})[row["system"]] = row
    for (name, batch_tokens, precision), systems in by_key.items():
        ours, garden = systems.get("ours", {}), systems.get("model_garden", {})
        if "target_tokens_per_second" in ours and "target_tokens_per_second" in garden:
            ratio = ours["target_tokens_per_second"] / garden["target_tokens_per_second"]
            print(f"ours/MG {name} {batch_tokens} {precision}: x{ratio:.2f} tokens/s")


def main(argv=None) -> None:
    args = parse_args(argv)
    for mode, worker in WORKERS.items():
        settings = getattr(args, mode)
        if settings:
            print(json.dumps(worker(json.loads(settings))))
            return
    command = shlex.join([sys.executable] + (sys.argv if argv is None else [__file__, *argv]))
    print(f"command: {command}", file=sys.stderr, flush=True)
    if args.workdir:
        os.makedirs(args.workdir, exist_ok=True)
        summary = measure_all(args, os.path.abspath(args.workdir))
    else:
        with tempfile.TemporaryDirectory() as workdir:
            summary = measure_all(args, workdir)
    summary = {"command": command, "settings": {
        key: value for key, value in vars(args).items() if not key.endswith("_worker")},
        **summary}
    print(json.dumps(summary, indent=2))
    if args.json:
        with open(args.json, "w", encoding="utf-8") as handle:
            json.dump(summary, handle, indent=2)
    print_report(command, summary)


if __name__ == "__main__":
    main()
