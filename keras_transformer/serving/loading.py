"""Finding and loading an export of either kind, a SavedModel (`export.py`) or a CTranslate2
model (`ctranslate2_export.py`), in TF Serving's `NAME/VERSION/` layout."""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Optional

from keras_transformer.serving.ctranslate2_export import ctranslate2_functions, is_ctranslate2_model
from keras_transformer.serving.text_translation import TextTranslator

# Where an export's provenance record is (`provenance`): the model's architecture, among others.
PROVENANCE_FILE = os.path.join("assets.extra", "keras_transformer_provenance.json")


def is_export(directory: Path) -> bool:
    """Whether `directory` holds a SavedModel or a CTranslate2 model."""
    return (directory / "saved_model.pb").is_file() or is_ctranslate2_model(directory)


def export_version(path: str | os.PathLike) -> Path:
    """`path` if it is an export, else its newest integer version that is one; FileNotFoundError
    naming `path` otherwise."""
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"model: {str(path)!r} does not exist")
    if is_export(path):
        return path
    versions = sorted((int(entry.name), entry) for entry in path.glob("*")
                      if entry.name.isdigit() and is_export(entry))
    if not versions:
        raise FileNotFoundError(f"model: {str(path)!r} is neither an export (SavedModel or "
                                "CTranslate2 model) nor a directory of numbered versions")
    return versions[-1][1]


def load_export(path: str | os.PathLike) -> TextTranslator:
    """The export of `export_version(path)` as a `TextTranslator` (its search settings are
    fixed)."""
    version = export_version(path)
    max_length = recorded_max_length(version)
    if is_ctranslate2_model(version):
        translate_text, translate_ids, translate_prefixed, tokenizer, owner = (
            ctranslate2_functions(version))
        return TextTranslator(translate_text, translate_ids, tokenizer, owner, translate_prefixed,
                              max_length)
    return TextTranslator.from_saved_model(version, max_length)


def recorded_max_length(version: Path) -> Optional[int]:
    """The `max_length` of the model the export `version` holds, as its provenance record
    says; None for an export without one (written before records were kept)."""
    record = version / PROVENANCE_FILE
    if not record.is_file():
        return None
    try:
        return json.loads(record.read_text(encoding="utf-8")).get("architecture", {}).get(
            "max_length")
    except json.JSONDecodeError as error:
        raise ValueError(f"{record}: not valid JSON ({error})") from None
