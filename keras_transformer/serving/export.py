"""SavedModel export for TF Serving: `<base_dir>/<name>/<version>/`, versions never reused; the
signatures of `TranslationModule`, the tokenizer in the graph, loadable with `tensorflow` and
`tensorflow_text` alone. Its manual: docs/decoding-and-serving.md, "Export with kt-export" and
"Signatures".
"""
from __future__ import annotations

import os
import re
import shutil
import tempfile
from pathlib import Path
from typing import Any, Callable, Optional

import tensorflow as tf

from keras_transformer.data.atomic_files import sync_directory, sync_tree
from keras_transformer.data.languages import RunLanguages
from keras_transformer.data.sentencepiece_pair import tokenizer_files
from keras_transformer.data.tokenizer import SubwordTokenizer
from keras_transformer.decoding.shortlist import VocabularyShortlist
from keras_transformer.decoding.alignment import AlignmentHeads
from keras_transformer.decoding.translator import TranslationModule
from keras_transformer.model import Transformer
from keras_transformer.config import SearchSettings
from keras_transformer.precision import serving_copy
from keras_transformer.serving.loading import is_export
from keras_transformer.serving.provenance import export_record, shortlist_record, write_provenance
from keras_transformer.serving.warmup import (WARMUP_MAX_WIDTH, WARMUP_FILE, warmup_requests,
                                      warmup_widths, write_warmup_requests)

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")


def export_translator(model: Transformer, tokenizer: SubwordTokenizer, name: str,
                      base_dir: str | os.PathLike = "saved_models",
                      settings: Optional[SearchSettings] = None, dtype: str = "float32",
                      shortlist: Optional[VocabularyShortlist] = None,
                      jit_compile: bool = False, provenance: Optional[dict[str, Any]] = None,
                      warmup_max_width: int = WARMUP_MAX_WIDTH,
                      languages: Optional[RunLanguages] = None,
                      alignment: Optional[AlignmentHeads] = None) -> str:
    """Saves a `TranslationModule` as the next free version of `<base_dir>/<name>`; returns its
    path.

    `settings` (default: the paper's, `SearchSettings()`) are fixed in the exported graph;
    `dtype` (one of `precision.SERVING_DTYPES`) is what its weights are stored and computed in.
    `shortlist`: restricts each batch's search to the target ids it gives (None: none).
    `jit_compile`: the search is saved as one XLA-compiled function (`TranslationModule`).
    The export carries TF Serving warm-up requests (`keras_transformer.serving.warmup`; an XLA
    export's cover source widths up to `warmup_max_width` pieces) and a provenance record
    (`keras_transformer.serving.provenance`) holding `provenance`, the facts of the model's origin
    (`RunDir.provenance` or `provenance.file_provenance`; None: unknown).
    `languages`: the target languages of a model of several (`RunDir.languages`): every
    signature then takes `target_language` too (`TranslationModule`). `alignment`: the layer and
    heads `translate_with_alignment` reads (`decoding.alignment`; None: the default).
    """
    translator = TranslationModule(serving_copy(model, dtype), tokenizer, settings,
                            shortlist=shortlist, jit_compile=jit_compile, languages=languages,
                            alignment=alignment)

    def write(staging: str) -> str:
        vocabulary_dir = os.path.join(staging, "vocabulary")
        tokenizer.save(vocabulary_dir)
        translator.vocabulary = [tf.saved_model.Asset(path)
                                 for path in tokenizer_files(vocabulary_dir)]
        saved = os.path.join(staging, "model")
        signatures = {"serving_default": translator.translate,
                      "translate_ids": translator.translate_ids,
                      "translate_nbest": translator.translate_nbest,
                      "translate_with_prefix": translator.translate_with_prefix,
                      "translate_with_terms": translator.translate_with_terms,
                      "translate_with_scores": translator.translate_with_scores,
                      "translate_with_alignment": translator.translate_with_alignment}
        # An export only infers: without the gradients of the kernels' custom-gradient ops its
        # graph is smaller, it loads faster, and a process that loads it again and again keeps
        # nothing of the earlier loads (TensorFlow registers a loaded gradient for good).
        tf.saved_model.save(translator, saved, signatures=signatures,
                            options=tf.saved_model.SaveOptions(experimental_custom_gradients=False))
        widths = warmup_widths(model.config.max_length, jit_compile, warmup_max_width)
        requests = warmup_requests({name: function.input_signature
                                    for name, function in signatures.items()}, tokenizer, widths,
                                   languages)
        write_warmup_requests(saved, requests)
        write_provenance(saved, export_record(
            model.config, translator.settings, provenance, format="savedmodel", precision=dtype,
            xla=jit_compile, shortlist=shortlist and shortlist_record(shortlist),
            warmup={"file": WARMUP_FILE, "records": len(requests), "source_widths": widths},
            **({"languages": languages.to_dict()} if languages else {})))
        return saved

    return publish_version(write, name, base_dir)


def publish_version(write: Callable[[str], str], name: str,
                    base_dir: str | os.PathLike = "saved_models") -> str:
    """Runs `write(staging)`, which builds a model directory inside the empty directory
    `staging` and returns its path, then publishes it as the next free version of
    `<base_dir>/<name>`; returns that path. Staging sits in `<base_dir>/<name>/` under a
    non-integer name, which TF Serving skips, so a partial export is never served."""
    check_model_tree(base_dir, name)
    model_dir = os.path.join(os.fspath(base_dir), name)
    os.makedirs(model_dir, exist_ok=True)
    staging = tempfile.mkdtemp(prefix=".export-", dir=model_dir)
    try:
        return _publish(write(staging), model_dir)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def check_model_tree(base_dir: str | os.PathLike, name: str) -> None:
    """Refuses (ValueError naming them) a `name` that is no model name, and a `base_dir` that
    is no root of a model tree but an export or a model's directory holding export versions:
    `<base_dir>/<name>/<version>` would then put the export inside another one's."""
    if not _NAME.match(name):
        raise ValueError(f"name: {name!r} must be letters, digits, '_', '-' or '.', "
                         "not starting with a symbol")
    base = Path(base_dir)
    if is_export(base):
        raise ValueError(f"base_dir: {str(base)!r} is an export, not the root of a model tree "
                         f"(<base_dir>/<name>/<version>)")
    versions = sorted((entry for entry in base.glob("*")
                       if entry.name.isdigit() and is_export(entry)),
                      key=lambda entry: int(entry.name))
    if versions:
        raise ValueError(
            f"base_dir: {str(base)!r} is the directory of a model, holding its versions "
            f"{', '.join(entry.name for entry in versions)}: the export named {name!r} would "
            f"go inside it, to {str(base / name)!r}/<version>; give the root of the model "
            f"tree and the model's name instead (base_dir {str(base.parent)!r}, name "
            f"{base.name!r})")


def next_version(model_dir: str | os.PathLike) -> int:
    """1 + the largest integer version directory in `model_dir` (1 when there is none)."""
    if not os.path.isdir(model_dir):
        return 1
    versions = [int(entry) for entry in os.listdir(model_dir) if entry.isdigit()]
    return max(versions, default=0) + 1


def _publish(saved: str, model_dir: str) -> str:
    """Renames `saved` to the next free version; rename never replaces a non-empty directory,
    so a concurrent export that took the same number makes this one try the next. Every file
    is on disk first: a power loss never leaves a version a server would load half of."""
    sync_tree(saved)
    while True:
        target = os.path.join(model_dir, str(next_version(model_dir)))
        try:
            os.rename(saved, target)
            sync_directory(model_dir)
            return target
        except OSError:
            if not os.path.isdir(target):
                raise
