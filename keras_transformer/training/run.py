"""A training run from Python: `Training(recipe, data, options, run_dir)` runs the stages
`kt-train` runs (`prepare`, `build`, `fit`, `average`, `test`, `export`; `run` all of them),
each callable on its own: a stage runs the earlier ones it needs that this object has not run.
A killed run restarts from its last backup when started again with the same settings.
The manual: docs/training.md; the API: docs/api.md."""
from __future__ import annotations

import math
import os
import re
import sys
from typing import Callable, Iterator, Optional

import keras
import tensorflow as tf

from keras_transformer import fast
from keras_transformer.config import PRECISION_POLICIES, Recipe, SearchSettings
from keras_transformer.data.batch_plan import BatchPlan, check_batch_tokens
from keras_transformer.data.pair_sampling import PairSampling
from keras_transformer.data.token_storage import TokenStorage
from keras_transformer.decoding.alignment import (AlignmentHeads, read_alignment_heads,
                                                  write_alignment_heads)
from keras_transformer.serving.export import check_model_tree, export_translator
from keras_transformer.losses import GuidedAlignment, LabelSmoothedCrossEntropy
from keras_transformer.metrics import MaskedTokenAccuracy, Perplexity
from keras_transformer.model import Transformer
from keras_transformer.optimization import make_optimizer
from keras_transformer.training.backup import Restored, newest_step, restore_latest
from keras_transformer.training.batch_stream import per_replica_tokens, training_batches
from keras_transformer.training.callbacks import (DevEvaluation, PeriodicBackup,
                                                  PeriodicCheckpoint, Schedule, StepClock,
                                                  StopAtLimit, TensorBoardScalars, epoch_steps)
from keras_transformer.training.checkpoints import load_weights_file, save_weights_atomic
from keras_transformer.precision import precision_scope
from keras_transformer.training.dev_test import (DEV_BLEU, DevSet, attention_tokenizer,
                                                 dev_bleu, dev_bleu_name, dev_logs,
                                                 evaluate_test, test_translator,
                                                 warn_of_truncated_sources)
from keras_transformer.training.inputs import (DataChoice, RunInputs, keep_languages,
                                               keep_vocabulary, pair_sampling, report_left_out,
                                               run_inputs, step_budget, training_storage)
from keras_transformer.training.probes import (choose_implementation, choose_precision,
                                               gpus_tensorflow_cannot_see)
from keras_transformer.training.progress import ProgressLines, stage
from keras_transformer.training.run_dir import TEST_FILE, RunDir
from keras_transformer.training.run_dir import keep_better_of_average_and_final
from keras_transformer.training.settings import RunOptions, TrainingData, recorded_options
from keras_transformer.training.strategy import (any_across_workers, chief_values, is_chief,
                                                 make_strategy, smallest_across_workers,
                                                 worker_count)
from keras_transformer.visualization import attention_maps


