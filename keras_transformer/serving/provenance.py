"""Where an export came from: `assets.extra/keras_transformer_provenance.json` in its directory.

The record holds the run directory and the weights taken from it with the reason they were
chosen (`RunDir.chosen_weights`), the run's dev and test figures when it recorded them, where
a model imported from elsewhere came from (`import.json`: format, origin, file digests), the
search settings, precision, XLA and shortlist fixed in the export, its warm-up widths, the
model's architecture, and the code that wrote it (package version, git commit when the package
runs from a checkout, TensorFlow version). TF Serving ignores `assets.extra/`;
`kt-export --describe EXPORT` prints the record (`describe`).
"""
from __future__ import annotations

import dataclasses
import datetime
import importlib.metadata
import json
import os
import subprocess
from pathlib import Path
from typing import Any, Optional

import tensorflow as tf

from keras_transformer.data.atomic_files import write_atomic
from keras_transformer.config import SearchSettings, TransformerConfig
from keras_transformer.decoding.shortlist import VocabularyShortlist
from keras_transformer.serving.loading import PROVENANCE_FILE, export_version
_PACKAGE_DIR = Path(__file__).resolve().parents[1]  # the keras_transformer folder


def file_provenance(path: str | os.PathLike) -> dict[str, Any]:
    """The facts an export of the model file `path` (a `.keras` archive) records."""
    return {"model_file": os.path.abspath(path), "weights": os.path.abspath(path),
            "weights_reason": "the .keras archive's own weights"}


def export_record(config: TransformerConfig, settings: SearchSettings,
                  source: Optional[dict[str, Any]], **fields: Any) -> dict[str, Any]:
    """The record of an export of a model of architecture `config` searching with `settings`:
    `source` (`RunDir.provenance` or `file_provenance`; None: not known), the export's own
    `fields` (format, precision, ...) and `code_version()`."""
    return {**(source or {}), **fields, "search": dataclasses.asdict(settings),
            "architecture": config.to_dict(), "code": code_version()}


def shortlist_record(shortlist: VocabularyShortlist) -> dict[str, int]:
    """The sizes of `shortlist`: its frequent ids and the candidates per source piece."""
    return {"frequent": int(shortlist.frequent_ids.shape[0]),
            "per_source": int(shortlist.candidates.shape[1])}


def code_version() -> dict[str, Any]:
    """The package version, TensorFlow's, and the git commit of the checkout the package runs
    from (with whether it had uncommitted changes; None when it does not run from its own git
    checkout)."""
    try:
        version = importlib.metadata.version("keras-transformer")
    except importlib.metadata.PackageNotFoundError:
        version = None
    top = _git("rev-parse", "--show-toplevel")
    # Only the package's own checkout: an installed copy may sit inside another repository.
    ours = top is not None and Path(top).resolve() == _PACKAGE_DIR.parent
    commit = _git("rev-parse", "HEAD") if ours else None
    status = _git("status", "--porcelain", "--untracked-files=no") if commit else None
    return {"package_version": version, "git_commit": commit,
            "git_uncommitted_changes": None if status is None else bool(status),
            "tensorflow": tf.__version__}


def write_provenance(export_dir: str | os.PathLike, record: dict[str, Any]) -> str:
    """Writes `record`, with the time it was written (UTC), into the export directory
    `export_dir`; returns the file's path."""
    path = os.path.join(os.fspath(export_dir), PROVENANCE_FILE)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    created = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    write_atomic(path, json.dumps({"created": created, **record}, indent=2, sort_keys=True))
    return path


def read_provenance(path: str | os.PathLike) -> tuple[Path, dict[str, Any]]:
    """The export at `path` (a version directory, or a model directory for its newest version)
    and its provenance record; FileNotFoundError naming the path when `path` is no export or
    the export has no record (written before records were kept)."""
    if not os.path.exists(path):
        raise FileNotFoundError(f"{str(path)!r} does not exist")
    try:
        version = export_version(path)
    except FileNotFoundError:
        raise FileNotFoundError(f"{str(path)!r} is not an export (no saved_model.pb or "
                                "CTranslate2 model, nor numbered versions holding one)") from None
    record_path = version / PROVENANCE_FILE
    if not record_path.is_file():
        raise FileNotFoundError(f"{str(version)!r} has no {PROVENANCE_FILE} (an export written "
                                "before provenance was recorded)")
    try:
        return version, json.loads(record_path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as error:
        raise ValueError(f"{record_path}: not valid JSON ({error})") from None


_LABELS = (("created", "written (UTC)"), ("format", "format"), ("run_dir", "run directory"),
           ("model_file", "model file"), ("weights", "weights"),
           ("weights_reason", "weights chosen as"), ("dev_bleu", "dev BLEU"),
           ("averaged_checkpoints", "averaged checkpoints"), ("test", "test figures"),
           ("imported_from", "imported from"),
           ("search", "search settings"), ("precision", "precision"), ("xla", "XLA-compiled"),
           ("shortlist", "shortlist"), ("quantization", "quantization"), ("unsupported", "cannot"),
           ("warmup", "warm-up requests"), ("training_precision", "training precision"),
           ("architecture", "architecture"), ("code", "written by"))


def describe(export: Path, record: dict[str, Any]) -> str:
    """`record` (of the export at `export`) as readable lines: a label and its value for each
    field, known fields first, none left out; "none" for a field recorded as unknown."""
    labels = dict(_LABELS)
    keys = [key for key, _ in _LABELS if key in record] + sorted(set(record) - set(labels))
    width = max(len(labels.get(key, key)) for key in keys)
    lines = [f"export {export}"]
    for key in keys:
        lines.append(f"  {labels.get(key, key):<{width}}  {_plain(record[key])}")
    return "\n".join(lines)


def _plain(value: Any) -> str:
    """A field's value on one line: mappings as `key value, ...`, lists comma-separated."""
    if value is None:
        return "none"
    if isinstance(value, dict):
        return ", ".join(f"{key} {_plain(item)}" for key, item in value.items()) or "none"
    if isinstance(value, list):
        return ", ".join(_plain(item) for item in value) or "none"
    return str(value)


def _git(*arguments: str) -> Optional[str]:
    """The output of `git arguments...` in the package's directory; None where git or a
    checkout is missing."""
    try:
        run = subprocess.run(["git", "-C", os.fspath(_PACKAGE_DIR), *arguments],
                             capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    return run.stdout.strip() if run.returncode == 0 else None
