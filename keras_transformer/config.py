"""What a run is made of: the architecture (`TransformerConfig`, what `Transformer(config)`
builds and saves with it), how it is trained (`TrainingSettings`, section 5), how it is
searched (`SearchSettings`, section 6.1), the three together (`Recipe`), and the named recipes
(`PRESETS`: the paper's models, every Table 3 row as overrides, CPU-sized ones); the
reserved token ids every vocabulary, model, loss and search shares; and the named choices the
command lines offer (precision policies, implementations, quantizations, ...). It imports nothing
heavy: a command's `--help` reads it without TensorFlow.
"""
from __future__ import annotations

import dataclasses
import json
from typing import Any, ClassVar, Mapping, Optional

POSITIONAL_KINDS = ("sinusoidal", "learned")
SINUSOID_LAYOUTS = ("interleaved", "halves", "fairseq")
NORM_KINDS = ("post", "pre")
ACTIVATIONS = ("relu", "swish", "gelu", "gelu_sigmoid")

# The named choices and defaults the command lines offer (read by `trainers.arguments` for
# `--help` without importing TensorFlow), each used under this name by the module acting on it.
PRECISION_POLICIES = ("float32", "mixed_bfloat16", "mixed_float16")
"""Keras mixed-precision policies a run trains in."""
PRECISION_CHOICES = ("auto", *PRECISION_POLICIES)
"""kt-train's `--precision`: a policy, or `auto` (measured on the machine)."""
SERVING_DTYPES = ("float32", "bfloat16")
"""What an export may store and compute in: bfloat16 has float32's range, so inference needs no
loss-scale-like care; float16 does not."""

FAST = "fast"
REFERENCE = "reference"
IMPLEMENTATIONS = (FAST, REFERENCE)
"""The implementations: the core's references and the `fast` subpackage's twins."""
IMPLEMENTATION_CHOICES = ("auto", *IMPLEMENTATIONS)
"""kt-train's `--kernels`: a set, or `auto` (measured on the machine)."""
IMPLEMENTATION_VARIABLE = "KT_KERNELS"
"""The environment variable that chooses the implementation."""

CTRANSLATE2_QUANTIZATIONS = ("int8", "int8_float32", "int16", "float16", "bfloat16", "float32")
"""How a CTranslate2 export stores its weights (CTranslate2's names)."""
LITERT_QUANTIZATIONS = ("float32", "float16", "int8")
"""How a LiteRT export stores its weights."""
WARMUP_MAX_WIDTH = 64
"""An XLA export's warm-up requests cover each padded source width up to this many pieces."""

PLACEMENTS = ("source", "target")
"""Where a model of several target languages reads its language token."""
DEFAULT_SHARD_PAIRS = 1_000_000
"""Pairs per shard of prepared training data."""
DEFAULT_STEPS = 1000
"""A run's steps when neither steps, epochs nor minutes are given."""
ROW_BLOCK_BYTES = 64 << 20
"""A large variable (NLLB-200's 1 GB embedding) is imported and saved about this many bytes of
rows at a time: the memory beside the model's variables."""
LEAVES = ("placeholder", "words")
"""What stands for each word in a linearized parse tree."""

PAD_ID = 0
"""Padding; ignored by the loss and masked out of attention."""
UNK_ID = 1
"""Unknown piece (rare: the tokenizer falls back to bytes)."""
BOS_ID = 2
"""Start of sequence; first input of the decoder."""
EOS_ID = 3
"""End of sequence; appended to every source and target."""


