"""Prepared training data: a corpus's subword ids in shards on disk, read a shard at a time.

A storage directory holds `manifest.json` and, per shard, `shard-NNNNN.lengths` (uint16 pairs:
the source's and the target's id count of each pair, BOS/EOS not included) and
`shard-NNNNN.ids` (every pair's source ids then target ids, back to back, as uint16, or uint32
for vocabularies over 65,536 ids); storage prepared with word alignments also
`shard-NNNNN.link_counts` (uint32: each pair's piece links) and `shard-NNNNN.links` (uint16
(source piece, target piece) pairs, back to back: `word_links.piece_links`). The manifest
names the vocabulary (SHA-256 of `spm.model`) and holds each shard's pair and id counts and the
histogram of its pairs' longer side, from which a batch plan counts batches without reading a
shard. It is written last, atomically: a directory without one is an unfinished preparation,
never mistaken for a finished one.

Memory does not grow with the corpus: a reader holds one shard's lengths and maps its ids
file (pages are read as batches need them).
"""
from __future__ import annotations

import hashlib
import itertools
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO, Optional

import numpy as np

from keras_transformer.data.atomic_files import write_atomic

MANIFEST = "manifest.json"
FORMAT = "keras-transformer token storage"
VERSION = 1
MAX_SIDE = np.iinfo(np.uint16).max  # ids a side can have (its length is stored as uint16)


def vocabulary_sha256(model_proto: bytes) -> str:
    """The name a storage gives its vocabulary: the SHA-256 of the SentencePiece model."""
    return hashlib.sha256(model_proto).hexdigest()


def id_dtype(vocab_size: int) -> np.dtype:
    """The narrowest unsigned type that holds every id of the vocabulary."""
    return np.dtype(np.uint16 if vocab_size <= 1 << 16 else np.uint32)


@dataclass(frozen=True)
class ShardInfo:
    """A shard as the manifest describes it: its file stem, pairs, ids (both sides), how
    many pairs have each longer-side length (ids + the one BOS or EOS a side gets), and its
    piece links (None: prepared without word alignments)."""

    name: str
    pairs: int
    ids: int
    longest: dict[int, int]
    links: Optional[int] = None

    def to_dict(self) -> dict[str, Any]:
        """The manifest's entry."""
        return {"name": self.name, "pairs": self.pairs, "ids": self.ids,
                "longest": {str(length): count for length, count in sorted(self.longest.items())},
                **({} if self.links is None else {"links": self.links})}

    @classmethod
    def from_dict(cls, entry: dict[str, Any]) -> "ShardInfo":
        """The entry `to_dict` wrote."""
        return cls(entry["name"], int(entry["pairs"]), int(entry["ids"]),
                   {int(length): int(count) for length, count in entry["longest"].items()},
                   None if entry.get("links") is None else int(entry["links"]))

    def files(self, dtype: np.dtype) -> dict[str, int]:
        """Each file's suffix and its size in bytes (`dtype`: the ids')."""
        sizes = {".lengths": self.pairs * 4, ".ids": self.ids * dtype.itemsize}
        if self.links is not None:
            sizes.update({".link_counts": self.pairs * 4, ".links": self.links * 4})
        return sizes


class Shard:
    """One shard's pairs: `lengths[i]` = (source ids, target ids) of pair i; `pair(i)` reads
    both sides from the mapped ids file, `links(i)` its piece links."""

    def __init__(self, directory: Path, info: ShardInfo, dtype: np.dtype):
        for suffix, size in info.files(dtype).items():
            _check_size(directory / f"{info.name}{suffix}", size)
        lengths_path, ids_path = (directory / f"{info.name}{suffix}"
                                  for suffix in (".lengths", ".ids"))
        self.lengths = np.fromfile(lengths_path, dtype=np.uint16).reshape(-1, 2).astype(np.int64)
        if int(self.lengths.sum()) != info.ids:
            raise ValueError(f"{lengths_path}: its lengths add up to {int(self.lengths.sum())} "
                             f"ids, the manifest says {info.ids}: a damaged shard; prepare the "
                             "data again")
        self.starts = np.concatenate([[0], np.cumsum(self.lengths.sum(axis=1))[:-1]])
        self.ids = (np.memmap(ids_path, dtype=dtype, mode="r") if info.ids
                    else np.zeros([0], dtype))
        self.has_links = info.links is not None
        if self.has_links:
            counts = np.fromfile(directory / f"{info.name}.link_counts", dtype=np.uint32)
            self._link_starts = np.concatenate([[0], np.cumsum(counts, dtype=np.int64)])
            self._links = (np.memmap(directory / f"{info.name}.links", dtype=np.uint16,
                                     mode="r").reshape(-1, 2) if info.links
                           else np.zeros([0, 2], np.uint16))

    def pair(self, index: int) -> tuple[np.ndarray, np.ndarray]:
        """The source ids and the target ids of pair `index`."""
        start = self.starts[index]
        source_length, target_length = self.lengths[index]
        middle = start + source_length
        return self.ids[start:middle], self.ids[middle:middle + target_length]

    def links(self, index: int) -> np.ndarray:
        """Pair `index`'s piece links, `[k, 2]` (source piece, target piece)."""
        return self._links[self._link_starts[index]:self._link_starts[index + 1]]