def compiled_model(recipe: Recipe, jit_compile: bool = False, steps_per_execution: int = 1,
                   lora_rank: Optional[int] = None, lora_alpha: Optional[float] = None,
                   guided_alignment: Optional[GuidedAlignment] = None
                   ) -> tuple[Transformer, MaskedTokenAccuracy]:
    """A Transformer of `recipe`'s architecture compiled with the paper's optimizer, schedule and
    loss (in scope) of `recipe`'s training settings, under the global dtype policy and
    implementation (`fast.FastTransformer`: with the reference, Keras's own steps), and its token
    accuracy metric.

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


def training_callbacks(options: RunOptions, average_last: int, run: RunDir,
                       model_parts: tuple[Transformer, MaskedTokenAccuracy],
                       dev: dict[str, DevSet], dev_scores: Callable[[Optional[int]], dict],
                       max_steps: Optional[int], first_step: int) -> list:
    """The callbacks of `options`' schedules: the step clock first; backups after the NaN
    check (a diverged step is not backed up); dev BLEU before the scalar writer, which records
    it (`dev`: the dev sets, `dev_sets`; `dev_scores`: their `dev_bleu`, on `eval_sentences`
    of each here); checkpoints, `keep_checkpoints` of them kept (default: 5, or the recipe's
    `average_last` when more).
    None reads a device variable after each batch: only every `log_every_steps` steps
    (TensorBoard's training scalars) and at progress lines (Keras itself fetches the step's
    logs after each call of the train function: `steps_per_execution` makes that once per
    several steps)."""
    model, accuracy = model_parts
    strategy = model.distribute_strategy
    any_worker = (None if worker_count(strategy) == 1
                  else lambda flag: any_across_workers(strategy, flag))
    writer = tf.summary.create_file_writer(os.fspath(run.tensorboard))
    sentences = sum(len(dev_set.sources[:options.eval_sentences]) for dev_set in dev.values())
    languages = run.languages()
    pairs = [(attention_tokenizer(dev_set.tokenizer, languages, name), source, target)
             for name, dev_set in dev.items()
             for source, target in list(zip(dev_set.sources,
                                            dev_set.references))[:options.attention_sentences]]
    names = {DEV_BLEU: dev_bleu_name(options.eval_beam_size, sentences, len(dev)),
             **{f"{DEV_BLEU}/{name}": f"{name} dev BLEU" for name in dev if name}}
    steps = StepClock(first_step)
    evaluation = Schedule(steps, options.eval_every, options.eval_every_minutes,
                          any_worker=any_worker)
    backups = Schedule(steps, options.backup_every, options.backup_every_minutes, at_stop=False,
                       any_worker=any_worker)
    return [
        steps,
        StopAtLimit(steps, max_steps, options.max_minutes, any_worker),
        keras.callbacks.TerminateOnNaN(),
        PeriodicBackup(run.backup, backups),
        DevEvaluation(score=lambda: dev_logs(dev_scores(options.eval_sentences)),
                      attention=lambda tokenizer, source, target: attention_maps(
                          model, tokenizer, source, target),
                      attention_pairs=pairs, writer=writer,
                      curve_path=run.root / "bleu_curve.tsv", schedule=evaluation),
        TensorBoardScalars(writer, accuracy, evaluation, options.log_every_steps),
        ProgressLines(max_steps, options.max_minutes, token_metric=accuracy, schedule=evaluation,
                      every_seconds=options.progress_seconds, names=names),
        PeriodicCheckpoint(steps, run.checkpoints, every_steps=options.checkpoint_every_steps,
                           every_minutes=options.checkpoint_every_minutes,
                           keep=options.keep_checkpoints or max(5, average_last)),
    ]


def hardware_choices(options: RunOptions, recipe: Recipe, recorded: dict,
                     strategy: tf.distribute.Strategy) -> tuple[str, str, dict]:
    """The precision and implementation of the run: as `options` give them; for auto, as an
    earlier start of the run recorded them, else measured here (`probes`), printed with the
    figures; and the figures measured, for the run directory's `hardware.json`. In a
    multi-worker cluster the chief decides: it alone measures, and every worker takes its
    choices (workers that measured apart could build different graphs)."""
    choices, measured = {}, {}
    config = recipe.architecture
    probe_tokens = min(recipe.training.batch_tokens, 2048)
    probes = {
        "precision": lambda: choose_precision(config.d_model, config.d_ff, probe_tokens),
        "kernels": lambda: choose_implementation(config.d_model, config.d_ff, config.num_heads,
                                          tokens=probe_tokens,
                                          vocab_size=config.target_vocab_size),
    }
    chief = is_chief(strategy)
    for name, probe in probes.items():
        wanted = getattr(options, name)
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
            known = PRECISION_POLICIES if name == "precision" else fast.IMPLEMENTATIONS
            mine = known.index(choices[name]) if choices[name] in known else -1
            taken = known[chief_values(strategy, [mine])[0]]
            if not chief and taken != choices[name]:
                print(f"kt-train: {name} {taken} (the chief's choice)", file=sys.stderr)
            choices[name] = taken
    return (choices["precision"], choices["kernels"],
            {name: result.to_dict() for name, result in measured.items()})


def dev_sets(data: TrainingData, inputs: RunInputs) -> dict[str, DevSet]:
    """The run's dev sets by name: one pair's named "", or each language pair's (`SRC-TGT`),
    in `data.language_pairs` order."""
    if not inputs.pairs:
        return {"": DevSet(inputs.tokenizer, *inputs.corpora["dev"])}
    return {pair.name: DevSet(inputs.tokenizer, *inputs.pairs.dev[pair.name])
            for pair in data.language_pairs}


def translated_sources(data: TrainingData,
                       inputs: RunInputs) -> dict[str, tuple[str, list[str]]]:
    """The source sentences kt-train translates (dev, and test where given) by the name its
    warnings give them (their file) -> (their language pair, "" for a run of one pair;
    the sentences)."""
    if not inputs.pairs:
        names = {split: file or (f"{data.tfds} {data.tfds_split_names()[split]}" if data.tfds
                                 else f"the demo corpus's {split} set")
                 for split, file in (("dev", data.dev_src), ("test", data.test_src))}
        return {names[split]: ("", inputs.corpora[split][0]) for split in ("dev", "test")
                if split in inputs.corpora}
    return {f"{data.pair_files[name][split][0]} ({name})": (name, sentences[0])
            for split, sets in (("dev", inputs.pairs.dev), ("test", inputs.pairs.test))
            for name, sentences in sets.items()}


def evaluate_pairs_test(search: SearchSettings, beam_size: Optional[int], run: RunDir,
                        model: Transformer, dev: dict[str, DevSet],
                        test: dict[str, tuple[list, list]]) -> dict:
    """The final test pass of each language pair given a test set (`evaluate_test`, with the
    run's tokenizer, the one of its `dev` set, and `test_translator`'s `search` and
    `beam_size`): their figures under "pairs", and the mean of each figure over them."""
    translator = test_translator(search, beam_size, run, model,
                                 next(iter(dev.values())).tokenizer)
    beam_size = beam_size or search.beam_size
    pairs = {}
    for name, sentences in test.items():
        with stage("kt-train", f"test set of {name}: translating {len(sentences[0]):,} "
                   f"sentences (beam {beam_size})"):
            pairs[name] = evaluate_test(run, translator, sentences, pair=name)
    figures = [key for key, value in next(iter(pairs.values())).items()
               if isinstance(value, float)]
    return {**{key: round(sum(pair[key] for pair in pairs.values()) / len(pairs), 2)
               for key in figures}, "pairs": pairs}


def export_name(options: RunOptions, run: RunDir) -> str:
    """The model name the run exports under: `options.export_name`, else the run directory's
    name with "-staging"."""
    return options.export_name or f"{run.root.resolve().name}-staging"


class Training:
    """A training run of `recipe` on `data` with `options` in the run directory `run_dir`.

    The stages, in order (each runs the earlier ones this object has not run): `prepare` (the
    strategy, the hardware choices, the run's claim, its data, vocabulary and batch plan),
    `build` (the compiled model under the strategy, restored from the newest backup or
    checkpoint: exact resume), `fit` (training with backups, checkpoints, dev evaluations;
    the final weights), `average` (the better on dev of the averaged and the final weights),
    `test` (the test pass) and `export` (the SavedModel); `run` runs them all and returns the
    summary. `recipe_origin` says how the recipe was given (e.g. `--preset tiny`), named when a
    vocabulary's size differs from the recipe's."""

    def __init__(self, recipe: Recipe, data: TrainingData = TrainingData(),
                 options: RunOptions = RunOptions(), run_dir: str | os.PathLike = "runs/demo",
                 recipe_origin: str = "") -> None:
        self.recipe, self.data, self.options = recipe, data, options
        self.run_dir = RunDir(run_dir)
        self.recipe_origin = recipe_origin
        self.summary: dict = {}
        # `prepare`'s: the strategy and its replicas, the precision and implementation, whether
        # the run was started before, its inputs, batch plan and step budget.
        self.strategy: Optional[tf.distribute.Strategy] = None
        self.replicas, self.precision, self.implementation, self.resumed = 0, "", "", False
        self.inputs: Optional[RunInputs] = None
        self.plan: Optional[BatchPlan | PairSampling] = None
        self.max_steps: Optional[int] = None
        # `build`'s: what the checkpoints and backups hold (a LoRA run's adapters too), its
        # token accuracy metric and what it was restored from; `fit`'s: the dev sets, their
        # scores, and the run's result (a LoRA run's merged model).
        self.trained: Optional[Transformer] = None
        self.accuracy: Optional[MaskedTokenAccuracy] = None
        self.restored: Optional[Restored] = None
        self.dev: dict[str, DevSet] = {}
        self.dev_scores: Optional[Callable[[Optional[int]], dict]] = None
        self.model: Optional[Transformer] = None
        self._done: set[str] = set()

    @property
    def guided_alignment(self) -> Optional[GuidedAlignment]:
        """With word alignments in the data, the head trained toward them (the first of the
        layer `AlignmentHeads.default` reads) and the loss's weight; else None."""
        if not self.data.alignments:
            return None
        return GuidedAlignment(AlignmentHeads.default(self.recipe.architecture).layer, 0,
                               self.options.alignment_weight)

    def _after(self, *stages: Callable[[], object]) -> None:
        """Runs each of `stages` this object has not run yet."""
        for earlier in self._pending(*stages):
            earlier()

    def _pending(self, *stages: Callable[[], object]) -> Iterator[Callable[[], object]]:
        """Each of `stages` this object has not run yet, checked when reached."""
        return (stage for stage in stages if stage.__name__ not in self._done)

    def prepare(self) -> BatchPlan | PairSampling:
        """Checks and claims the run, reads its data, keeps its vocabulary and languages, and
        returns its batch plan (the storage prepared into the run directory once)."""
        recipe, run, options = self.recipe, self.run_dir, self.options
        config = recipe.architecture
        hidden = gpus_tensorflow_cannot_see()
        if hidden:
            print(f"kt-train: warning: nvidia-smi lists {len(hidden)} GPU(s) ({hidden[0]}"
                  f"{', ...' if len(hidden) > 1 else ''}) but TensorFlow sees none, so this run "
                  "trains on the CPU. Install TensorFlow with its CUDA libraries: pip install "
                  f"\"tensorflow[and-cuda]=={tf.__version__}\" (docs/training.md, \"Training on "
                  "GPUs\")", file=sys.stderr)
        self.strategy = strategy = make_strategy(options.cpu_replicas)
        self.replicas = replicas = strategy.num_replicas_in_sync
        # A refused start writes nothing (its corrected command then starts): everything it can
        # be refused for is checked before the claim, its first write.
        batch_tokens = per_replica_tokens(recipe.training.batch_tokens, replicas)
        check_batch_tokens(batch_tokens, config.max_length)
        if options.export:
            check_model_tree(options.export_dir, export_name(options, run))
        self.precision, self.implementation, measured = hardware_choices(
            options, recipe, run.recorded_options(), strategy)
        fast.set_implementation(self.implementation)
        # What fixes the data stream too: the replicas (each takes batch_tokens / replicas) and
        # the prepared storage's identity (storage prepared again in place is another stream).
        stream = {"replicas": replicas}
        if self.data.prepared:
            stream["prepared_storage"] = TokenStorage.open(self.data.prepared).identity
        recorded = {**recorded_options(self.data, options), "precision": self.precision,
                    "kernels": self.implementation, **stream}
        run.check_claim(recipe, recorded)
        # Before any tokenizer is built: seeding clears TensorFlow's kernel cache, and with it
        # the SentencePiece resource of a tokenizer built earlier.
        keras.utils.set_random_seed(options.seed)
        # The demo's corpus is written into the claimed run.
        choice = DataChoice(recipe, self.data, options, self.recipe_origin)
        inputs = None if self.data.demo else run_inputs(choice, run)
        self.resumed = run.claim(recipe, recorded)
        if measured:
            run.write_json("hardware.json", measured)
        self.inputs = inputs = inputs or run_inputs(choice, run)
        keep_vocabulary(run, inputs.tokenizer)
        keep_languages(run, options.init_from)
        if inputs.pairs:
            plan = pair_sampling(run, inputs, choice, batch_tokens)
        else:
            plan = BatchPlan(training_storage(run, inputs, recipe, options.seed), batch_tokens,
                             config.max_length, options.seed,
                             word_dropout=recipe.training.word_dropout)
        report_left_out(run, plan)
        self.max_steps = step_budget(options, plan, replicas)
        self.plan = plan
        self._done.add("prepare")
        return plan

    def build(self) -> Transformer:
        """The compiled model under the run's strategy and precision, restored from the
        newest backup or checkpoint every worker has (else `init_from`'s weights), and
        returned."""
        self._after(self.prepare)
        run, options, strategy = self.run_dir, self.options, self.strategy
        with strategy.scope(), precision_scope(self.precision):
            model, self.accuracy = compiled_model(self.recipe, options.jit_compile,
                                                  options.steps_per_execution,
                                                  options.lora_rank, options.lora_alpha,
                                                  self.guided_alignment)
            # Every worker of a cluster resumes from the same step: the newest all of them have.
            agreed = smallest_across_workers(strategy, newest_step(run.backup, run.checkpoints))
            restored = restore_latest(model, run.backup, run.checkpoints, at_most=agreed)
            if smallest_across_workers(strategy, restored.step) != restored.step:
                raise TrainingError(f"the workers restored different steps (this one "
                                    f"{restored.step}); give them the same backups, or move the "
                                    "newer ones away")
            if options.init_from and not restored.source:  # a restart continues from its backup
                initialize_from(model, RunDir(options.init_from))
        self.restored, self.trained = restored, model
        self._done.add("build")
        return model

    def fit(self) -> int:
        """Trains from the restored step to the step budget or time limit, with the schedules
        of the options; writes the final weights (a LoRA run's merged into plain ones) and
        returns the last step."""
        self._after(self.prepare, self.build)
        recipe, run, options, strategy = self.recipe, self.run_dir, self.options, self.strategy
        config, inputs, model, restored = (recipe.architecture, self.inputs, self.trained,
                                           self.restored)
        self.dev = dev = dev_sets(self.data, inputs)
        warn_of_truncated_sources(inputs.tokenizer, translated_sources(self.data, inputs),
                                  config.max_length, run.languages())
        self.dev_scores = dev_bleu(recipe.search, options.eval_beam_size, model, dev,
                                   run.languages())
        callbacks = training_callbacks(options, recipe.training.average_last, run,
                                       (model, self.accuracy), dev, self.dev_scores,
                                       self.max_steps, restored.step)
        print(f"kt-train: {'resuming' if self.resumed else 'starting'} {run.root} on "
              f"{self.replicas} replica(s), {self.max_steps or 'unlimited'} steps, "
              f"{self.precision}, {self.implementation} kernels"
              f"{', XLA' if model.jit_compile else ''}", file=sys.stderr)
        if options.lora_rank:
            adapters = sum(int(tf.size(weight)) for weight in model.lora_adapters())
            print(f"kt-train: training LoRA adapters only: rank {options.lora_rank}, alpha "
                  f"{options.lora_alpha:g}, {adapters:,} trainable weights of "
                  f"{model.count_params():,}", file=sys.stderr)
        if restored.source:
            print(f"kt-train: restored step {restored.step} from {restored.source}"
                  + ("" if restored.exact else " (a checkpoint: no dropout seeds, so later "
                     "dropout masks differ from an uninterrupted run's)"), file=sys.stderr)
        # The data resumes where the restored step left it: the same stream, located in the
        # plan.
        batches = training_batches(strategy, self.plan.dataset, restored.step,
                                   run.root / "batches.tsv" if options.log_batches else None)
        unit = epoch_steps(options.eval_every, options.backup_every)
        epochs = math.ceil(self.max_steps / unit) if self.max_steps else 1_000_000_000
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
            raise TrainingError(f"loss became NaN at step {callbacks[0].step}; nothing "
                                "exported; the same command resumes from the newest backup "
                                "with finite weights (lower the learning rate to avoid "
                                "diverging again)")
        self.model = model
        if options.lora_rank:
            # The files other commands read hold plain weights: the adapters merged into the
            # kernels. From here on (the run's result, test, export) the merged model is used.
            with strategy.scope(), precision_scope(self.precision):
                self.model = model.merge_lora()
        save_weights_atomic(self.model, run.final_weights)
        guided = self.guided_alignment
        if guided is not None:  # the head trained to align is the one that aligns
            write_alignment_heads(run.root, AlignmentHeads(guided.layer, (guided.head,)),
                                  {"reference": "guided alignment training",
                                   "weight": guided.weight})
        if self.model is not model:  # the merged model: a translator of its own
            self.dev_scores = dev_bleu(recipe.search, options.eval_beam_size, self.model, dev,
                                       run.languages())
        self.summary.update(run_dir=os.fspath(run.root), steps=callbacks[0].step,
                            precision=self.precision, kernels=self.implementation)
        self._done.add("fit")
        return callbacks[0].step

    def average(self) -> dict:
        """Averages the newest checkpoints, keeps the better on dev of the average and the
        final weights as the run's result (`result.json`), prints the dev figures and returns
        the result."""
        self._after(self.prepare, self.build, self.fit)
        run, dev, dev_scores = self.run_dir, self.dev, self.dev_scores
        result = keep_better_of_average_and_final(
            self.model, run, self.recipe.training.average_last,
            dev_bleu=(lambda: dev_scores()[""]) if "" in dev else dev_scores,
            stage=lambda what: stage("kt-train", what), checkpoint_model=self.trained)
        if not result["averaged"]:
            print(f"kt-train: {result['averaging']}", file=sys.stderr)
        scores = ", ".join(f"{kind} {value:.2f}" for kind, value in result["dev_bleu"].items())
        sentences = sum(len(dev_set.sources) for dev_set in dev.values())
        print(f"kt-train: {dev_bleu_name(self.options.eval_beam_size, sentences, len(dev))}: "
              f"{scores}"
              + "".join(f"; {name} " + ", ".join(f"{kind} {value:.2f}" for kind, value
                                                 in pair.items())
                        for name, pair in result.get("dev_bleu_pairs", {}).items())
              + f"; the run's result: {result['weights']}", file=sys.stderr)
        self.summary.update(result)
        self._done.add("average")
        return result

    def test(self) -> Optional[dict]:
        """The test pass of the run's result, where the data has a test set: its hypotheses
        file and figures (`test.json`); None without one."""
        self._after(self.prepare, self.build, self.fit, self.average)
        run, inputs, model = self.run_dir, self.inputs, self.model
        search, beam = self.recipe.search, self.options.test_beam_size
        if "test" in inputs.corpora:
            with stage("kt-train", f"test set: translating {len(inputs.corpora['test'][0]):,} "
                       f"sentences (beam {beam or search.beam_size})"):
                self.summary["test"] = evaluate_test(
                    run, test_translator(search, beam, run, model, inputs.tokenizer),
                    inputs.corpora["test"], inputs.gold_trees)
            run.write_json(TEST_FILE, self.summary["test"])
        if inputs.pairs and inputs.pairs.test:
            self.summary["test"] = evaluate_pairs_test(search, beam, run, model, self.dev,
                                                       inputs.pairs.test)
            run.write_json(TEST_FILE, self.summary["test"])
        self._done.add("test")
        return self.summary.get("test")

    def export(self) -> dict:
        """Exports the run's result as a SavedModel (`options.export_name` under
        `options.export_dir`) and returns what `export_translator` wrote."""
        self._after(self.prepare, self.build, self.fit, self.average)
        run, options = self.run_dir, self.options
        name = export_name(options, run)
        with stage("kt-train", f"exporting {name} to {options.export_dir}"):
            self.summary["export"] = export_translator(
                self.model, self.inputs.tokenizer, name, base_dir=options.export_dir,
                settings=self.recipe.search, provenance=run.provenance(),
                languages=run.languages(),
                alignment=read_alignment_heads(run.root, self.model.config))
        self._done.add("export")
        return self.summary["export"]

    def run(self) -> dict:
        """Runs every stage (the export unless `options.export` is off); returns the summary
        (paths, steps, scores)."""
        stages = (self.prepare, self.build, self.fit, self.average, self.test,
                  *((self.export,) if self.options.export else ()))
        for next_stage in self._pending(*stages):
            next_stage()
        return self.summary


def train(recipe: Recipe, data: TrainingData = TrainingData(),
          options: RunOptions = RunOptions(), run_dir: str | os.PathLike = "runs/demo") -> dict:
    """Runs the whole job of `recipe` on `data` with `options` in `run_dir` (`Training.run`);
    returns a summary (paths, steps, scores)."""
    return Training(recipe, data, options, run_dir).run()


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
