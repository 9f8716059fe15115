"""`kt-train`: trains a Transformer with Keras `fit`, evaluates it and exports it; with no
arguments, the offline demo job in `runs/demo`. A killed run restarts from its last backup when
started again with the same options. Its manual: docs/training.md.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import re
import sys
from typing import Callable, Optional, Sequence

import keras
import tensorflow as tf

from keras_transformer import fast
from keras_transformer.config import PRECISION_POLICIES, Recipe
from keras_transformer.data.batch_plan import BatchPlan, check_batch_tokens
from keras_transformer.data.token_storage import TokenStorage
from keras_transformer.decoding.alignment import (AlignmentHeads, read_alignment_heads,
                                                  write_alignment_heads)
from keras_transformer.serving.export import check_model_tree, export_translator
from keras_transformer.losses import GuidedAlignment, LabelSmoothedCrossEntropy
from keras_transformer.metrics import MaskedTokenAccuracy, Perplexity
from keras_transformer.model import Transformer
from keras_transformer.optimization import make_optimizer
from keras_transformer.training.backup import BackupError, newest_step, restore_latest
from keras_transformer.training.batch_stream import per_replica_tokens, training_batches
from keras_transformer.training.callbacks import (DevEvaluation, PeriodicBackup,
                                                  PeriodicCheckpoint, Schedule, StepClock,
                                                  StopAtLimit, TensorBoardScalars, epoch_steps)
from keras_transformer.training.checkpoints import load_weights_file, save_weights_atomic
from trainers.probes import choose_kernels, choose_precision, gpus_tensorflow_cannot_see
from keras_transformer.precision import precision_scope
from keras_transformer.training.progress import ProgressLines, stage
from keras_transformer.training.run_dir import TEST_FILE, RunDir
from keras_transformer.training.run_dir import keep_better_of_average_and_final
from keras_transformer.training.strategy import (any_across_workers, chief_values, is_chief,
                                                 make_strategy, smallest_across_workers,
                                                 worker_count)
from keras_transformer.visualization import attention_maps
from trainers.train_arguments import parse_args, run_options, tfds_split_names
from trainers.train_data import (RunInputs, keep_languages, keep_vocabulary, pair_sampling,
                                 report_left_out, run_inputs, step_budget, training_storage)
from trainers.train_evaluation import (DEV_BLEU, DevSet, attention_tokenizer, dev_bleu,
                                       dev_bleu_name, dev_logs, evaluate_test,
                                       test_translator, warn_of_truncated_sources)


def compiled_model(recipe: Recipe, jit_compile: bool = False, steps_per_execution: int = 1,
                   lora_rank: Optional[int] = None, lora_alpha: Optional[float] = None,
                   guided_alignment: Optional[GuidedAlignment] = None
                   ) -> tuple[Transformer, MaskedTokenAccuracy]:
    """A Transformer of `recipe`'s architecture compiled with the paper's optimizer, schedule and
    loss (in scope) of `recipe`'s training settings, under the global dtype policy and kernel set
    (`fast.FastTransformer`: with the reference set, Keras's own steps), and its token accuracy
    metric.

    `jit_compile` XLA-compiles the train step; `steps_per_execution` is the steps per call of the
    train function. `lora_rank` puts LoRA adapters of this rank on every projection, built with the
    model, and freezes every other weight (`Transformer(lora_rank=)`; None: a plain model);
    `lora_alpha` is the adapters' scale numerator (`lora_alpha / lora_rank`).
    `guided_alignment`: the attention head trained toward word alignments, and its weight.
    """
    model = fast.FastTransformer(recipe.architecture, lora_rank=lora_rank,
                                 lora_alpha=lora_alpha)
    model.guided_alignment = guided_alignment
    accuracy = MaskedTokenAccuracy()
    model.compile(optimizer=make_optimizer(recipe.architecture.d_model, recipe.training),
                  loss=LabelSmoothedCrossEntropy(recipe.training.label_smoothing),
                  metrics=[accuracy, Perplexity()], jit_compile=jit_compile,
                  steps_per_execution=steps_per_execution)
    # Built here, the optimizer's variables exist before the train step is traced: built in
    # the trace (Keras's default without a distribution strategy), they make tf.function
    # trace the step twice.
    model.optimizer.build(model.trainable_variables)
    return model, accuracy


def training_callbacks(args: argparse.Namespace, run: RunDir,
                       model_parts: tuple[Transformer, MaskedTokenAccuracy],
                       dev: dict[str, DevSet], dev_scores: Callable[[Optional[int]], dict],
                       max_steps: Optional[int], first_step: int) -> list:
    """The step clock first; backups after the NaN check (a diverged step is not backed up);
    dev BLEU before the scalar writer, which records it (`dev`: the dev sets, `dev_sets`;
    `dev_scores`: their `dev_bleu`, on `--eval-sentences` of each here).
    None reads a device variable after each batch: only every `--log-every-steps` steps
    (TensorBoard's training scalars) and at progress lines (Keras itself fetches the step's
    logs after each call of the train function: `--steps-per-execution` makes that once per
    several steps)."""
    model, accuracy = model_parts
    strategy = model.distribute_strategy
    any_worker = (None if worker_count(strategy) == 1
                  else lambda flag: any_across_workers(strategy, flag))
    writer = tf.summary.create_file_writer(os.fspath(run.tensorboard))
    sentences = sum(len(dev_set.sources[:args.eval_sentences]) for dev_set in dev.values())
    languages = run.languages()
    pairs = [(attention_tokenizer(dev_set.tokenizer, languages, name), source, target)
             for name, dev_set in dev.items()
             for source, target in list(zip(dev_set.sources,
                                            dev_set.references))[:args.attention_sentences]]
    names = {DEV_BLEU: dev_bleu_name(args.eval_beam_size, sentences, len(dev)),
             **{f"{DEV_BLEU}/{name}": f"{name} dev BLEU" for name in dev if name}}
    steps = StepClock(first_step)
    evaluation = Schedule(steps, args.eval_every, args.eval_every_minutes, any_worker=any_worker)
    backups = Schedule(steps, args.backup_every, args.backup_every_minutes, at_stop=False,
                       any_worker=any_worker)
    return [
        steps,
        StopAtLimit(steps, max_steps, args.max_minutes, any_worker),
        keras.callbacks.TerminateOnNaN(),
        PeriodicBackup(run.backup, backups),
        DevEvaluation(score=lambda: dev_logs(dev_scores(args.eval_sentences)),
                      attention=lambda tokenizer, source, target: attention_maps(
                          model, tokenizer, source, target),
                      attention_pairs=pairs, writer=writer,
                      curve_path=run.root / "bleu_curve.tsv", schedule=evaluation),
        TensorBoardScalars(writer, accuracy, evaluation, args.log_every_steps),
        ProgressLines(max_steps, args.max_minutes, token_metric=accuracy, schedule=evaluation,
                      every_seconds=args.progress_seconds, names=names),
        PeriodicCheckpoint(steps, run.checkpoints, every_steps=args.checkpoint_every_steps,
                           every_minutes=args.checkpoint_every_minutes,
                           keep=args.keep_checkpoints
                           or max(5, args.recipe.training.average_last)),
    ]


def hardware_choices(args: argparse.Namespace, recipe: Recipe, recorded: dict,
                     strategy: tf.distribute.Strategy) -> tuple[str, str, dict]:
    """The precision and kernel set of the run: as given; for auto, as an earlier start of the
    run recorded them, else measured here (`probes`), printed with the figures; and the
    figures measured, for the run directory's `hardware.json`. In a multi-worker cluster the
    chief decides: it alone measures, and every worker takes its choices (workers that
    measured apart could build different graphs)."""
    choices, measured = {}, {}
    config = recipe.architecture
    probe_tokens = min(recipe.training.batch_tokens, 2048)
    probes = {
        "precision": lambda: choose_precision(config.d_model, config.d_ff, probe_tokens),
        "kernels": lambda: choose_kernels(config.d_model, config.d_ff, config.num_heads,
                                          tokens=probe_tokens,
                                          vocab_size=config.output_vocab_size),
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
            options = PRECISION_POLICIES if name == "precision" else fast.KERNEL_SETS
            mine = options.index(choices[name]) if choices[name] in options else -1
            taken = options[chief_values(strategy, [mine])[0]]
            if not chief and taken != choices[name]:
                print(f"kt-train: {name} {taken} (the chief's choice)", file=sys.stderr)
            choices[name] = taken
    return (choices["precision"], choices["kernels"],
            {name: result.to_dict() for name, result in measured.items()})


def exports(args: argparse.Namespace) -> bool:
    """Whether the run ends with an export: unless `--no-export` (a run of several language
    pairs exports one model of its target languages)."""
    return not args.no_export


def dev_sets(args: argparse.Namespace, inputs: RunInputs) -> dict[str, DevSet]:
    """The run's dev sets by name: one pair's named "", or each language pair's (`SRC-TGT`),
    in `--pair` order."""
    if not inputs.pairs:
        return {"": DevSet(inputs.tokenizer, *inputs.corpora["dev"])}
    return {pair.name: DevSet(inputs.tokenizer, *inputs.pairs.dev[pair.name])
            for pair in args.language_pairs}


def translated_sources(args: argparse.Namespace,
                       inputs: RunInputs) -> dict[str, tuple[str, list[str]]]:
    """The source sentences kt-train translates (dev, and test where given) by the name its
    warnings give them (their file) -> (their language pair, "" for a run of one pair;
    the sentences)."""
    if not inputs.pairs:
        names = {split: file or (f"{args.tfds} {tfds_split_names(args)[split]}" if args.tfds
                                 else f"the demo corpus's {split} set")
                 for split, file in (("dev", args.dev_src), ("test", args.test_src))}
        return {names[split]: ("", inputs.corpora[split][0]) for split in ("dev", "test")
                if split in inputs.corpora}
    return {f"{args.pair_files[name][split][0]} ({name})": (name, sentences[0])
            for split, sets in (("dev", inputs.pairs.dev), ("test", inputs.pairs.test))
            for name, sentences in sets.items()}


def evaluate_pairs_test(args: argparse.Namespace, run: RunDir, model: Transformer,
                        dev: dict[str, DevSet], test: dict[str, tuple[list, list]]) -> dict:
    """The final test pass of each language pair given a test set (`evaluate_test`, with the
    run's tokenizer, the one of its `dev` set): their figures under "pairs", and the mean of
    each figure over them."""
    beam_size = args.test_beam_size or args.recipe.search.beam_size
    pairs = {}
    translator = test_translator(args, run, model, next(iter(dev.values())).tokenizer)
    for name, sentences in test.items():
        with stage("kt-train", f"test set of {name}: translating {len(sentences[0]):,} "
                   f"sentences (beam {beam_size})"):
            pairs[name] = evaluate_test(run, translator, sentences, pair=name)
    figures = [key for key, value in next(iter(pairs.values())).items()
               if isinstance(value, float)]
    return {**{key: round(sum(pair[key] for pair in pairs.values()) / len(pairs), 2)
               for key in figures}, "pairs": pairs}


def export_name(args: argparse.Namespace, run: RunDir) -> str:
    """The model name the run exports under: `--export-name`, else the run directory's name
    with "-staging"."""
    return args.export_name or f"{run.root.resolve().name}-staging"


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
    replicas = strategy.num_replicas_in_sync
    # A refused start writes nothing (its corrected command then starts): everything it can
    # be refused for is checked before the claim, its first write.
    batch_tokens = per_replica_tokens(recipe.training.batch_tokens, replicas)
    check_batch_tokens(batch_tokens, config.max_length)
    if exports(args):
        check_model_tree(args.export_dir, export_name(args, run))
    precision, kernel_set, measured = hardware_choices(args, recipe, run.recorded_options(),
                                                       strategy)
    fast.set_kernels(kernel_set)
    # What fixes the data stream too: the replicas (each takes batch_tokens / replicas) and the
    # prepared storage's identity (storage prepared again in place is another stream).
    stream = {"replicas": replicas}
    if args.prepared:
        stream["prepared_storage"] = TokenStorage.open(args.prepared).identity
    options = {**run_options(args), "precision": precision, "kernels": kernel_set, **stream}
    run.check_claim(recipe, options)
    # Before any tokenizer is built: seeding clears TensorFlow's kernel cache, and with it the
    # SentencePiece resource of a tokenizer built earlier.
    keras.utils.set_random_seed(args.seed)
    # The demo's corpus is written into the claimed run.
    demo = not (args.tfds or args.dev_src or args.language_pairs)
    inputs = None if demo else run_inputs(args, run)
    resumed = run.claim(recipe, options)
    if measured:
        run.write_json("hardware.json", measured)
    inputs = inputs or run_inputs(args, run)
    corpora, gold_trees, tokenizer = inputs.corpora, inputs.gold_trees, inputs.tokenizer
    keep_vocabulary(run, tokenizer)
    keep_languages(run, args.init_from)
    if inputs.pairs:
        plan = pair_sampling(run, inputs, args, batch_tokens)
    else:
        plan = BatchPlan(training_storage(run, inputs, args), batch_tokens, config.max_length,
                         args.seed, word_dropout=recipe.training.word_dropout)
    report_left_out(run, plan)
    max_steps = step_budget(args, plan, replicas)
    guided = (GuidedAlignment(AlignmentHeads.default(config).layer, 0, args.alignment_weight)
              if args.alignments else None)
    with strategy.scope(), precision_scope(precision):
        model, accuracy = compiled_model(recipe, args.jit_compile, args.steps_per_execution,
                                         args.lora_rank, args.lora_alpha, guided)
        # Every worker of a cluster resumes from the same step: the newest all of them have.
        agreed = smallest_across_workers(strategy, newest_step(run.backup, run.checkpoints))
        restored = restore_latest(model, run.backup, run.checkpoints, at_most=agreed)
        if smallest_across_workers(strategy, restored.step) != restored.step:
            raise TrainingError(f"the workers restored different steps (this one {restored.step}"
                                f"); give them the same backups, or move the newer ones away")
        if args.init_from and not restored.source:  # a restart continues from its backup
            initialize_from(model, RunDir(args.init_from))
    dev = dev_sets(args, inputs)
    warn_of_truncated_sources(tokenizer, translated_sources(args, inputs), config.max_length,
                              run.languages())
    dev_scores = dev_bleu(args, model, dev, run.languages())
    callbacks = training_callbacks(args, run, (model, accuracy), dev, dev_scores,
                                   max_steps, restored.step)
    print(f"kt-train: {'resuming' if resumed else 'starting'} {run.root} on {replicas} "
          f"replica(s), {max_steps or 'unlimited'} steps, {precision}, {kernel_set} kernels"
          f"{', XLA' if model.jit_compile else ''}", file=sys.stderr)
    if args.lora_rank:
        adapters = sum(int(tf.size(weight)) for weight in model.lora_adapters())
        print(f"kt-train: training LoRA adapters only: rank {args.lora_rank}, alpha "
              f"{args.lora_alpha:g}, {adapters:,} trainable weights of "
              f"{model.count_params():,}", file=sys.stderr)
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
    if guided is not None:  # the head trained to align is the one that aligns
        write_alignment_heads(run.root, AlignmentHeads(guided.layer, (guided.head,)),
                              {"reference": "guided alignment training",
                               "weight": guided.weight})
    trained = model  # what the checkpoints and backups hold: a LoRA run's adapters too
    if args.lora_rank:
        # The files other commands read hold plain weights: the adapters merged into the
        # kernels. From here on (the run's result, test, export) the merged model is used.
        with strategy.scope(), precision_scope(precision):
            model = trained.merge_lora()
    save_weights_atomic(model, run.final_weights)
    if model is not trained:  # the merged model: a translator of its own
        dev_scores = dev_bleu(args, model, dev, run.languages())
    result = keep_better_of_average_and_final(
        model, run, recipe.training.average_last,
        dev_bleu=(lambda: dev_scores()[""]) if "" in dev else dev_scores,
        stage=lambda what: stage("kt-train", what), checkpoint_model=trained)
    if not result["averaged"]:
        print(f"kt-train: {result['averaging']}", file=sys.stderr)
    scores = ", ".join(f"{kind} {value:.2f}" for kind, value in result["dev_bleu"].items())
    sentences = sum(len(dev_set.sources) for dev_set in dev.values())
    print(f"kt-train: {dev_bleu_name(args.eval_beam_size, sentences, len(dev))}: {scores}"
          + "".join(f"; {name} " + ", ".join(f"{kind} {value:.2f}" for kind, value
                                             in pair.items())
                    for name, pair in result.get("dev_bleu_pairs", {}).items())
          + f"; the run's result: {result['weights']}", file=sys.stderr)
    summary = {"run_dir": os.fspath(run.root), "steps": callbacks[0].step,
               "precision": precision, "kernels": kernel_set, **result}
    if "test" in corpora:
        beam_size = args.test_beam_size or recipe.search.beam_size
        with stage("kt-train", f"test set: translating {len(corpora['test'][0]):,} sentences "
                   f"(beam {beam_size})"):
            summary["test"] = evaluate_test(run, test_translator(args, run, model, tokenizer),
                                            corpora["test"], gold_trees)
        run.write_json(TEST_FILE, summary["test"])
    if inputs.pairs and inputs.pairs.test:
        summary["test"] = evaluate_pairs_test(args, run, model, dev, inputs.pairs.test)
        run.write_json(TEST_FILE, summary["test"])
    if exports(args):
        name = export_name(args, run)
        with stage("kt-train", f"exporting {name} to {args.export_dir}"):
            summary["export"] = export_translator(model, tokenizer, name,
                                                  base_dir=args.export_dir,
                                                  settings=recipe.search,
                                                  provenance=run.provenance(),
                                                  languages=run.languages(),
                                                  alignment=read_alignment_heads(
                                                      run.root, model.config))
    return summary


def initialize_from(model: Transformer, source: RunDir) -> None:
    """Sets `model`'s weights to those `source` chose (`RunDir.default_weights`), read into a
    plain model of its own so that none of its optimizer state comes along: fine-tuning
    starts Adam and the schedule afresh. A LoRA `model` takes them as its frozen weights
    (every weight but `lora_adapters()`, in a plain model's order), its adapters left as
    built (B zero: the model computes what the source's does)."""
    path, why = source.chosen_weights()
    trained = Transformer(model.config)
    load_weights_file(trained, path)
    adapters = {id(adapter) for adapter in model.lora_adapters()}
    frozen = [weight for weight in model.weights if id(weight) not in adapters]
    for weight, value in zip(frozen, trained.get_weights(), strict=True):
        weight.assign(value)
    print(f"kt-train: starting from {path} ({why})", file=sys.stderr)


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