@dataclasses.dataclass(frozen=True)
class TransformerConfig:
    """The architecture's hyper-parameters, with the paper's names (section 3, Table 3).

    `num_layers` is N of section 3.1 on both sides; `num_encoder_layers` and
    `num_decoder_layers` set one side's depth instead (e.g. a deep encoder and a one-layer
    decoder, Kasai et al., 2021); everything reads `encoder_depth` and `decoder_depth`.
    `key_dim`/`value_dim` (the paper's d_k/d_v) default to `d_model // num_heads` and
    `target_vocab_size` to `vocab_size`: given as None, they read as that value, and `to_dict`
    saves them as given (so a `replace` of `d_model` or `vocab_size` moves them along). Names
    that earlier versions saved (`d_k`, `d_v`) are read as theirs. How the model is trained
    (`TrainingSettings`) and searched (`SearchSettings`) are separate objects; a `Recipe`
    holds all three.
    """

    # The derived fields as given (None: derived), what `to_dict` saves; not a field.
    _given: ClassVar[dict[str, Any]]
    vocab_size: int = 37000
    target_vocab_size: Optional[int] = None
    num_layers: int = 6
    num_encoder_layers: Optional[int] = None
    num_decoder_layers: Optional[int] = None
    d_model: int = 512
    d_ff: int = 2048
    num_heads: int = 8
    key_dim: Optional[int] = None
    value_dim: Optional[int] = None
    dropout: float = 0.1
    attention_dropout: float = 0.0
    attention_bias: bool = False  # biases in W^Q, W^K, W^V, W^O; the paper's have none (3.2.2)
    positional: str = "sinusoidal"
    norm: str = "post"
    share_embeddings: bool = True
    tie_output: bool = True
    max_length: int = 256
    layer_norm_epsilon: float = 1e-6
    # Options of models trained elsewhere (e.g. imported Marian ones); the defaults are the
    # paper's. The feed-forward activation; the sinusoids' order across dimensions (the
    # paper's sin/cos interleaved, all sines then all cosines, or so at fairseq's frequencies);
    # the position a sequence's first token is encoded as (fairseq's models: 2); whether the
    # embeddings are multiplied by sqrt(d_model) (3.4; some fairseq models' are not); a layer
    # norm on the embeddings plus positions; a bias on the pre-softmax projection.
    activation: str = "relu"
    sinusoid_layout: str = "interleaved"
    position_offset: int = 0
    scale_embedding: bool = True
    embedding_norm: bool = False
    output_bias: bool = False

    def __post_init__(self) -> None:
        positive_ints = ("vocab_size", "num_layers", "d_model", "d_ff", "num_heads",
                         "max_length")
        for name in positive_ints:
            _require(isinstance(getattr(self, name), int) and getattr(self, name) > 0,
                     name, "must be a positive integer")
        for name in ("target_vocab_size", "num_encoder_layers", "num_decoder_layers", "key_dim",
                     "value_dim"):
            value = getattr(self, name)
            _require(value is None or (isinstance(value, int) and value > 0),
                     name, "must be a positive integer or None")
        for name in ("dropout", "attention_dropout"):
            _require(0.0 <= getattr(self, name) < 1.0, name, "must be in [0, 1)")
        _require(self.layer_norm_epsilon > 0, "layer_norm_epsilon", "must be positive")
        _require(isinstance(self.position_offset, int) and self.position_offset >= 0,
                 "position_offset", "must be a non-negative integer")
        _require(self.positional in POSITIONAL_KINDS, "positional",
                 f"must be one of {POSITIONAL_KINDS}")
        _require(self.norm in NORM_KINDS, "norm", f"must be one of {NORM_KINDS}")
        _require(self.activation in ACTIVATIONS, "activation", f"must be one of {ACTIVATIONS}")
        _require(self.sinusoid_layout in SINUSOID_LAYOUTS, "sinusoid_layout",
                 f"must be one of {SINUSOID_LAYOUTS}")
        if self.key_dim is None or self.value_dim is None:
            _require(self.d_model % self.num_heads == 0, "num_heads",
                     f"d_model={self.d_model} is not divisible by num_heads={self.num_heads}; "
                     "set key_dim and value_dim explicitly")
        if self.share_embeddings and self.target_vocab_size not in (None, self.vocab_size):
            raise ValueError("target_vocab_size: differs from vocab_size, which needs "
                             "share_embeddings=False")
        given = {name: getattr(self, name) for name in _DERIVED}
        object.__setattr__(self, "_given", given)
        for name, derived in _DERIVED.items():
            if given[name] is None:
                object.__setattr__(self, name, derived(self))

    @property
    def encoder_depth(self) -> int:
        """The encoder's number of layers."""
        return self.num_encoder_layers or self.num_layers

    @property
    def decoder_depth(self) -> int:
        """The decoder's number of layers."""
        return self.num_decoder_layers or self.num_layers

    @classmethod
    def preset(cls, name: str, **overrides: Any) -> "TransformerConfig":
        """The architecture of a named preset (`tiny`, `small`, `base`, `big`, `parsing`, ...)
        with field overrides; `Recipe.preset` gives its training and search settings too."""
        values = preset_fields(name)
        return cls.from_dict({**{key: values[key] for key in values if key in _FIELDS},
                              **overrides})

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> "TransformerConfig":
        """Builds a config, naming any unknown field (and the object a training or search
        setting belongs to); a field's earlier name (`d_k`) is read as the field."""
        values = renamed(values)
        unknown = sorted(set(values) - _FIELDS)
        if unknown:
            elsewhere = [f"{name} is a {_SETTINGS_OWNERS[name]} field" for name in unknown
                         if name in _SETTINGS_OWNERS]
            raise ValueError(f"unknown config field(s) {unknown}"
                             + (f" ({'; '.join(elsewhere)}, not an architecture field)"
                                if elsewhere else "")
                             + f"; known fields: {sorted(_FIELDS)}")
        return cls(**values)

    @classmethod
    def from_saved(cls, values: dict[str, Any]) -> "TransformerConfig":
        """A config as saved with a model or run, possibly by an earlier version: a field added
        since takes the value that rebuilds the saved model (`attention_bias`: True, as every
        version before the field had attention biases), and the training and search settings
        that earlier versions kept in the same object are left out."""
        architecture = {key: value for key, value in values.items()
                        if key not in _SETTINGS_OWNERS}
        return cls.from_dict({**_FIELDS_BEFORE_THEY_EXISTED, **architecture})

    def replace(self, **overrides: Any) -> "TransformerConfig":
        return self.from_dict({**self.to_dict(), **overrides})

    def to_dict(self) -> dict[str, Any]:
        """Every field, those with a derived default as given (None: derived)."""
        return {**dataclasses.asdict(self), **self._given}

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> "TransformerConfig":
        """`from_saved` of the JSON `to_json` writes."""
        return cls.from_saved(json.loads(text))


