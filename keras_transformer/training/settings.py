"""What a training run is given besides its recipe: where its sentence pairs come from
(`TrainingData`) and how it runs (`RunOptions`); `kt-train` parses its command line into
these, and a Python program builds them itself (`training.run.Training`)."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

from keras_transformer.config import PLACEMENTS
from keras_transformer.data.languages import LanguagePair

SPLITS = ("train", "dev", "test")


@dataclass(frozen=True)
class TrainingData:
    """A run's sentence pairs: one of local files (`train_src`/`train_tgt`: one source and
    one target file per corpus; `dev_src`/`dev_tgt` required, `test_src`/`test_tgt`
    optional; `prepared`: kt-prepare's storage instead of the train files), a
    tensorflow-datasets builder (`tfds`, its `tfds_splits` "train,dev,test" names, the
    `source_lang`/`target_lang` features of its pairs, `tfds_data_dir`), several language pairs
    (`language_pairs` in order, `pair_files`: pair name -> split -> [source file, target
    file]; drawn at `pair_temperature`, the language tokens placed at `language_token`), or
    none of these: the generated demo corpus, written into the run directory.
    `test_tree`: the gold trees of `test_src` (a parsing run's test pass); `vocab_sentences`:
    the sentences sampled to learn a new run's vocabulary. `alignments`: word alignments of the
    local training corpora, one file per corpus (Pharaoh `i-j` lines), for guided alignment
    training (`RunOptions.alignment_weight`)."""

    train_src: tuple[str, ...] = ()
    train_tgt: tuple[str, ...] = ()
    dev_src: Optional[str] = None
    dev_tgt: Optional[str] = None
    test_src: Optional[str] = None
    test_tgt: Optional[str] = None
    test_tree: Optional[str] = None
    prepared: Optional[str] = None
    tfds: Optional[str] = None
    tfds_splits: str = "train,validation,test"
    tfds_data_dir: Optional[str] = None
    source_lang: str = "en"
    target_lang: str = "de"
    language_pairs: tuple[LanguagePair, ...] = ()
    pair_files: dict[str, dict[str, list[str]]] = field(default_factory=dict)
    pair_temperature: float = 1.0
    language_token: str = PLACEMENTS[0]
    vocab_sentences: int = 2_000_000
    alignments: tuple[str, ...] = ()

    @classmethod
    def files(cls, train: tuple[str, str] | list[tuple[str, str]], dev: tuple[str, str],
              test: Optional[tuple[str, str]] = None, **fields) -> "TrainingData":
        """Local files: `train` one (source, target) pair of files or a list of them (one
        per corpus), `dev` and optionally `test` (source, target); `fields` any other."""
        corpora = [train] if isinstance(train, tuple) else list(train)
        return cls(train_src=tuple(str(source) for source, _ in corpora),
                   train_tgt=tuple(str(target) for _, target in corpora),
                   dev_src=str(dev[0]), dev_tgt=str(dev[1]),
                   test_src=str(test[0]) if test else None,
                   test_tgt=str(test[1]) if test else None, **fields)

    @property
    def demo(self) -> bool:
        """Whether the run trains on the generated demo corpus (no data given)."""
        return not (self.tfds or self.dev_src or self.language_pairs)

    def tfds_split_names(self) -> dict[str, str]:
        """`tfds_splits` as split ("train", "dev", "test") -> the dataset's split name."""
        return dict(zip(SPLITS, self.tfds_splits.split(",")))


@dataclass(frozen=True)
class RunOptions:
    """How a run trains, evaluates and ends.

    Start: `seed` (data order and initialization), `precision` and `kernels` ("auto": measured
    here, `training.probes`), `cpu_replicas` (the CPU split into that many mirrored devices; 0:
    no split), `jit_compile`, `steps_per_execution`; `init_from` a run directory to fine-tune,
    with `lora_rank`/`lora_alpha` LoRA adapters only (alpha None: the rank).
    Length: `steps`, or `epochs` over the data, and/or `max_minutes` (none of them:
    `DEFAULT_STEPS`).
    Schedules: dev BLEU every `eval_every` steps (and `eval_every_minutes`) on
    `eval_sentences` sentences with `eval_beam_size`, `attention_sentences` plotted; backups
    every `backup_every` steps (and `backup_every_minutes`); checkpoints every
    `checkpoint_every_minutes` (and `checkpoint_every_steps`), the newest `keep_checkpoints`
    kept (None: 5, or the recipe's `average_last`); TensorBoard's scalars every
    `log_every_steps`, progress lines every `progress_seconds`; `log_batches` a digest of each
    batch in `batches.tsv`.
    End: the test pass with `test_beam_size` (None: the recipe's); the export (`export`) as
    `export_name` (None: the run directory's name + "-staging") under `export_dir`.
    Guided alignment (data with `alignments`): the alignment loss's `alignment_weight`."""

    seed: int = 0
    precision: str = "auto"
    kernels: str = "auto"
    cpu_replicas: int = 0
    jit_compile: bool = False
    steps_per_execution: int = 1
    init_from: Optional[str] = None
    lora_rank: Optional[int] = None
    lora_alpha: Optional[float] = None
    steps: Optional[int] = None
    epochs: Optional[float] = None
    max_minutes: Optional[float] = None
    eval_every: int = 250
    eval_every_minutes: Optional[float] = None
    eval_sentences: int = 200
    eval_beam_size: int = 1
    attention_sentences: int = 2
    backup_every: int = 100
    backup_every_minutes: Optional[float] = None
    checkpoint_every_steps: Optional[int] = None
    checkpoint_every_minutes: float = 10.0
    keep_checkpoints: Optional[int] = None
    log_every_steps: int = 50
    progress_seconds: float = 30.0
    log_batches: bool = False
    test_beam_size: Optional[int] = None
    export: bool = True
    export_name: Optional[str] = None
    export_dir: str = "saved_models"
    alignment_weight: float = 0.05

    def __post_init__(self) -> None:
        if self.lora_rank is not None and self.lora_alpha is None:
            # Recorded as resolved: a restart that spells out the default is the same run.
            object.__setattr__(self, "lora_alpha", float(self.lora_rank))

def recorded_options(data: TrainingData, options: RunOptions) -> dict:
    """What of `data` and `options` a restart must repeat: the data, the vocabulary's
    sentences, the seed, `init_from` and the LoRA adapters' rank and alpha (not the step
    budget); `Training.prepare` adds the resolved precision and implementation (backups do not
    restore across loss scaling). Options that apply only to `tfds` data (its languages and
    splits) are recorded for such runs only."""
    # One training corpus is recorded as a path, as before several could be given.
    corpora = {name: (files[0] if len(files) == 1 else list(files)) if files else None
               for name, files in (("train_src", data.train_src), ("train_tgt", data.train_tgt))}
    values = {**corpora, **{name: getattr(data, name) for name in (
        "prepared", "dev_src", "dev_tgt", "tfds", "vocab_sentences")}, **{
        name: getattr(options, name) for name in ("seed", "init_from", "lora_rank",
                                                  "lora_alpha")}}
    if data.tfds:
        values.update({name: getattr(data, name)
                       for name in ("source_lang", "target_lang", "tfds_splits")})
    if data.language_pairs:  # as a list: their order is the order of the shares drawn
        values.update(pairs=[{"name": name, **{split: list(paths)
                                               for split, paths in files.items()}}
                             for name, files in data.pair_files.items()],
                      pair_temperature=data.pair_temperature, language_token=data.language_token)
    if data.alignments:  # guided alignment, recorded for such runs only
        values.update(alignments=list(data.alignments),
                      alignment_weight=options.alignment_weight)
    return values