class TokenStorage:
    """A finished storage directory (`open`), its vocabulary and shards."""

    def __init__(self, directory: Path, manifest: dict[str, Any]):
        self.directory = directory
        self.manifest = manifest
        self.vocabulary_sha256: str = manifest["vocabulary"]["sha256"]
        self.vocab_size: int = int(manifest["vocabulary"]["size"])
        self.shards = [ShardInfo.from_dict(entry) for entry in manifest["shards"]]
        self._dtype = np.dtype(manifest["id_dtype"])

    @classmethod
    def open(cls, directory: str | os.PathLike) -> "TokenStorage":
        """The storage in `directory`; a ValueError naming the file when the manifest is
        missing (an unfinished preparation), unreadable, or of another format."""
        directory = Path(directory)
        path = directory / MANIFEST
        if not path.is_file():
            raise ValueError(f"{directory}: no {MANIFEST}: not prepared data, or a preparation "
                             "that did not finish; prepare it again")
        try:
            manifest = json.loads(path.read_text(encoding="utf-8"))
            if manifest.get("format") != FORMAT or manifest.get("version") != VERSION:
                raise ValueError(f"format {manifest.get('format')!r} version "
                                 f"{manifest.get('version')!r}, expected {FORMAT!r} {VERSION}")
            storage = cls(directory, manifest)
        except (ValueError, KeyError, TypeError, AttributeError) as error:
            raise ValueError(f"{path}: not a readable manifest ({error}); prepare the data "
                             "again") from None
        for info in storage.shards:
            for suffix, size in info.files(storage._dtype).items():
                _check_size(directory / f"{info.name}{suffix}", size)
        return storage

    @property
    def pairs(self) -> int:
        """Pairs stored, over all shards."""
        return sum(info.pairs for info in self.shards)

    @property
    def has_links(self) -> bool:
        """Whether the pairs were prepared with word alignments (their piece links)."""
        return bool(self.shards) and self.shards[0].links is not None

    @property
    def identity(self) -> dict[str, Any]:
        """What fixes the data stream a batch plan draws from this storage: the source, the
        shard seed, the shard and pair counts, and the manifest's SHA-256 (which covers the
        rest: each shard's counts, the vocabulary, the segmentation)."""
        canonical = json.dumps(self.manifest, sort_keys=True).encode("utf-8")
        return {"source": self.manifest.get("source"),
                "shard_seed": self.manifest.get("shard_seed"), "shards": len(self.shards),
                "pairs": self.pairs, "manifest_sha256": hashlib.sha256(canonical).hexdigest()}

    def check_vocabulary(self, model_proto: bytes, name: str) -> None:
        """Refuses (ValueError naming both) a tokenizer other than the one the ids are of;
        `name` says where the tokenizer comes from."""
        found = vocabulary_sha256(model_proto)
        if found != self.vocabulary_sha256:
            raise ValueError(
                f"{self.directory} holds ids of vocabulary {self.vocabulary_sha256[:16]} "
                f"(its spm.model), but {name} is vocabulary {found[:16]}: prepare the data with "
                f"that vocabulary, or train with the storage's")

    def load_shard(self, index: int) -> Shard:
        """Shard `index` (its lengths in memory, its ids mapped)."""
        return Shard(self.directory, self.shards[index], self._dtype)