# The fields whose default is derived from others (None given: that value).
_DERIVED = {"key_dim": lambda config: config.d_model // config.num_heads,
            "value_dim": lambda config: config.d_model // config.num_heads,
            "target_vocab_size": lambda config: config.vocab_size}
# The fields' earlier names, read wherever a config or recipe is read (saved run directories,
# `.keras` files, `kt-train --set`).
RENAMED_FIELDS = {"d_k": "key_dim", "d_v": "value_dim"}


def renamed(values: dict[str, Any], earlier_names: Mapping[str, str] = RENAMED_FIELDS
            ) -> dict[str, Any]:
    """`values` (a config, saved or given) with each earlier name of `earlier_names` (earlier
    name -> name) replaced by its name; a ValueError when both name one field."""
    both = sorted(old for old, new in earlier_names.items() if old in values and new in values)
    if both:
        raise ValueError(f"{both[0]}: the earlier name of {earlier_names[both[0]]}, given as "
                         "well; give one")
    return {earlier_names.get(key, key): value for key, value in values.items()}


def _require(condition: bool, field: str, message: str) -> None:
    if not condition:
        raise ValueError(f"{field}: {message}")


@dataclasses.dataclass(frozen=True)
class TrainingSettings:
    """Label smoothing eps_ls (5.4), the learning-rate schedule of eq. (3) (`warmup_steps`,
    and `learning_rate_scale` multiplying it), the tokens per side of one global batch (5.1:
    about 25,000), how many of the last checkpoints the run's result averages (6.1: 5 for
    base, 20 for big; 0 or 1: none), and subword regularization, which the paper does not use:
    with `subword_dropout` p > 0 the training pairs are segmented by BPE-dropout (Provilkov et
    al., 2020: each merge skipped with probability p), `subword_samples` segmentations of each
    pair prepared (dev, test, decoding and exports segment deterministically), and with
    `word_dropout` p > 0 each piece of a kt-train batch's source and decoder input (never a label,
    BOS, EOS or padding) is replaced by UNK with probability p (word dropout, Sennrich et al.,
    2016). None of them changes the weights' shapes, so a trained model loads without them.
    """

    label_smoothing: float = 0.1
    warmup_steps: int = 4000
    learning_rate_scale: float = 1.0
    batch_tokens: int = 25000
    average_last: int = 5
    subword_dropout: float = 0.0
    subword_samples: int = 16
    word_dropout: float = 0.0

    def __post_init__(self) -> None:
        for name, least in (("warmup_steps", 1), ("batch_tokens", 1), ("average_last", 0),
                            ("subword_samples", 1)):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < least:
                raise ValueError(f"{name}: must be an integer of at least {least}, got {value!r}")
        if not 0.0 <= self.label_smoothing < 1.0:
            raise ValueError(f"label_smoothing: must be in [0, 1), got {self.label_smoothing!r}")
        if not self.learning_rate_scale > 0:
            raise ValueError(f"learning_rate_scale: must be positive, got "
                             f"{self.learning_rate_scale!r}")
        for name in ("subword_dropout", "word_dropout"):
            if not 0.0 <= getattr(self, name) < 1.0:
                raise ValueError(f"{name}: must be in [0, 1), got {getattr(self, name)!r}")


