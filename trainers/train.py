"""`kt-train`: trains a Transformer with Keras `fit`, evaluates it and exports it.

With no arguments this is the offline quick start: a `tiny` model on the generated demo
corpus in `runs/demo`, evaluated on the demo test set, TensorBoard logs (with attention
heatmaps) in `runs/demo/tensorboard`, exported to `saved_models/demo-staging/<version>`: a
run's own export has a name no server is pointed at (promote it with `kt-export --name`).

    kt-train --preset small --train-src train.en.gz --train-tgt train.de.gz \
        --dev-src val.en.gz --dev-tgt val.de.gz --output-dir runs/multi30k --max-minutes 60
    kt-train --preset base --tfds wmt14_translate/de-en --source-lang en --target-lang de

    kt-train --preset parsing-small --task parsing --train-src train.src --train-tgt train.tgt \
        --dev-src dev.src --dev-tgt dev.tgt --test-src test.src --test-tgt test.tgt \
        --test-tree test.tree --output-dir runs/parsing

A killed run restarts from its last backup when started again with the same options: weights,
optimizer state, dropout seeds and its place in the data (`keras_transformer.training.backup`).
"""
from __future__ import annotations

import argparse
import json
import math
import os
import re
import sys
import time
from typing import Callable, Optional, Sequence

import keras
import tensorflow as tf

from trainers.common import add_recipe_arguments, recipe_from_args
from keras_transformer import fast
from keras_transformer.config import Recipe, SearchSettings, TransformerConfig
from keras_transformer.data import (SubwordTokenizer, load_tfds, read_parallel,
                                    write_demo_corpus)
from keras_transformer.data.batch_plan import BatchPlan
from keras_transformer.data.prepare import (ParallelSource, check_segmentation, combined_source,
                                            prepared, sample_sentences, text_file_source,
                                            tfds_source)
from keras_transformer.data.token_storage import TokenStorage
from keras_transformer.data.tokenizer import MODEL_FILENAME
from keras_transformer.decoding.translator import Translator
from keras_transformer.evaluation import corpus_scores, translate_corpus, write_lines
from keras_transformer.export import export_translator
from keras_transformer.losses import LabelSmoothedCrossEntropy
from keras_transformer.metrics import MaskedTokenAccuracy, Perplexity
from keras_transformer.model import Transformer
from keras_transformer.optimization import make_optimizer
from keras_transformer.parsing.evaluate import parse_scores, read_gold_trees
from keras_transformer.training.backup import BackupError, newest_step, restore_latest
from keras_transformer.training.batch_stream import per_replica_tokens, training_batches
from keras_transformer.training.callbacks import (DevEvaluation, PeriodicBackup,
                                                  PeriodicCheckpoint, Schedule, StepClock,
                                                  StopAtLimit, TensorBoardScalars, epoch_steps)
from keras_transformer.training.checkpoints import save_weights_atomic
from trainers.probes import choose_kernels, choose_precision, gpus_tensorflow_cannot_see
from keras_transformer.precision import CHOICES, POLICIES as PRECISIONS
from keras_transformer.precision import precision_scope, serving_copy
from keras_transformer.training.progress import ProgressLines
from keras_transformer.provenance import run_provenance
from keras_transformer.training.run_dir import TEST_FILE, RunDir
from keras_transformer.training.run_dir import keep_better_of_average_and_final
from keras_transformer.training.strategy import (any_across_workers, chief_values, is_chief,
                                                 make_strategy, smallest_across_workers,
                                                 worker_count)
from keras_transformer.visualization import attention_maps

DEFAULT_STEPS = 1000


