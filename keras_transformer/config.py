"""The architecture of a Transformer: what `Transformer(config)` builds and saves with it."""
from __future__ import annotations

import dataclasses
import json
from typing import Any, Optional

from keras_transformer.presets import preset_fields
from keras_transformer.search_settings import SearchSettings
from keras_transformer.training_settings import TrainingSettings

POSITIONAL_KINDS = ("sinusoidal", "learned")
NORM_KINDS = ("post", "pre")


@dataclasses.dataclass(frozen=True)
class TransformerConfig:
    """The architecture's hyper-parameters, with the paper's names (section 3, Table 3).

    `d_k`/`d_v` default to `d_model // num_heads`. How the model is trained
    (`TrainingSettings`) and searched (`SearchSettings`) are separate objects; a `Recipe`
    holds all three.
    """

    vocab_size: int = 37000
    target_vocab_size: Optional[int] = None
    num_layers: int = 6
    d_model: int = 512
    d_ff: int = 2048
    num_heads: int = 8
    d_k: Optional[int] = None
    d_v: Optional[int] = None
    dropout: float = 0.1
    attention_dropout: float = 0.0
    attention_bias: bool = False  # biases in W^Q, W^K, W^V, W^O; the paper's have none (3.2.2)
    positional: str = "sinusoidal"
    norm: str = "post"
    share_embeddings: bool = True
    tie_output: bool = True
    max_length: int = 256
    layer_norm_epsilon: float = 1e-6

    def __post_init__(self) -> None:
        positive_ints = ("vocab_size", "num_layers", "d_model", "d_ff", "num_heads",
                         "max_length")
        for name in positive_ints:
            _require(isinstance(getattr(self, name), int) and getattr(self, name) > 0,
                     name, "must be a positive integer")
        for name in ("target_vocab_size", "d_k", "d_v"):
            value = getattr(self, name)
            _require(value is None or (isinstance(value, int) and value > 0),
                     name, "must be a positive integer or None")
        for name in ("dropout", "attention_dropout"):
            _require(0.0 <= getattr(self, name) < 1.0, name, "must be in [0, 1)")
        _require(self.layer_norm_epsilon > 0, "layer_norm_epsilon", "must be positive")
        _require(self.positional in POSITIONAL_KINDS, "positional", f"must be one of {POSITIONAL_KINDS}")
        _require(self.norm in NORM_KINDS, "norm", f"must be one of {NORM_KINDS}")
        if self.d_k is None or self.d_v is None:
            _require(self.d_model % self.num_heads == 0, "num_heads",
                     f"d_model={self.d_model} is not divisible by num_heads={self.num_heads}; "
                     "set d_k and d_v explicitly")
        if self.share_embeddings and self.target_vocab_size not in (None, self.vocab_size):
            raise ValueError("target_vocab_size: differs from vocab_size, which needs "
                             "share_embeddings=False")

    @property
    def key_dim(self) -> int:
        """d_k: per-head query/key size."""
        return self.d_k if self.d_k is not None else self.d_model // self.num_heads

    @property
    def value_dim(self) -> int:
        """d_v: per-head value size."""
        return self.d_v if self.d_v is not None else self.d_model // self.num_heads

    @property
    def output_vocab_size(self) -> int:
        """Size of the target vocabulary (the softmax)."""
        return self.target_vocab_size or self.vocab_size

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
        setting belongs to)."""
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
        return dataclasses.asdict(self)

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> "TransformerConfig":
        """`from_saved` of the JSON `to_json` writes."""
        return cls.from_saved(json.loads(text))


_FIELDS = {field.name for field in dataclasses.fields(TransformerConfig)}
# What models saved before a field existed were built with.
_FIELDS_BEFORE_THEY_EXISTED: dict[str, Any] = {"attention_bias": True}
# The settings that earlier versions kept in `TransformerConfig`, by the class that owns them.
_SETTINGS_OWNERS = {field.name: owner.__name__ for owner in (TrainingSettings, SearchSettings)
                    for field in dataclasses.fields(owner)}


def _require(condition: bool, field: str, message: str) -> None:
    if not condition:
        raise ValueError(f"{field}: {message}")