@dataclasses.dataclass(frozen=True)
class SearchSettings:
    """Beam size, length penalty alpha (GNMT's `((5 + length) / 6)^alpha`) and how many output
    tokens may exceed the source length. The paper: beam 4, alpha 0.6, +50; parsing (6.3):
    beam 21, alpha 0.3, +300. The same names are a `Recipe`'s search fields and the command
    lines' `--beam-size`, `--length-penalty`, `--max-decode-extra`.

    `sampling` draws each token instead of searching (`beam_size` then unused): from the
    model's distribution at `temperature`, within the `top_k` most likely tokens (0: all) and
    the nucleus of probability `top_p` (1: all), with `sampling_seed` (a sentence with the
    same seed gets the same translation: `search.sampling`).
    """

    beam_size: int = 4
    length_penalty: float = 0.6
    max_decode_extra: int = 50
    sampling: bool = False
    temperature: float = 1.0
    top_k: int = 0
    top_p: float = 1.0
    sampling_seed: int = 0

    def __post_init__(self) -> None:
        if not _is_int(self.beam_size) or self.beam_size < 1:
            raise ValueError(f"beam_size: must be a positive integer, got {self.beam_size!r}")
        if not _is_number(self.length_penalty) or not self.length_penalty >= 0:
            raise ValueError(f"length_penalty: must be a non-negative number, got "
                             f"{self.length_penalty!r}")
        if not _is_int(self.max_decode_extra) or self.max_decode_extra < 0:
            raise ValueError(f"max_decode_extra: must be a non-negative integer, got "
                             f"{self.max_decode_extra!r}")
        if not isinstance(self.sampling, bool):
            raise ValueError(f"sampling: must be true or false, got {self.sampling!r}")
        if not _is_number(self.temperature) or not self.temperature > 0:
            raise ValueError(f"temperature: must be a positive number, got {self.temperature!r}")
        if not _is_int(self.top_k) or self.top_k < 0:
            raise ValueError(f"top_k: must be a non-negative integer (0: every token), got "
                             f"{self.top_k!r}")
        if not _is_number(self.top_p) or not 0 < self.top_p <= 1:
            raise ValueError(f"top_p: must be in (0, 1], got {self.top_p!r}")
        if not _is_int(self.sampling_seed) or not 0 <= self.sampling_seed < 2 ** 32:
            raise ValueError(f"sampling_seed: must be an integer in [0, 2^32), got "
                             f"{self.sampling_seed!r}")

    @classmethod
    def of(cls, defaults: "SearchSettings", beam_size: Optional[int] = None,
           length_penalty: Optional[float] = None, max_decode_extra: Optional[int] = None,
           **others: Any) -> "SearchSettings":
        """`defaults`, each setting replaced by the argument of the same name unless that is
        None."""
        given = {"beam_size": beam_size, "length_penalty": length_penalty,
                 "max_decode_extra": max_decode_extra, **others}
        return dataclasses.replace(defaults, **{name: value for name, value in given.items()
                                                if value is not None})


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


