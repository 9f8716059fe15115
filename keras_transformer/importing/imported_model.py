"""What every reader of a foreign format gives: our architecture, our weights by variable path,
the tokenizer's pieces and SentencePiece models, the languages, and the files read; and the
error naming what a folder holds that we cannot import."""
from __future__ import annotations

from collections.abc import Callable, Mapping
import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterator, Optional

import numpy as np

from keras_transformer.config import TransformerConfig

if TYPE_CHECKING:
    from keras_transformer.data.languages import RunLanguages

NEVER_EMITTED_BIAS = -100.0
"""The output bias of the ids an imported model never emits (padding and the start token,
which Marian's vocabulary does not have, and which NLLB's and M2M-100's decoders are never
trained to predict): their probability is below 1e-40 of the likeliest token's for any logit
in such models' range, and finite, so that label smoothing's mean over the logits stays finite
when fine-tuning."""


class ReadOnAccess(Mapping):
    """Arrays by name (or `RowBlocks`), each computed (read from its file) when it is asked
    for and not kept: an import holds one tensor of a large model at a time beside the
    model's variables."""

    def __init__(self, readers: dict[str, Callable[[], np.ndarray]]):
        self._readers = readers

    def __getitem__(self, name: str) -> np.ndarray:
        return self._readers[name]()

    def __iter__(self) -> Iterator[str]:
        return iter(self._readers)

    def __len__(self) -> int:
        return len(self._readers)


class RowBlocks:
    """A large matrix of a foreign checkpoint, read a block of rows at a time and never whole
    (`rows(start, stop)`): what an import assigns to a large variable (NLLB-200's 1 GB
    embedding), so that the import holds one block beside the model's variables."""

    def __init__(self, shape: tuple[int, ...], rows: Callable[[int, int], np.ndarray]):
        self.shape = tuple(shape)
        self.rows = rows

    def __array__(self, dtype=None, copy=None) -> np.ndarray:
        """The whole matrix (read at once: for tests and small models)."""
        return np.asarray(self.rows(0, self.shape[0]), dtype)


class ImportFormatError(ValueError):
    """A foreign model that cannot be imported, naming the file and the option or weight."""


@dataclass(frozen=True)
class ImportedModel:
    """A model read from a foreign folder: our architecture, our weights by variable path
    (`run_directory.imported_transformer` assigns them), the tokenizer's pieces in our id
    order per side, the SentencePiece models, the release's beam size, the files read, the
    model's own options (recorded in `import.json`), its languages when it translates between
    several (None: `run_directory.imported_languages` reads `>>xx<<` pieces), and the target
    pieces that are not text (`SentencePiecePair`'s `control_pieces`: NLLB's language codes,
    which its tokenizer's decoding leaves out)."""

    config: TransformerConfig
    arrays: Mapping[str, np.ndarray]
    source_pieces: list[str]
    target_pieces: list[str]
    source_spm: bytes
    target_spm: bytes
    beam_size: int
    files: list[Path]
    options: dict[str, Any]
    languages: Optional["RunLanguages"] = None
    licence: Optional[str] = None
    control_pieces: tuple[str, ...] = ()


def read_json(path: Path) -> Any:
    """The JSON value of the file `path` (ImportFormatError naming it when it is missing or
    not JSON)."""
    if not path.is_file():
        raise ImportFormatError(f"{path}: no such file")
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise ImportFormatError(f"{path}: not valid JSON ({error})") from None


GENERATION_CONFIG = "generation_config.json"


def release_beam_size(folder: Path, config: dict[str, Any]) -> tuple[int, list[Path]]:
    """The beam size a Hugging Face folder's model searches with, and the files it was read
    from: `num_beams` of `generation_config.json` (where transformers 5 keeps it, and what
    transformers reads before config.json), else of `config.json`, else 4."""
    path = folder / GENERATION_CONFIG
    generation = read_json(path) if path.is_file() else {}
    if not isinstance(generation, dict):
        raise ImportFormatError(f"{path}: not a JSON object")
    beams = generation.get("num_beams") or config.get("num_beams") or 4
    if not isinstance(beams, int) or isinstance(beams, bool) or beams < 1:
        raise ImportFormatError(f"{path if 'num_beams' in generation else folder / 'config.json'}"
                                f": num_beams {beams!r} (a number of at least 1)")
    return beams, [path] if path.is_file() else []


def safetensors_path(folder: Path, hint: str = "") -> Path:
    """`folder`'s `model.safetensors`; ImportFormatError naming it when it is missing, with
    what the folder holds instead (a PyTorch `.bin` needs torch to read) and `hint`."""
    path = folder / "model.safetensors"
    if not path.is_file():
        others = [name for name in ("pytorch_model.bin", "tf_model.h5")
                  if (folder / name).is_file()]
        raise ImportFormatError(
            f"{folder}: no model.safetensors" + (
                f" (found {', '.join(others)}: a PyTorch .bin needs torch to read; convert it "
                f"with transformers' `save_pretrained(..., safe_serialization=True)`{hint})"
                if others else ""))
    return path