def build_parser() -> argparse.ArgumentParser:
    """The command line's argument parser."""
    parser = argparse.ArgumentParser(prog="kt-train", description=__doc__.split("\n")[0])
    add_recipe_arguments(parser, default_preset="tiny")
    parser.add_argument("--task", choices=("translation", "parsing"), default="translation",
                        help="translation (default) or parsing: sources are sentences, targets "
                             "linearized trees (prepare_parsing's files); the final test "
                             "evaluation reports bracket F1 against --test-tree, while the "
                             "periodic dev evaluation stays BLEU of the linearized trees, "
                             "a cheap proxy")
    data = parser.add_argument_group("data (default: the generated demo corpus)")
    for split in ("train", "dev", "test"):
        for side in ("src", "tgt"):
            data.add_argument(f"--{split}-{side}", metavar="FILE",
                              action="append" if split == "train" else "store",
                              help=f"{split} {'source' if side == 'src' else 'target'} "
                                   "sentences, one a line (plain or .gz)"
                                   + ("; repeat --train-src/--train-tgt for several corpora "
                                      "(e.g. the originals and a teacher's translations)"
                                      if split == "train" else ""))
    data.add_argument("--test-tree", metavar="FILE",
                      help="--task parsing: gold trees of --test-src, one per sentence "
                           "(required with --test-src)")
    data.add_argument("--tfds", metavar="NAME", help="tensorflow-datasets translation "
                      "builder, e.g. wmt14_translate/de-en")
    data.add_argument("--source-lang", default="en", help="tfds source language (default: en)")
    data.add_argument("--target-lang", default="de", help="tfds target language (default: de)")
    data.add_argument("--tfds-data-dir", help="tensorflow-datasets data directory")
    data.add_argument("--tfds-splits", default="train,validation,test",
                      help="tfds train,dev,test split names (default: train,validation,test)")
    data.add_argument("--prepared", metavar="DIR",
                      help="train on storage written by kt-prepare (its vocabulary) instead of "
                           "--train-src/--train-tgt; dev and test files as usual")
    data.add_argument("--vocab-sentences", type=int, default=2_000_000,
                      help="sentences sampled to learn the subword vocabulary")
    run = parser.add_argument_group("run")
    run.add_argument("--output-dir", default=os.path.join("runs", "demo"),
                     help="run directory: config, vocab, checkpoints, logs (default: runs/demo)")
    run.add_argument("--steps", type=int, help=f"total optimizer steps (default: "
                     f"{DEFAULT_STEPS} unless --epochs or --max-minutes is given)")
    run.add_argument("--epochs", type=float, help="passes over the training data instead")
    run.add_argument("--max-minutes", type=float, help="stop after this much wall clock")
    run.add_argument("--cpu-replicas", type=int, default=0,
                     help="split the CPU into N logical devices and mirror over them")
    run.add_argument("--seed", type=int, default=0, help="data order and initialization seed")
    run.add_argument("--precision", choices=CHOICES, default="auto",
                     help="Keras dtype policy (default: auto = a reduced precision where its "
                          "matmuls measure at least 1.25x float32's on this machine, else "
                          "float32; the figures are printed and kept in the run directory); "
                          "exports are float32")
    run.add_argument("--kernels", choices=fast.CHOICES,
                     default=os.environ.get(fast.selection.ENVIRONMENT_VARIABLE, "auto"),
                     help="fast (the package's speed tricks), reference (their plain "
                          "Keras/TensorFlow twins), or auto (the faster of the two measured on "
                          "this machine at the model's sizes); default: $KT_KERNELS, else auto")
    run.add_argument("--jit-compile", action="store_true",
                     help="XLA-compile the train step (measured slower on CPU; may help on GPU)")
    run.add_argument("--steps-per-execution", type=int, default=1,
                     help="training steps per call of the compiled train function (Keras "
                          "fetches the logs to the host once per call: on a GPU, 10-100 hide "
                          "that wait); --steps, --eval-every and --backup-every must be "
                          "multiples of it (default: 1)")
    run.add_argument("--eval-every", type=int, default=250,
                     help="steps between dev BLEU evaluations and attention images "
                          "(default: 250)")
    run.add_argument("--eval-every-minutes", type=float,
                     help="also evaluate at the first backup interval's end this many minutes "
                          "after the previous evaluation (default: by steps only)")
    run.add_argument("--eval-sentences", type=int, default=200,
                     help="dev sentences translated at each evaluation")
    run.add_argument("--eval-beam-size", type=int, default=1,
                     help="beam size of the periodic dev evaluation (1 = greedy)")
    run.add_argument("--attention-sentences", type=int, default=2,
                     help="dev pairs drawn as attention heatmaps at each evaluation")
    run.add_argument("--checkpoint-every-steps", type=int,
                     help="also checkpoint every N steps (default: by minutes only; both "
                          "intervals fire)")
    run.add_argument("--checkpoint-every-minutes", type=float, default=10.0,
                     help="checkpoint interval in minutes, always on (default: 10, as in the "
                          "paper)")
    run.add_argument("--keep-checkpoints", type=int,
                     help="newest checkpoints kept (default: 5, or the recipe's average_last "
                          "when that is more)")
    run.add_argument("--backup-every", type=int, default=100,
                     help="steps between backups a killed run resumes from (default: 100)")
    run.add_argument("--backup-every-minutes", type=float,
                     help="also back up at the first evaluation or backup interval's end this "
                          "many minutes after the previous backup (default: by steps only)")
    run.add_argument("--log-batches", action="store_true",
                     help="append each training batch's step and a digest of its ids to "
                          "batches.tsv in the run directory (to audit resumed runs)")
    run.add_argument("--progress-seconds", type=float, default=30.0,
                     help="seconds between progress lines (step, loss, tok/s, ETA; default 30)")
    run.add_argument("--verbose", action="store_true",
                     help="keep TensorFlow's C++ start-up and log lines (hidden by default)")
    out = parser.add_argument_group("after training")
    out.add_argument("--test-beam-size", type=int, help="beam of the final test evaluation "
                     "(default: the recipe's beam_size)")
    out.add_argument("--export-name", help="SavedModel name (default: the output dir's name "
                     "+ '-staging', so that a finished run never writes a new version into a "
                     "served model's directory; serve it through kt-export --name NAME)")
    out.add_argument("--export-dir", default="saved_models",
                     help="SavedModel root (default: saved_models)")
    out.add_argument("--no-export", action="store_true", help="skip the SavedModel export")
    return parser