_FIELDS = {field.name for field in dataclasses.fields(TransformerConfig)}
# What models saved before a field existed were built with.
_FIELDS_BEFORE_THEY_EXISTED: dict[str, Any] = {"attention_bias": True}
# The settings that earlier versions kept in `TransformerConfig`, by the class that owns them.
_SETTINGS_OWNERS = {field.name: owner.__name__ for owner in (TrainingSettings, SearchSettings)
                    for field in dataclasses.fields(owner)}
_PARTS = {"architecture": TransformerConfig, "training": TrainingSettings,
          "search": SearchSettings}


FINE_TUNING_WARMUP_STEPS = 200
FINE_TUNING_PEAK_RATE = 1e-4
"""`Recipe.for_fine_tuning`'s schedule: warmup steps and the peak learning rate."""


@dataclasses.dataclass(frozen=True)
class Recipe:
    """`TransformerConfig` + `TrainingSettings` + `SearchSettings`: everything a run needs.

    Its flat form (`to_dict`, `from_dict`, a preset's table, `kt-train --set key=value`) names each
    field once; the field names of the three parts never collide. For instance:

        recipe = Recipe.preset("base", vocab_size=37000, warmup_steps=8000)
        model = Transformer(recipe.architecture)
    """

    architecture: TransformerConfig = TransformerConfig()
    training: TrainingSettings = TrainingSettings()
    search: SearchSettings = SearchSettings()

    @classmethod
    def preset(cls, name: str, **overrides: Any) -> "Recipe":
        """A named preset (`tiny`, `small`, `base`, `big`, `parsing`, ...) with overrides of
        any of its fields."""
        return cls.from_dict({**preset_fields(name), **overrides})

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> "Recipe":
        """Splits flat `values` into the three parts (defaults for the fields not given); a
        ValueError names an unknown field or an invalid value's field (a field's earlier name,
        `d_k`, is read as the field)."""
        values = renamed(values)
        unknown = sorted(set(values) - set(_OWNER))
        if unknown:
            raise ValueError(f"unknown field(s) {unknown}; known fields: {sorted(_OWNER)}")
        parts = {part: {} for part in _PARTS}
        for key, value in values.items():
            parts[_OWNER[key]][key] = value
        return cls(**{part: _PARTS[part](**fields) for part, fields in parts.items()})

    @classmethod
    def from_saved(cls, values: dict[str, Any]) -> "Recipe":
        """A recipe as a run directory's `config.json` holds it, from any earlier version."""
        architecture = TransformerConfig.from_saved(values)
        rest = {key: value for key, value in values.items() if _OWNER.get(key) != "architecture"}
        return dataclasses.replace(cls.from_dict(rest), architecture=architecture)

    def replace(self, **overrides: Any) -> "Recipe":
        """This recipe with some flat fields changed."""
        return self.from_dict({**self.to_dict(), **overrides})

    def for_fine_tuning(self, **overrides: Any) -> "Recipe":
        """This recipe with eq. (3) set for fine-tuning a trained model, then `overrides` of
        training, search and dropout fields (ValueError naming any other architecture field:
        it would change the model).

        Eq. (3) peaks at `d_model^-0.5 warmup^-0.5` (7e-4 for base): right for random weights,
        large enough to undo a trained model's. Fine-tuning warms up over
        `FINE_TUNING_WARMUP_STEPS` to `FINE_TUNING_PEAK_RATE` (`learning_rate_scale` =
        peak * sqrt(d_model * warmup)), then decays as eq. (3) does.
        """
        changed = sorted(key for key in renamed(overrides)
                         if _OWNER.get(key) == "architecture"
                         and key not in ("dropout", "attention_dropout"))
        if changed:
            raise ValueError(f"{changed}: would change the model being fine-tuned (only "
                             "dropout, attention_dropout and training and search fields)")
        warmup = FINE_TUNING_WARMUP_STEPS
        scale = FINE_TUNING_PEAK_RATE * (self.architecture.d_model * warmup) ** 0.5
        return self.replace(**{"warmup_steps": warmup, "learning_rate_scale": scale,
                               **overrides})

    def to_dict(self) -> dict[str, Any]:
        """The flat form: every field of the three parts."""
        return {**self.architecture.to_dict(), **dataclasses.asdict(self.training),
                **dataclasses.asdict(self.search)}

    @staticmethod
    def field_default(name: str) -> Any:
        """The default of flat field `name` (a KeyError if there is no such field)."""
        return _DEFAULTS[name]


