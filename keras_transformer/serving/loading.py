"""Finding and loading an export of any kind, a SavedModel (`export.py`), a CTranslate2 model
(`ctranslate2_export.py`) or a LiteRT model (`litert_export.py`), in TF Serving's
`NAME/VERSION/` layout."""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Optional

from keras_transformer.data.languages import RunLanguages, chosen_languages
from keras_transformer.serving.ctranslate2_export import CTranslate2Search, is_ctranslate2_model
from keras_transformer.serving.litert_export import (fixed_source_length, is_litert_model,
                                                     litert_functions)
from keras_transformer.serving.text_translation import LineTranslator

# Where an export's provenance record is (`provenance`): the model's architecture, among others.
PROVENANCE_FILE = os.path.join("assets.extra", "keras_transformer_provenance.json")


def is_export(directory: Path) -> bool:
    """Whether `directory` holds a SavedModel, a CTranslate2 model or a LiteRT model."""
    return ((directory / "saved_model.pb").is_file() or is_ctranslate2_model(directory)
            or is_litert_model(directory))


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
        raise FileNotFoundError(f"model: {str(path)!r} is neither an export (SavedModel, "
                                "CTranslate2 or LiteRT model) nor a directory of numbered "
                                "versions")
    return versions[-1][1]


def load_export(path: str | os.PathLike, target_language: Optional[str] = None,
                threads: int = 2, source_language: Optional[str] = None) -> LineTranslator:
    """The export of `export_version(path)` as a `LineTranslator` (its search settings are
    fixed), translating into `target_language`: needed by the export of a model of several
    target languages (optional for an imported one, whose texts may carry their own token),
    refused by one of one, from `source_language` where the model reads it (both checked by
    `chosen_languages`). `threads`: a LiteRT model's interpreter's."""
    version = export_version(path)
    languages = recorded_languages(version)
    asked = chosen_languages(languages, target_language, source_language, repr(str(version)))
    language, source = asked.target, asked.source
    max_length = recorded_facts(version).get("architecture", {}).get("max_length")
    if is_litert_model(version):
        max_length = fixed_source_length(version) or max_length
        translate_text, translate_ids, translate_aligned, tokenizer, owner = litert_functions(
            version, threads=threads, target_language=language, source_language=source)
        return LineTranslator(translate_text, translate_ids, tokenizer, owner=owner,
                              max_length=max_length, languages=languages, language=language,
                              source_language=source, translate_aligned=translate_aligned)
    if is_ctranslate2_model(version):
        search = CTranslate2Search(version, target_language=language, source_language=source)
        return LineTranslator(search.translate_text, search.translate_ids, search.tokenizer,
                              owner=search.translator,
                              translate_prefixed=search.translate_prefixed,
                              max_length=max_length, languages=languages, language=language,
                              source_language=source,
                              translate_aligned=search.translate_aligned if search.aligns
                              else None)
    return LineTranslator.from_saved_model(version, max_length=max_length,
                                           target_language=language, languages=languages,
                                           source_language=source)


def recorded_languages(version: Path) -> Optional[RunLanguages]:
    """The target languages of the model the export `version` holds, as its provenance record
    says; None for a model of one (or an export without a record)."""
    languages = recorded_facts(version).get("languages")
    return None if languages is None else RunLanguages.from_dict(languages)


def recorded_facts(version: Path) -> dict[str, Any]:
    """The provenance record of the export `version` (the model's architecture, its target
    languages, ...); {} for an export without one (written before records were kept)."""
    record = version / PROVENANCE_FILE
    if not record.is_file():
        return {}
    try:
        return json.loads(record.read_text(encoding="utf-8"))
    except json.JSONDecodeError as error:
        raise ValueError(f"{record}: not valid JSON ({error})") from None
