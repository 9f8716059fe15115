"""Input pipeline throughput on Multi30k train versus the `small` model's training consumption.

Usage: python benchmarks/input_pipeline.py [--data-dir DIR] [--train-steps N]

Both rates count real (non-padding) source + target tokens and sentences. The pipeline is
timed over full epochs including in-graph tokenization, bucketing and padding; training is
timed with `model.fit` on batches taken from the same pipeline and held in memory, after
warm-up steps, so that the two measurements do not overlap. The pipeline figure includes
counting tokens eagerly per batch, so it is a lower bound.

Then kt-train's own input, the batch plan over token storage (Multi30k train prepared with the
same vocabulary): real tokens per second it reads and pads on one Python thread, with the
library's `padded_batch` (one gather per batch) and with the same batches padded pair by pair
(the earlier code, kept here as the baseline), in the same run.
"""
from __future__ import annotations

import argparse
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import keras_transformer  # noqa: E402  (sets the TensorFlow backend first)
import keras  # noqa: E402
import tensorflow as tf  # noqa: E402

import numpy as np  # noqa: E402

from keras_transformer.data import (  # noqa: E402
    SubwordTokenizer,
    make_training_dataset,
    padding_fraction,
    read_parallel,
    shared_data_dir,
)
from keras_transformer.data import batch_plan  # noqa: E402
from keras_transformer.data.prepare import prepared, text_file_source  # noqa: E402
from keras_transformer.config import BOS_ID, EOS_ID, PAD_ID  # noqa: E402


def _cpu_name() -> str:
    """The CPU model from /proc/cpuinfo where available."""
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.is_file():
        for line in cpuinfo.read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine()


def _counts(batch: tuple) -> tuple[int, int]:
    """(sentences, real source + target tokens) of one model batch."""
    (source, _), target_out = batch
    tokens = tf.reduce_sum(tf.cast(source != PAD_ID, tf.int64))
    tokens += tf.reduce_sum(tf.cast(target_out != PAD_ID, tf.int64))
    return int(tf.shape(source)[0]), int(tokens)


def pipeline_rate(dataset: tf.data.Dataset, epochs: int) -> tuple[float, float]:
    """(sentences/s, tokens/s) of iterating ``dataset`` for ``epochs`` full epochs."""
    sentences = tokens = 0
    start = time.perf_counter()
    for _ in range(epochs):
        for batch in dataset:
            batch_sentences, batch_tokens = _counts(batch)
            sentences, tokens = sentences + batch_sentences, tokens + batch_tokens
    elapsed = time.perf_counter() - start
    return sentences / elapsed, tokens / elapsed


class _StepTimer(keras.callbacks.Callback):
    """Records the wall time of every training batch."""

    def __init__(self) -> None:
        super().__init__()
        self.ends: list[float] = []

    def on_train_batch_end(self, batch: int, logs: dict | None = None) -> None:
        self.ends.append(time.perf_counter())


def training_rate(
    batches: list[tuple], vocab_size: int, steps: int, warmup: int
) -> tuple[float, float, float]:
    """(sentences/s, tokens/s, s/step) of `small` model training steps on ``batches``."""
    recipe = keras_transformer.Recipe.preset("small", vocab_size=vocab_size)
    model = keras_transformer.Transformer(recipe.architecture)
    model.compile(optimizer=keras_transformer.make_optimizer(recipe.architecture.d_model,
                                                             recipe.training),
                  loss=keras_transformer.LabelSmoothedCrossEntropy(
                      recipe.training.label_smoothing))
    total = warmup + steps
    schedule = [batches[i % len(batches)] for i in range(total)]
    dataset = tf.data.Dataset.from_generator(
        lambda: iter(schedule),
        output_signature=((tf.TensorSpec([None, None], tf.int32),) * 2,
                          tf.TensorSpec([None, None], tf.int32)),
    )
    timer = _StepTimer()
    model.fit(dataset, epochs=1, steps_per_epoch=total, callbacks=[timer], verbose=0)
    elapsed = timer.ends[-1] - timer.ends[warmup - 1]
    counted = [_counts(batch) for batch in schedule[warmup:]]
    return (sum(c[0] for c in counted) / elapsed, sum(c[1] for c in counted) / elapsed,
            elapsed / steps)