_OWNER = {field.name: part for part, kind in _PARTS.items() for field in dataclasses.fields(kind)}
_DEFAULTS = {field.name: field.default for kind in _PARTS.values()
             for field in dataclasses.fields(kind)}


# The named recipes: each a flat table of the fields it changes from the defaults of the
# three parts; `Recipe.preset(name)` splits it, `TransformerConfig.preset(name)` takes the
# architecture alone.
PRESETS: dict[str, dict[str, Any]] = {
    # The paper's models (Table 3, rows "base" and "big").
    "base": {},
    "big": {"d_model": 1024, "d_ff": 4096, "num_heads": 16, "dropout": 0.3, "average_last": 20},
    # Section 6.3: English constituency parsing (4 layers, d_model 1024, beam 21, alpha 0.3).
    "parsing": {"num_layers": 4, "d_model": 1024, "d_ff": 4096, "num_heads": 16,
                "max_length": 1024, "beam_size": 21, "length_penalty": 0.3,
                "max_decode_extra": 300},
    # CPU-sized parsing for the 3.9k-tree WSJ sample: smaller beam so CPU decoding stays cheap;
    # peak learning rate halved (1e-3): at 2e-3 the decoder collapsed to one tree for every input.
    "parsing-small": {"vocab_size": 4000, "num_layers": 3, "d_model": 256, "d_ff": 1024,
                      "num_heads": 4, "dropout": 0.2, "warmup_steps": 1000,
                      "learning_rate_scale": 0.5, "batch_tokens": 4096,
                      "max_length": 256, "beam_size": 8, "length_penalty": 0.3,
                      "max_decode_extra": 300},
    # CPU-sized presets: `small` for Multi30k-sized corpora, `tiny` for tests and the demo.
    "small": {"vocab_size": 8000, "num_layers": 3, "d_model": 256, "d_ff": 1024,
              "num_heads": 4, "dropout": 0.2, "warmup_steps": 2000, "batch_tokens": 4096,
              "max_length": 128},
    # The published tiny model for Multi30k (Wu et al., 2021, fairseq `transformer_tiny`: 4+4
    # layers, d_model 128, d_ff 256, dropout 0.3, peak learning rate 5e-3 at step 2,000,
    # 8,192-token batches, the last 10 checkpoints averaged, beam 5), with label smoothing 0.2
    # and length penalty 1.5 as chosen on Multi30k dev (benchmarks/RESULTS.md, "Translation
    # quality: Multi30k"); trained 8,000 steps with a checkpoint every 100 (docs/training.md).
    "multi30k": {"vocab_size": 8000, "num_layers": 4, "d_model": 128, "d_ff": 256,
                 "num_heads": 4, "dropout": 0.3, "attention_dropout": 0.0,
                 "label_smoothing": 0.2, "warmup_steps": 2000, "learning_rate_scale": 2.5,
                 "batch_tokens": 8192, "average_last": 10, "max_length": 128,
                 "beam_size": 5, "length_penalty": 1.5},
    "tiny": {"vocab_size": 1000, "num_layers": 2, "d_model": 64, "d_ff": 256, "num_heads": 4,
             "dropout": 0.1, "warmup_steps": 400, "batch_tokens": 2048, "max_length": 64},
}


def preset_fields(name: str) -> dict[str, Any]:
    """The fields preset `name` sets; a ValueError naming the presets if there is none."""
    if name not in PRESETS:
        raise ValueError(f"preset: unknown preset {name!r}; choose from {sorted(PRESETS)}")
    return dict(PRESETS[name])
