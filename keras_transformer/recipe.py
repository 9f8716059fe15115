"""A run's recipe: the architecture, how to train it and how to search with it."""
from __future__ import annotations

import dataclasses
from typing import Any

from keras_transformer.config import TransformerConfig
from keras_transformer.presets import preset_fields
from keras_transformer.search_settings import SearchSettings
from keras_transformer.training_settings import TrainingSettings

_PARTS = {"architecture": TransformerConfig, "training": TrainingSettings,
          "search": SearchSettings}


@dataclasses.dataclass(frozen=True)
class Recipe:
    """`TransformerConfig` + `TrainingSettings` + `SearchSettings`: everything a run needs.

    Its flat form (`to_dict`, `from_dict`, a preset's table, `kt-train --set key=value`) names
    each field once; the field names of the three parts never collide.

    Example:
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
        ValueError names an unknown field or an invalid value's field."""
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

    def to_dict(self) -> dict[str, Any]:
        """The flat form: every field of the three parts."""
        return {key: value for part in _PARTS for key, value in
                dataclasses.asdict(getattr(self, part)).items()}

    @staticmethod
    def field_default(name: str) -> Any:
        """The default of flat field `name` (a KeyError if there is no such field)."""
        return _DEFAULTS[name]


_OWNER = {field.name: part for part, kind in _PARTS.items() for field in dataclasses.fields(kind)}
_DEFAULTS = {field.name: field.default for kind in _PARTS.values()
             for field in dataclasses.fields(kind)}