class StorageWriter:
    """Writes a storage: `add` pairs to shards, then `finish` writes the manifest. Until then
    the directory has no manifest, so an interrupted or failed write (a full disk) is never
    taken for prepared data. `links`: the pairs come with piece links."""

    def __init__(self, directory: str | os.PathLike, model_proto: bytes, vocab_size: int,
                 shard_count: int, links: bool = False):
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        (self.directory / MANIFEST).unlink(missing_ok=True)
        for earlier in self.directory.glob("shard-*"):
            earlier.unlink()
        self._dtype = id_dtype(vocab_size)
        self._vocabulary = {"sha256": vocabulary_sha256(model_proto), "size": vocab_size}
        self._names = [f"shard-{index:05d}" for index in range(shard_count)]
        suffixes = (".lengths", ".ids") + ((".link_counts", ".links") if links else ())
        self._files: list[tuple[BinaryIO, ...]] = [
            tuple(open(self.directory / f"{name}{suffix}", "wb") for suffix in suffixes)
            for name in self._names]
        self._links: Optional[list[int]] = [0] * shard_count if links else None
        self._pairs = [0] * shard_count
        self._ids = [0] * shard_count
        self._longest: list[dict[int, int]] = [{} for _ in range(shard_count)]

    def add(self, shards: np.ndarray, sources: list[list[int]], targets: list[list[int]],
            links: Optional[list[np.ndarray]] = None) -> None:
        """Appends pair i (`sources[i]`, `targets[i]`: ids, each side at most `MAX_SIDE`;
        `links[i]`, `[k, 2]` piece links, for a writer of links) to shard `shards[i]`."""
        if (links is None) != (self._links is None):
            raise ValueError("piece links: give them for each pair of a storage of links, "
                             "and only then")
        lengths = np.array([[len(source), len(target)]
                            for source, target in zip(sources, targets)], np.int64)
        for shard in np.unique(shards).tolist():
            mine = np.flatnonzero(shards == shard)
            lengths_file, ids_file, *link_files = self._files[shard]
            lengths_file.write(lengths[mine].astype(np.uint16).tobytes())
            ids = itertools.chain.from_iterable(
                itertools.chain(sources[i], targets[i]) for i in mine.tolist())
            ids_file.write(np.fromiter(ids, self._dtype).tobytes())
            if link_files:
                counts_file, links_file = link_files
                counts = [len(links[i]) for i in mine.tolist()]
                counts_file.write(np.array(counts, np.uint32).tobytes())
                links_file.write(np.concatenate(
                    [np.zeros([0, 2], np.uint16)] + [links[i].astype(np.uint16)
                                                     for i in mine.tolist()]).tobytes())
                self._links[shard] += sum(counts)
            self._pairs[shard] += len(mine)
            self._ids[shard] += int(lengths[mine].sum())
            longest, counts = np.unique(lengths[mine].max(axis=1) + 1, return_counts=True)
            histogram = self._longest[shard]
            for length, count in zip(longest.tolist(), counts.tolist()):
                histogram[length] = histogram.get(length, 0) + count

    def finish(self, details: dict[str, Any]) -> TokenStorage:
        """Flushes the shards to disk and closes them, then writes the manifest (with
        `details`: where the pairs came from, how many were dropped and why): after a power
        loss a manifest never describes shards that did not reach the disk. Returns the
        storage."""
        for files in self._files:
            for handle in files:
                handle.flush()
                os.fsync(handle.fileno())
        self.close()
        links = self._links if self._links is not None else [None] * len(self._names)
        shards = [ShardInfo(*info).to_dict() for info in zip(
            self._names, self._pairs, self._ids, self._longest, links)]
        manifest = {"format": FORMAT, "version": VERSION, "vocabulary": self._vocabulary,
                    "id_dtype": self._dtype.name, "shards": shards, **details}
        write_atomic(self.directory / MANIFEST, json.dumps(manifest, indent=1))
        return TokenStorage.open(self.directory)

    def close(self) -> None:
        """Closes every shard file (also on failure; the manifest is not written)."""
        for files in self._files:
            for handle in files:
                handle.close()


def _check_size(path: Path, expected: int) -> None:
    if not path.is_file():
        raise ValueError(f"{path}: missing; prepare the data again")
    size = path.stat().st_size
    if size != expected:
        raise ValueError(f"{path}: {size} bytes, the manifest says {expected}: a torn or "
                         "damaged shard; prepare the data again")