def padded_pair_by_pair(shard, members: np.ndarray, length: int) -> tuple:
    """The earlier `batch_plan.padded_batch`: each pair copied into the batch by a Python loop
    (the baseline of the batch plan's rate)."""
    source, target_in, target_out = (np.full([len(members), length], PAD_ID, np.int32)
                                     for _ in range(3))
    target_in[:, 0] = BOS_ID
    for row, index in enumerate(members.tolist()):
        source_ids, target_ids = shard.pair(index)
        source[row, :len(source_ids)] = source_ids
        source[row, len(source_ids)] = EOS_ID
        target_in[row, 1:len(target_ids) + 1] = target_ids
        target_out[row, :len(target_ids)] = target_ids
        target_out[row, len(target_ids)] = EOS_ID
    return (source, target_in), target_out


def batch_plan_rate(plan: batch_plan.BatchPlan, epochs: int) -> float:
    """Real source + target tokens per second of `epochs` passes of `plan.elements()`."""
    tokens, start = 0, time.perf_counter()
    for _, (_, ((source, _), target_out)) in zip(range(epochs * plan.batches_per_epoch),
                                                 plan.elements()):
        tokens += int(np.count_nonzero(source)) + int(np.count_nonzero(target_out))
    return tokens / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", type=Path, default=shared_data_dir() / "multi30k")
    parser.add_argument("--vocab-size", type=int, default=8000)
    parser.add_argument("--batch-tokens", type=int, default=4096, help="the small preset's")
    parser.add_argument("--max-length", type=int, default=128, help="the small preset's")
    parser.add_argument("--pipeline-epochs", type=int, default=3)
    parser.add_argument("--train-steps", type=int, default=30)
    parser.add_argument("--warmup-steps", type=int, default=5)
    args = parser.parse_args()
    src, tgt = args.data_dir / "train.en.gz", args.data_dir / "train.de.gz"
    if not src.is_file():
        sys.exit(f"Multi30k train not found at {src}; pass --data-dir or set KT_SHARED_DATA")

    sources, targets = read_parallel(src, tgt)
    start = time.perf_counter()
    tokenizer = SubwordTokenizer.train(sources + targets, args.vocab_size, tempfile.mkdtemp())
    vocab_seconds = time.perf_counter() - start
    dataset = make_training_dataset(sources, targets, tokenizer, args.batch_tokens,
                                    args.max_length, seed=0)
    pipe_sentences, pipe_tokens = pipeline_rate(dataset, args.pipeline_epochs)
    batches = list(dataset.take(args.train_steps + args.warmup_steps))
    train_sentences, train_tokens, step_seconds = training_rate(
        batches, tokenizer.vocab_size, args.train_steps, args.warmup_steps)

    print(f"machine: {_cpu_name()}, {os.cpu_count()} cores, "
          f"TensorFlow {tf.__version__}")
    print(f"corpus: {len(sources)} Multi30k train pairs, vocab {tokenizer.vocab_size} "
          f"(learned in {vocab_seconds:.1f} s), batch_tokens {args.batch_tokens}, "
          f"max_length {args.max_length}, padding fraction {padding_fraction(dataset):.3f}")
    print(f"pipeline ({args.pipeline_epochs} epochs): {pipe_sentences:,.0f} sentences/s, "
          f"{pipe_tokens:,.0f} tokens/s")
    print(f"training `small` ({args.train_steps} steps after {args.warmup_steps} warm-up, "
          f"{step_seconds:.3f} s/step): {train_sentences:,.0f} sentences/s, "
          f"{train_tokens:,.0f} tokens/s")
    ratio = pipe_tokens / train_tokens
    verdict = "OK" if ratio >= 10 else "TOO SLOW"
    print(f"pipeline / training = {ratio:.1f}x ({verdict}: need >= 10x)")

    storage, _ = prepared(text_file_source(src, tgt), tempfile.mkdtemp(), tokenizer)
    plan = batch_plan.BatchPlan(storage, args.batch_tokens, args.max_length, seed=0)
    library = batch_plan.padded_batch
    rates = {}
    for name, padding in (("pair by pair (before)", padded_pair_by_pair),
                          ("one gather per batch", library)):
        batch_plan.padded_batch = padding
        rates[name] = batch_plan_rate(plan, args.pipeline_epochs)
    batch_plan.padded_batch = library
    for name, rate in rates.items():
        print(f"batch plan over token storage, {name}: {rate:,.0f} tokens/s")
    before, after = rates.values()
    print(f"batch plan: {after / before:.2f}x the pair-by-pair rate")


if __name__ == "__main__":
    main()
