"""Typed model/training configuration with the paper's presets (Table 3)."""
from __future__ import annotations

import dataclasses
import json
from typing import Any, Optional

from keras_transformer.search_settings import SearchSettings

POSITIONAL_KINDS = ("sinusoidal", "learned")
NORM_KINDS = ("post", "pre")


@dataclasses.dataclass(frozen=True)
class TransformerConfig:
    """Every hyper-parameter of a Transformer run.

    Model fields follow the paper's names (section 3, Table 3); `d_k`/`d_v` default to
    `d_model // num_heads`. Training and decoding defaults (sections 5.3, 5.4, 6.1) live here
    too so that one object describes a reproducible run.
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
    label_smoothing: float = 0.1
    positional: str = "sinusoidal"
    norm: str = "post"
    share_embeddings: bool = True
    tie_output: bool = True
    max_length: int = 256
    layer_norm_epsilon: float = 1e-6
    # Training (section 5).
    warmup_steps: int = 4000
    learning_rate_scale: float = 1.0
    batch_tokens: int = 25000
    # Decoding (section 6.1): the model's default `SearchSettings`.
    beam_size: int = 4
    length_penalty: float = 0.6
    max_decode_extra: int = 50

    def __post_init__(self) -> None:
        positive_ints = ("vocab_size", "num_layers", "d_model", "d_ff", "num_heads",
                         "max_length", "warmup_steps", "batch_tokens")
        for name in positive_ints:
            _require(isinstance(getattr(self, name), int) and getattr(self, name) > 0,
                     name, "must be a positive integer")
        for name in ("target_vocab_size", "d_k", "d_v"):
            value = getattr(self, name)
            _require(value is None or (isinstance(value, int) and value > 0),
                     name, "must be a positive integer or None")
        for name in ("dropout", "attention_dropout", "label_smoothing"):
            _require(0.0 <= getattr(self, name) < 1.0, name, "must be in [0, 1)")
        _require(self.learning_rate_scale > 0, "learning_rate_scale", "must be positive")
        SearchSettings.of(self)  # validates beam_size, length_penalty, max_decode_extra
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
        """A named preset (`tiny`, `small`, `base`, `big`, `parsing`, ...) with field overrides."""
        if name not in PRESETS:
            raise ValueError(f"preset: unknown preset {name!r}; choose from {sorted(PRESETS)}")
        return cls.from_dict({**PRESETS[name], **overrides})

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> "TransformerConfig":
        """Builds a config, naming any unknown field."""
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(values) - known)
        if unknown:
            raise ValueError(f"unknown config field(s) {unknown}; known fields: {sorted(known)}")
        return cls(**values)

    @classmethod
    def from_saved(cls, values: dict[str, Any]) -> "TransformerConfig":
        """A config as saved with a model or run, possibly by an earlier version: a field added
        since takes the value that rebuilds the saved model (`attention_bias`: True, as every
        version before the field had attention biases)."""
        return cls.from_dict({**_FIELDS_BEFORE_THEY_EXISTED, **values})

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


# What models saved before a field existed were built with.
_FIELDS_BEFORE_THEY_EXISTED: dict[str, Any] = {"attention_bias": True}


def _require(condition: bool, field: str, message: str) -> None:
    if not condition:
        raise ValueError(f"{field}: {message}")


PRESETS: dict[str, dict[str, Any]] = {
    # The paper's models (Table 3, rows "base" and "big").
    "base": {},
    "big": {"d_model": 1024, "d_ff": 4096, "num_heads": 16, "dropout": 0.3},
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
    "tiny": {"vocab_size": 1000, "num_layers": 2, "d_model": 64, "d_ff": 256, "num_heads": 4,
             "dropout": 0.1, "warmup_steps": 400, "batch_tokens": 2048, "max_length": 64},
}