def parse_args(argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
    """Parses and cross-checks the options; every error names its flag."""
    parser = build_parser()
    args = parser.parse_args(argv)
    local = {name: getattr(args, name.replace("-", "_")) for name in
             ("train-src", "train-tgt", "dev-src", "dev-tgt", "test-src", "test-tgt")}
    if args.tfds and any(local.values()):
        parser.error("--tfds: cannot be combined with local files (--train-src, ...)")
    if args.prepared:
        if args.tfds or local["train-src"] or not local["dev-src"]:
            parser.error("--prepared: replaces --train-src/--train-tgt and --tfds; give "
                         "--dev-src/--dev-tgt (and optionally --test-src/--test-tgt)")
        local["train-src"] = local["train-tgt"] = args.prepared
    for split in ("train", "dev", "test"):
        if bool(local[f"{split}-src"]) != bool(local[f"{split}-tgt"]):
            parser.error(f"--{split}-src and --{split}-tgt: give both or neither")
    if args.train_src and len(args.train_src) != len(args.train_tgt):
        parser.error(f"--train-src and --train-tgt: {len(args.train_src)} source file(s) for "
                     f"{len(args.train_tgt)} target file(s) (one of each per corpus)")
    if any(local.values()) and not (local["train-src"] and local["dev-src"]):
        parser.error("--train-src/--dev-src: local data needs at least train and dev files")
    if args.task == "parsing":
        if args.tfds or not local["train-src"]:
            parser.error("--task parsing: needs local files (--train-src ... from "
                         "prepare_parsing), not --tfds or the demo corpus")
        if bool(args.test_tree) != bool(local["test-src"]):
            parser.error("--task parsing: --test-tree and --test-src go together (the gold "
                         "trees of the test sentences)")
    elif args.test_tree:
        parser.error("--test-tree: only with --task parsing")
    if args.test_tree and not os.path.isfile(args.test_tree):
        parser.error(f"--test-tree: no such file {args.test_tree!r}")
    if args.steps is not None and args.epochs is not None:
        parser.error("--steps and --epochs: give one, not both")
    positive = {"steps": args.steps, "epochs": args.epochs, "max_minutes": args.max_minutes,
                "eval_every": args.eval_every, "eval_sentences": args.eval_sentences,
                "eval_beam_size": args.eval_beam_size, "backup_every": args.backup_every,
                "eval_every_minutes": args.eval_every_minutes,
                "backup_every_minutes": args.backup_every_minutes,
                "checkpoint_every_steps": args.checkpoint_every_steps,
                "checkpoint_every_minutes": args.checkpoint_every_minutes,
                "keep_checkpoints": args.keep_checkpoints, "vocab_sentences": args.vocab_sentences,
                "test_beam_size": args.test_beam_size}
    for name, value in positive.items():
        if value is not None and value <= 0:
            parser.error(f"--{name.replace('_', '-')}: must be positive, got {value}")
    for name in ("cpu_replicas", "attention_sentences", "progress_seconds"):
        if getattr(args, name) < 0:
            parser.error(f"--{name.replace('_', '-')}: must be non-negative")
    if args.steps_per_execution < 1:
        parser.error("--steps-per-execution: must be positive")
    for name in ("steps", "eval_every", "backup_every"):
        value = getattr(args, name)
        if value is not None and value % args.steps_per_execution:
            parser.error(f"--{name.replace('_', '-')}: {value} is not a multiple of "
                         f"--steps-per-execution {args.steps_per_execution}")
    if args.cpu_replicas and os.environ.get("TF_CONFIG"):
        parser.error("--cpu-replicas: cannot be combined with TF_CONFIG (multi-worker)")
    if len(args.tfds_splits.split(",")) != 3:
        parser.error("--tfds-splits: expected three comma-separated names train,dev,test")
    if args.steps is None and args.epochs is None and args.max_minutes is None:
        args.steps = DEFAULT_STEPS
    try:
        args.recipe = recipe_from_args(args)
    except ValueError as error:
        parser.error(str(error))
    return args


def run_options(args: argparse.Namespace) -> dict:
    """The options a restart must repeat: data, vocabulary and seed (not the step budget);
    `train` adds the resolved precision and kernel set (backups do not restore across loss
    scaling)."""
    names = ("prepared", "dev_src", "dev_tgt", "tfds", "source_lang", "target_lang",
             "tfds_splits", "vocab_sentences", "seed")
    # One training corpus is recorded as a path, as before several could be given.
    corpora = {name: files[0] if files and len(files) == 1 else files
               for name, files in (("train_src", args.train_src), ("train_tgt", args.train_tgt))}
    return {**corpora, **{name: getattr(args, name) for name in names}}


def load_corpora(args: argparse.Namespace,
                 run: RunDir) -> tuple[Optional[ParallelSource], dict[str, tuple[list, list]]]:
    """The training pairs as a stream (None with `--prepared`), and split -> (sources,
    targets) of the dev and test splits the options name (test is optional)."""
    if args.tfds:
        names = dict(zip(("train", "dev", "test"), args.tfds_splits.split(",")))
        corpora = {split: load_tfds(args.tfds, names[split], args.source_lang,
                                    args.target_lang, data_dir=args.tfds_data_dir)
                   for split in ("dev", "test")}
        return tfds_source(args.tfds, names["train"], args.source_lang, args.target_lang,
                           args.tfds_data_dir), corpora
    if args.dev_src:
        corpora = {split: read_parallel(getattr(args, f"{split}_src"),
                                        getattr(args, f"{split}_tgt"))
                   for split in ("dev", "test") if getattr(args, f"{split}_src")}
        return (None if args.prepared else combined_source(
            [text_file_source(source, target)
             for source, target in zip(args.train_src, args.train_tgt)]), corpora)
    paths = write_demo_corpus(run.root / "demo_corpus", seed=args.seed)
    return text_file_source(*paths["train"]), {split: read_parallel(*paths[split])
                                                for split in ("dev", "test")}


def load_or_train_tokenizer(run: RunDir, config: TransformerConfig,
                            source: Optional[ParallelSource], args: argparse.Namespace
                            ) -> SubwordTokenizer:
    """The run's shared vocabulary: reloaded on restart; else `--prepared`'s, or learned from a
    seeded sample of `--vocab-sentences` training sentences."""
    if (run.vocab / MODEL_FILENAME).is_file():
        tokenizer, where = SubwordTokenizer.load(run.vocab), f"vocab: {run.vocab}"
    elif source is None:
        tokenizer = SubwordTokenizer.load(args.prepared)
        where = (f"--prepared: {args.prepared} (kt-prepare's default preset is base; give "
                 "kt-train the --preset and --set it was prepared with)")
    else:
        sample = sample_sentences(source, args.vocab_sentences, args.seed)
        tokenizer = SubwordTokenizer.train(sample, config.vocab_size, run.vocab,
                                           seed=args.seed)
        where = f"vocab: {run.vocab}"
    if tokenizer.vocab_size != config.vocab_size:
        raise ValueError(f"{where} has a vocabulary of {tokenizer.vocab_size} pieces but the "
                         f"recipe (--preset {args.preset}) says vocab_size={config.vocab_size}")
    if not (run.vocab / MODEL_FILENAME).is_file():
        tokenizer.save(run.vocab)
    return tokenizer


def training_storage(run: RunDir, source: Optional[ParallelSource], tokenizer: SubwordTokenizer,
                     args: argparse.Namespace) -> TokenStorage:
    """The training pairs as token storage: `--prepared`'s (refused if of another
    vocabulary), else prepared into the run directory once and reused by its restarts."""
    training = args.recipe.training
    if source is None:
        storage = TokenStorage.open(args.prepared)
        storage.check_vocabulary(tokenizer.model_proto, f"the run's {run.vocab / MODEL_FILENAME}")
        check_segmentation(storage, training.subword_dropout, training.subword_samples)
        return storage
    started = time.monotonic()
    storage, reused = prepared(source, run.root / "prepared", tokenizer, seed=args.seed,
                               subword_dropout=training.subword_dropout,
                               samples=training.subword_samples)
    print(f"kt-train: {'reusing' if reused else 'prepared'} {storage.pairs:,} training pairs in "
          f"{len(storage.shards)} shard(s) in {storage.directory}"
          + ("" if reused else f" ({time.monotonic() - started:.0f} s)"), file=sys.stderr)
    return storage


def step_budget(args: argparse.Namespace, plan: BatchPlan, replicas: int) -> Optional[int]:
    """Total steps: `--steps`, or `--epochs` times the steps of one pass over the data (its
    per-replica batches over the replicas, counted from the storage's manifest), rounded up to
    a multiple of `--steps-per-execution`."""
    if args.epochs is None:
        return args.steps
    steps = max(1, math.ceil(args.epochs * plan.batches_per_epoch / replicas))
    return math.ceil(steps / args.steps_per_execution) * args.steps_per_execution


def compiled_model(recipe: Recipe, jit_compile: bool = False,
                   steps_per_execution: int = 1) -> tuple[Transformer, MaskedTokenAccuracy]:
    """A Transformer compiled with the paper's optimizer, schedule and loss (in scope), under
    the global dtype policy and kernel set (`fast.FastTransformer`: with the reference set,
    Keras's own steps); `jit_compile` XLA-compiles the train step; `steps_per_execution`
    steps run per call of the train function."""
    model = fast.FastTransformer(recipe.architecture)
    accuracy = MaskedTokenAccuracy()
    model.compile(optimizer=make_optimizer(recipe.architecture.d_model, recipe.training),
                  loss=LabelSmoothedCrossEntropy(recipe.training.label_smoothing),
                  metrics=[accuracy, Perplexity()], jit_compile=jit_compile,
                  steps_per_execution=steps_per_execution)
    return model, accuracy


def dev_translation(args: argparse.Namespace, model: Transformer,
                    tokenizer: SubwordTokenizer) -> Callable[[Sequence[str]], list[str]]:
    """How dev sentences are translated: `--eval-beam-size` (greedy by default)."""
    translator = Translator(model, tokenizer,
                            SearchSettings.of(args.recipe.search, beam_size=args.eval_beam_size),
                            step_builder=fast.decoding_step())
    return lambda texts: translate_corpus(translator, texts)


def training_callbacks(args: argparse.Namespace, run: RunDir, model_parts: tuple,
                       dev: tuple[list[str], list[str]], max_steps: Optional[int],
                       first_step: int) -> list:
    """The step clock first; backups after the NaN check (a diverged step is not backed up);
    dev BLEU before the scalar writer, which records it. None reads a device variable after
    each batch (Keras itself fetches the step's logs after each call of the train function:
    `--steps-per-execution` makes that once per several steps)."""
    model, accuracy, tokenizer = model_parts
    strategy = model.distribute_strategy
    any_worker = (None if worker_count(strategy) == 1
                  else lambda flag: any_across_workers(strategy, flag))
    writer = tf.summary.create_file_writer(os.fspath(run.tensorboard))
    sources, references = (side[:args.eval_sentences] for side in dev)
    pairs = list(zip(*dev))[:args.attention_sentences]
    steps = StepClock(first_step)
    evaluation = Schedule(steps, args.eval_every, args.eval_every_minutes, any_worker=any_worker)
    backups = Schedule(steps, args.backup_every, args.backup_every_minutes, at_stop=False,
                       any_worker=any_worker)
    return [
        steps,
        StopAtLimit(steps, max_steps, args.max_minutes, any_worker),
        keras.callbacks.TerminateOnNaN(),
        PeriodicBackup(run.backup, backups),
        DevEvaluation(dev_translation(args, model, tokenizer), sources, references,
                      lambda source, target: attention_maps(model, tokenizer, source, target),
                      pairs, writer, run.root / "bleu_curve.tsv", evaluation),
        TensorBoardScalars(writer, accuracy, evaluation),
        ProgressLines(max_steps, args.max_minutes, accuracy, evaluation, args.progress_seconds),
        PeriodicCheckpoint(steps, run.checkpoints, args.checkpoint_every_steps,
                           args.checkpoint_every_minutes,
                           args.keep_checkpoints or max(5, args.recipe.training.average_last)),
    ]


def evaluate_test(args: argparse.Namespace, run: RunDir, model: Transformer,
                  tokenizer: SubwordTokenizer, test: tuple[list[str], list[str]],
                  gold_trees: Optional[list] = None) -> dict:
    """Beam-search translation of the test set: hypotheses file and sacreBLEU/chrF, or with
    `gold_trees` (--task parsing) the parsed trees file and bracket F1/precision/recall.
    Decoded with the weights in float32, whatever the training precision, as `kt-evaluate`
    and a float32 export decode them: one run, one test figure."""
    translator = Translator(serving_copy(model, "float32"), tokenizer,
                            SearchSettings.of(args.recipe.search, beam_size=args.test_beam_size),
                            step_builder=fast.decoding_step())
    hypotheses = translate_corpus(translator, test[0])
    hypotheses_path = run.root / "test.hyp"
    write_lines(os.fspath(hypotheses_path), hypotheses)
    outputs = {"hypotheses": os.fspath(hypotheses_path)}
    if gold_trees is not None:
        trees, scores = parse_scores(hypotheses, gold_trees)
        outputs["trees"] = os.fspath(run.root / "test.parsed.tree")
        write_lines(outputs["trees"], [str(tree) for tree in trees])
    else:
        scores = corpus_scores(hypotheses, test[1])
    for score in scores:
        print(f"test {score}")
    return {**outputs, **{score.name: round(score.value, 2) for score in scores}}


def hardware_choices(args: argparse.Namespace, recipe: Recipe, recorded: dict,
                     strategy: tf.distribute.Strategy) -> tuple[str, str]:
    """The precision and kernel set of the run: as given; for auto, as an earlier start of the
    run recorded them, else measured here (`probes`), printed with the figures and kept in the
    run directory's `hardware.json`. In a multi-worker cluster the chief decides: it alone
    measures, and every worker takes its choices (workers that measured apart could build
    different graphs)."""
    choices, measured = {}, {}
    config = recipe.architecture
    probe_tokens = min(recipe.training.batch_tokens, 2048)
    probes = {
        "precision": lambda: choose_precision(config.d_model, config.d_ff, probe_tokens),
        "kernels": lambda: choose_kernels(config.d_model, config.d_ff, config.num_heads,
                                          probe_tokens, config.output_vocab_size),
    }
    chief = is_chief(strategy)
    for name, probe in probes.items():
        wanted = getattr(args, name)
        if wanted != "auto":
            choices[name] = wanted
        elif name in recorded:
            choices[name] = recorded[name]
        elif chief:
            with precision_scope(choices.get("precision", "float32")):
                measured[name] = probe()
            choices[name] = measured[name].choice
            print(f"kt-train: {name} {measured[name].describe()}", file=sys.stderr)
        else:
            choices[name] = "chief's"
        if worker_count(strategy) > 1:
            options = PRECISIONS if name == "precision" else fast.KERNEL_SETS
            mine = options.index(choices[name]) if choices[name] in options else -1
            taken = options[chief_values(strategy, [mine])[0]]
            if not chief and taken != choices[name]:
                print(f"kt-train: {name} {taken} (the chief's choice)", file=sys.stderr)
            choices[name] = taken
    if measured:
        RunDir(args.output_dir).write_json(
            "hardware.json", {name: result.to_dict() for name, result in measured.items()})
    return choices["precision"], choices["kernels"]


def train(args: argparse.Namespace) -> dict:
    """Runs the whole job; returns a summary (paths, steps, scores)."""
    recipe, run = args.recipe, RunDir(args.output_dir)
    config = recipe.architecture
    hidden = gpus_tensorflow_cannot_see()
    if hidden:
        print(f"kt-train: warning: nvidia-smi lists {len(hidden)} GPU(s) ({hidden[0]}"
              f"{', ...' if len(hidden) > 1 else ''}) but TensorFlow sees none, so this run "
              "trains on the CPU. Install TensorFlow with its CUDA libraries: pip install "
              f"\"tensorflow[and-cuda]=={tf.__version__}\" (docs/training.md, \"Training on "
              "GPUs\")", file=sys.stderr)
    strategy = make_strategy(args.cpu_replicas)
    precision, kernel_set = hardware_choices(args, recipe, run.recorded_options(), strategy)
    fast.set_kernels(kernel_set)
    # What fixes the data stream too: the replicas (each takes batch_tokens / replicas) and the
    # prepared storage's identity (storage prepared again in place is another stream).
    stream = {"replicas": strategy.num_replicas_in_sync}
    if args.prepared:
        stream["prepared_storage"] = TokenStorage.open(args.prepared).identity
    resumed = run.claim(recipe, {**run_options(args), "precision": precision,
                                 "kernels": kernel_set, **stream})
    keras.utils.set_random_seed(args.seed)
    source, corpora = load_corpora(args, run)
    gold_trees = (read_gold_trees(args.test_tree, corpora["test"][0], args.test_src)
                  if args.test_tree else None)
    tokenizer = load_or_train_tokenizer(run, config, source, args)
    replicas = strategy.num_replicas_in_sync
    plan = BatchPlan(training_storage(run, source, tokenizer, args),
                     per_replica_tokens(recipe.training.batch_tokens, replicas),
                     config.max_length, args.seed, word_dropout=recipe.training.word_dropout)
    max_steps = step_budget(args, plan, replicas)
    with strategy.scope(), precision_scope(precision):
        model, accuracy = compiled_model(recipe, args.jit_compile, args.steps_per_execution)
        # Every worker of a cluster resumes from the same step: the newest all of them have.
        agreed = smallest_across_workers(strategy, newest_step(run.backup, run.checkpoints))
        restored = restore_latest(model, run.backup, run.checkpoints, at_most=agreed)
        if smallest_across_workers(strategy, restored.step) != restored.step:
            raise TrainingError(f"the workers restored different steps (this one {restored.step}"
                                f"); give them the same backups, or move the newer ones away")
    callbacks = training_callbacks(args, run, (model, accuracy, tokenizer), corpora["dev"],
                                   max_steps, restored.step)
    print(f"kt-train: {'resuming' if resumed else 'starting'} {run.root} on {replicas} "
          f"replica(s), {max_steps or 'unlimited'} steps, {precision}, {kernel_set} kernels"
          f"{', XLA' if model.jit_compile else ''}", file=sys.stderr)
    if restored.source:
        print(f"kt-train: restored step {restored.step} from {restored.source}"
              + ("" if restored.exact else " (a checkpoint: no dropout seeds, so later dropout "
                 "masks differ from an uninterrupted run's)"), file=sys.stderr)
    # The data resumes where the restored step left it: the same stream, located in the plan.
    batches = training_batches(strategy, plan.dataset, restored.step,
                               run.root / "batches.tsv" if args.log_batches else None)
    unit = epoch_steps(args.eval_every, args.backup_every)
    epochs = math.ceil(max_steps / unit) if max_steps else 1_000_000_000
    try:
        history = model.fit(batches, epochs=epochs, initial_epoch=restored.step // unit,
                            steps_per_epoch=unit, callbacks=callbacks, verbose=0,
                            shuffle=False)
    except (tf.errors.UnavailableError, tf.errors.DeadlineExceededError) as error:
        reason = " ".join(re.sub(r"\{\{.*?\}\}", "", str(error)).split())[:240]
        raise TrainingError(f"another worker of the cluster stopped ({reason}); start every "
                            "worker again with the same command: they resume from their "
                            "newest common backup") from None
    if model.stop_training and not math.isfinite(history.history.get("loss", [0.0])[-1]):
        raise TrainingError(f"loss became NaN at step {callbacks[0].step}; nothing exported; "
                            "the same command resumes from the newest backup with finite "
                            "weights (lower the learning rate to avoid diverging again)")
    save_weights_atomic(model, run.final_weights)
    translate_dev = dev_translation(args, model, tokenizer)
    sources, references = corpora["dev"]
    result = keep_better_of_average_and_final(
        model, run, recipe.training.average_last,
        lambda: corpus_scores(translate_dev(sources), references)[0].value)
    print(f"kt-train: result {result['weights']} (dev BLEU {result['dev_bleu']})",
          file=sys.stderr)
    summary = {"run_dir": os.fspath(run.root), "steps": callbacks[0].step,
               "precision": precision, "kernels": kernel_set, **result}
    if "test" in corpora:
        summary["test"] = evaluate_test(args, run, model, tokenizer, corpora["test"],
                                        gold_trees)
        run.write_json(TEST_FILE, summary["test"])
    if not args.no_export:
        name = args.export_name or f"{run.root.resolve().name}-staging"
        summary["export"] = export_translator(model, tokenizer, name, args.export_dir,
                                              recipe.search, provenance=run_provenance(run.root))
    return summary


class TrainingError(RuntimeError):
    """Training ran but produced nothing usable."""


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Runs the command line; returns its exit status (2 on a user error)."""
    args = parse_args(argv)
    try:
        RunDir(args.output_dir).check_writable()
        summary = train(args)
    except (TrainingError, BackupError, ValueError, FileNotFoundError) as error:
        print(f"kt-train: error: {error}", file=sys.stderr)
        return 2
    except OSError as error:  # e.g. a full disk while writing the final weights or the export
        print(f"kt-train: error: {error.filename or args.output_dir}: {error.strerror or error}; "
              "the backups and checkpoints written so far are intact: run the same command "
              "again once this is fixed", file=sys.stderr)
        return 1
    print(json.dumps(summary, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
