"""An imported model written as a run directory, whole or not at all: `config.json` (the
recipe), `model.weights.h5`, `vocab/` (the tokenizer's files), `import.json` (where the model
came from: its format, origin, the files read with their SHA-256 digests, its licence and README
text) and, of a multi-target model, `languages.json` (its `>>xx<<` tokens, `imported_languages`).
Every command takes it like a run kt-train wrote."""
from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any, Optional

import numpy as np
import tensorflow as tf

from keras_transformer.config import ROW_BLOCK_BYTES, Recipe, SearchSettings, TrainingSettings
from keras_transformer.data.languages import RunLanguages
from keras_transformer.data.sentencepiece_pair import SentencePiecePair
from keras_transformer.importing.imported_model import ImportedModel, RowBlocks
from keras_transformer.importing.marian import LANGUAGE_TOKEN
from keras_transformer.model import Transformer
from keras_transformer.training.backup import file_sha256
from keras_transformer.training.run_dir import CONFIG_FILE, IMPORT_FILE, LANGUAGES_FILE, RunDir

_NOTICE_NAMES = ("README", "LICENSE", "LICENCE")  # text files of the origin kept in import.json
_NOTICE_BYTES = 20_000


def imported_transformer(imported: ImportedModel, rows_bytes: int = ROW_BLOCK_BYTES
                         ) -> Transformer:
    """Our `Transformer` with the weights of `imported`, a large variable assigned `rows_bytes`
    of rows at a time (`assign_in_rows`). A ValueError when the imported weights and the model's
    variables differ in names or shapes (a bug of the importer, never silently half-loaded)."""
    model = Transformer(imported.config)
    variables = {variable.path.split("/", 1)[1]: variable for variable in model.weights}
    if set(variables) != set(imported.arrays):
        raise ValueError(f"import: weights without a variable "
                         f"{sorted(set(imported.arrays) - set(variables))}, variables without a "
                         f"weight {sorted(set(variables) - set(imported.arrays))}")
    for name, variable in variables.items():
        value = imported.arrays[name]
        if not isinstance(value, RowBlocks):
            value = np.asarray(value, np.float32).reshape(variable.shape)
        assign_in_rows(variable, value, rows_bytes)
    return model


def assign_in_rows(variable, value: np.ndarray | RowBlocks, rows_bytes: int = ROW_BLOCK_BYTES
                   ) -> None:
    """`variable.assign(value)`, a block of rows of about `rows_bytes` at a time: the tensor
    made of each block is that size, not the whole matrix's (an import's peak memory: NLLB's
    embedding is 1 GB), and `RowBlocks` are read a block at a time."""
    shape = tuple(variable.shape)
    if tuple(value.shape) != shape:
        raise ValueError(f"import: {variable.path} has shape {shape}, its weight {value.shape}")
    rows = value.rows if isinstance(value, RowBlocks) else lambda start, stop: value[start:stop]
    row_bytes = 4 * int(np.prod(shape[1:]))
    if not shape or row_bytes * shape[0] <= rows_bytes:
        variable.assign(rows(0, shape[0]) if shape else value)
        return
    step = max(1, rows_bytes // row_bytes)
    for start in range(0, shape[0], step):
        block = rows(start, start + step)
        # a scatter of the rows: a slice's assign would read the whole variable first (a copy
        # of it, once TensorFlow reads the variable in copy-on-read mode)
        variable.value.scatter_update(tf.IndexedSlices(
            tf.constant(block, tf.float32), tf.range(start, start + len(block))))


def write_imported_run(imported: ImportedModel, output_dir: str | os.PathLike, origin: str,
                       source_format: str) -> RunDir:
    """Writes `imported`, the model read from its folder, as the run directory `output_dir`, which
    must not exist yet, and returns the new `RunDir`; `origin`, where the model came from (the
    folder, or a name), is recorded in `import.json`; `source_format` is the format read (e.g.
    "marian").

    Everything is written into a temporary folder beside it and renamed into place last, so an
    interrupted import leaves no directory that looks like a run.
    """
    output_dir = Path(output_dir)
    if output_dir.exists():
        raise ValueError(f"--output-dir: {str(output_dir)!r} exists; an import writes a new "
                         "run directory")
    output_dir.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(dir=output_dir.parent, prefix=f".{output_dir.name}.import-"))
    try:
        run = RunDir(staging)
        recipe = Recipe(architecture=imported.config, training=TrainingSettings(),
                        search=SearchSettings(beam_size=imported.beam_size))
        run.write_json(CONFIG_FILE, recipe.to_dict())
        SentencePiecePair(imported.source_spm, imported.target_spm, imported.source_pieces,
                          imported.target_pieces, imported.control_pieces).save(run.vocab)
        imported_transformer(imported).save_weights(run.final_weights)
        run.write_json(IMPORT_FILE, import_record(imported, origin, source_format))
        languages = imported_languages(imported)
        if languages is not None:
            run.write_json(LANGUAGES_FILE, languages.to_dict())
        os.replace(staging, output_dir)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return RunDir(output_dir)


def imported_languages(imported: ImportedModel) -> Optional[RunLanguages]:
    """The languages of a model of several, as a run of several records them: those its reader
    gave (`ImportedModel.languages`), else, of a multi-target Marian model, each
    `>>xx<<` piece of its source vocabulary (`marian.LANGUAGE_TOKEN`) asks for `xx` (e.g. fra)
    first in the source, and the language is optional (a text may start with its own token);
    None for a model of one target language."""
    if imported.languages is not None:
        return imported.languages
    pieces = {piece[2:-2]: piece for piece in imported.source_pieces
              if LANGUAGE_TOKEN.fullmatch(piece)}
    if not pieces:
        return None
    ids = {piece: index for index, piece in enumerate(imported.source_pieces)}
    return RunLanguages("source", {code: ids[piece] for code, piece in pieces.items()}, pieces,
                        optional=True)


def import_record(imported: ImportedModel, origin: str, source_format: str) -> dict[str, Any]:
    """What `import.json` holds: the format, the origin, each file read with its SHA-256, the
    model's own options, its licence where the folder states it (None: see the notices), and
    the text of the origin folder's README and licence files."""
    folder = imported.files[0].parent
    notices = {path.name: path.read_bytes()[:_NOTICE_BYTES].decode("utf-8", "replace")
               for path in sorted(folder.iterdir())
               if path.is_file() and path.name.upper().startswith(_NOTICE_NAMES)}
    return {"format": source_format, "origin": origin,
            "files": {str(path.relative_to(folder)): file_sha256(path) for path in imported.files},
            "options": json.loads(json.dumps(imported.options, default=str)),
            "licence": imported.licence, "notices": notices}
