"""Prepare once: a parallel corpus, streamed, tokenized in parallel into sharded token storage.

Nothing holds the corpus: pairs are read, tokenized (SentencePiece's own threads, the ids
tf-text's in-graph tokenizer gives) and appended chunk by chunk. Each pair goes to a shard
drawn at random (seeded), so every shard is a uniform sample of the corpus and a batch plan
that shuffles within shards and shuffles the shards' order mixes the whole corpus.

    source = text_file_source("train.en.gz", "train.de.gz")
    tokenizer = SubwordTokenizer.train(sample_sentences(source, 2_000_000, seed=0),
                                       8000, "vocab")
    storage = prepare(source, "prepared", tokenizer)
"""
from __future__ import annotations

import itertools
import math
import os
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

import numpy as np
import sentencepiece

from keras_transformer.data.text_files import count_lines, iter_parallel
from keras_transformer.data.tfds_source import tfds_pairs
from keras_transformer.data.token_storage import (MANIFEST, MAX_SIDE, StorageWriter,
                                                  TokenStorage, vocabulary_sha256)
from keras_transformer.data.tokenizer import SubwordTokenizer

DEFAULT_SHARD_PAIRS = 1_000_000
MAX_SHARDS = 400  # two files each are open while preparing: within the usual limit of 1,024
CHUNK_PAIRS = 8192


@dataclass(frozen=True)
class ParallelSource:
    """Where training pairs come from. `description` identifies the data (paths, sizes and
    modification times, or a tensorflow-datasets split): prepared storage is reused only for
    the same one. `count()` is the number of pairs `pairs()` streams (empty ones included).
    `parts`: the corpora a `combined_source` streams one after the other (empty: one
    corpus)."""

    description: dict[str, Any]
    count: Callable[[], int]
    pairs: Callable[[], Iterator[tuple[str, str]]]
    parts: tuple["ParallelSource", ...] = ()


def combined_source(sources: list[ParallelSource]) -> ParallelSource:
    """Several corpora as one source (e.g. the original pairs and a teacher's translations of
    them): their pairs one corpus after the other; storage prepared from it counts each
    corpus in its manifest. One source is returned as it is."""
    if len(sources) == 1:
        return sources[0]
    return ParallelSource({"corpora": [source.description for source in sources]},
                          lambda: sum(source.count() for source in sources),
                          lambda: itertools.chain.from_iterable(
                              source.pairs() for source in sources),
                          tuple(sources))


def text_file_source(src_path: str | os.PathLike, tgt_path: str | os.PathLike) -> ParallelSource:
    """Two line-aligned files (plain or .gz); mismatched line counts are refused naming both
    (`iter_parallel`)."""
    paths = [os.path.abspath(os.fspath(path)) for path in (src_path, tgt_path)]
    for path in paths:
        if not os.path.isfile(path):
            raise FileNotFoundError(f"corpus file not found: {path!r}")
    files = [{"path": path, "bytes": os.stat(path).st_size,
              "modified_ns": os.stat(path).st_mtime_ns} for path in paths]
    return ParallelSource({"files": files}, lambda: count_lines(paths[0]),
                          lambda: iter_parallel(*paths))


def tfds_source(name: str, split: str, source_lang: str, target_lang: str,
                data_dir: Optional[str] = None) -> ParallelSource:
    """A tensorflow-datasets translation split (`tfds_pairs`), in the given direction."""
    def pairs() -> Iterator[tuple[str, str]]:
        return tfds_pairs(name, split, source_lang, target_lang, data_dir)[1]

    return ParallelSource({"tfds": name, "split": split, "source_lang": source_lang,
                           "target_lang": target_lang},
                          lambda: tfds_pairs(name, split, source_lang, target_lang, data_dir)[0],
                          pairs)


def sample_sentences(source: ParallelSource, sentences: int, seed: int) -> Iterator[str]:
    """The texts a shared vocabulary is learned from, streamed: a seeded uniform sample of
    `sentences // 2` of the source's pairs (their line numbers drawn first, then read in one
    pass), the chosen pairs' sources then their targets, pairs with an empty side left out. A
    corpus that small is taken whole, in order. Memory: the line numbers, not the texts (the
    targets wait in a temporary file while the sources are read)."""
    count, wanted = source.count(), max(1, sentences // 2)
    chosen = None if count <= wanted else iter(np.sort(
        np.random.default_rng(seed).choice(count, wanted, replace=False)).tolist())
    following = next(chosen) if chosen is not None else 0
    with tempfile.TemporaryFile() as targets:
        for index, (text, target) in enumerate(source.pairs()):
            if chosen is not None:
                if index != following:
                    continue
                following = next(chosen, -1)
            if text and target:
                encoded = target.encode("utf-8")
                targets.write(len(encoded).to_bytes(4, "little") + encoded)
                yield text
        targets.seek(0)
        while size := targets.read(4):
            yield targets.read(int.from_bytes(size, "little")).decode("utf-8")


def prepare(source: ParallelSource, directory: str | os.PathLike, tokenizer: SubwordTokenizer,
            shard_pairs: int = DEFAULT_SHARD_PAIRS, seed: int = 0, threads: Optional[int] = None,
            subword_dropout: float = 0.0, samples: int = 1) -> TokenStorage:
    """Tokenizes every pair of `source` into token storage in `directory`.

    Args:
        source: the pairs (`text_file_source`, `tfds_source`).
        directory: created if needed; an earlier storage there is replaced.
        tokenizer: the shared vocabulary (its `spm.model` is saved beside the shards).
        shard_pairs: pairs a shard holds on average (the shard count is the pairs to store
            over this, rounded up, at most `MAX_SHARDS`: shards grow beyond 400 million).
        seed: draws each pair's shard and the sampled segmentations.
        threads: SentencePiece threads for deterministic segmentation (default: every core).
        subword_dropout: 0 for the deterministic segmentation; p > 0 stores `samples`
            BPE-dropout segmentations of each pair (each merge skipped with probability p),
            sampled on one thread from seeds derived from `seed`, so the storage depends on
            the arguments alone.
        samples: segmentations stored per pair when `subword_dropout` > 0.

    Returns:
        The storage. Pairs with an empty side, and segmentations with a side over 65,535 ids,
        are dropped and counted in the manifest ("pairs"; for a `combined_source`, each
        corpus' counts too, under "corpora").
    """
    if shard_pairs < 1 or samples < 1:
        raise ValueError(f"shard_pairs and samples must be positive, got {shard_pairs} and "
                         f"{samples}")
    copies = samples if subword_dropout else 1
    shard_count = min(MAX_SHARDS, max(1, math.ceil(source.count() * copies / shard_pairs)))
    processor = sentencepiece.SentencePieceProcessor(model_proto=tokenizer.model_proto)
    threads = threads or os.cpu_count() or 1
    writer = StorageWriter(directory, tokenizer.model_proto, tokenizer.vocab_size, shard_count)
    generator = np.random.default_rng(seed)
    numbers = itertools.count()  # the chunks', across corpora
    counts = []
    try:
        for corpus in source.parts or (source,):
            read = empty = too_long = stored = 0
            pairs = corpus.pairs()
            while chunk := list(itertools.islice(pairs, CHUNK_PAIRS)):
                number = next(numbers)
                read += len(chunk)
                kept = [pair for pair in chunk if pair[0] and pair[1]]
                empty += len(chunk) - len(kept)
                for copy in range(copies):
                    sources, targets = (
                        _segmented(processor, [pair[side] for pair in kept], threads,
                                   subword_dropout, [seed, number, copy, side])
                        for side in (0, 1))
                    short = [i for i in range(len(kept))
                             if max(len(sources[i]), len(targets[i])) <= MAX_SIDE]
                    too_long += len(kept) - len(short)
                    stored += len(short)
                    writer.add(generator.integers(0, shard_count, len(short)),
                               [sources[i] for i in short], [targets[i] for i in short])
            counts.append({"read": read, "stored": stored,
                           "dropped": {"an empty side": empty,
                                       f"a side over {MAX_SIDE} ids": too_long}})
    except BaseException:
        writer.close()
        raise
    tokenizer.save(directory)
    manifest = {"source": source.description, "shard_seed": seed,
                "segmentation": _segmentation(subword_dropout, samples),
                "pairs": _total(counts)}
    if source.parts:
        manifest["corpora"] = [{"source": corpus.description, "pairs": corpus_counts}
                               for corpus, corpus_counts in zip(source.parts, counts)]
    return writer.finish(manifest)


def _total(counts: list[dict[str, Any]]) -> dict[str, Any]:
    """The sum of per-corpus pair counts."""
    return {"read": sum(count["read"] for count in counts),
            "stored": sum(count["stored"] for count in counts),
            "dropped": {reason: sum(count["dropped"][reason] for count in counts)
                        for reason in counts[0]["dropped"]}}


def _segmented(processor: sentencepiece.SentencePieceProcessor, texts: list[str], threads: int,
               subword_dropout: float, seeds: list[int]) -> list[list[int]]:
    """The ids of `texts`: deterministic, or BPE-dropout sampled from a seed drawn from
    `seeds` (SentencePiece's generator is reset to it; one thread keeps the draws in order)."""
    if not subword_dropout:
        return processor.encode(texts, num_threads=threads)
    sentencepiece.set_random_generator_seed(
        int(np.random.SeedSequence(seeds).generate_state(1)[0]))
    return processor.encode(texts, enable_sampling=True, alpha=subword_dropout, nbest_size=-1,
                            num_threads=1)


def _segmentation(subword_dropout: float, samples: int) -> dict[str, Any]:
    """The manifest's record of how pairs were segmented."""
    return ({"subword_dropout": subword_dropout, "samples": samples} if subword_dropout
            else {"subword_dropout": 0.0})


def prepared(source: ParallelSource, directory: str | os.PathLike,
             tokenizer: SubwordTokenizer, seed: int = 0, shard_pairs: int = DEFAULT_SHARD_PAIRS,
             subword_dropout: float = 0.0, samples: int = 1) -> tuple[TokenStorage, bool]:
    """The storage of `source` in `directory`: the one there if it was prepared from the same
    data with the same vocabulary, seed and segmentation, else prepared now (`prepare`, whose
    arguments these are). Returns it and whether it was reused."""
    if (Path(directory) / MANIFEST).is_file():
        try:
            storage = TokenStorage.open(directory)
        except ValueError:
            storage = None
        if (storage is not None and storage.manifest.get("source") == source.description
                and storage.manifest.get("shard_seed") == seed
                and storage.manifest.get("segmentation", _segmentation(0.0, 1))
                == _segmentation(subword_dropout, samples)
                and storage.vocabulary_sha256 == vocabulary_sha256(tokenizer.model_proto)):
            return storage, True
    return prepare(source, directory, tokenizer, shard_pairs, seed,
                   subword_dropout=subword_dropout, samples=samples), False


def check_segmentation(storage: TokenStorage, subword_dropout: float, samples: int) -> None:
    """Refuses (ValueError naming both) storage segmented otherwise than the recipe says."""
    found = storage.manifest.get("segmentation", _segmentation(0.0, 1))
    wanted = _segmentation(subword_dropout, samples)
    if found != wanted:
        raise ValueError(f"{storage.directory} was segmented with {found}, the recipe says "
                         f"{wanted}: prepare it with the recipe's subword_dropout and "
                         "subword_samples")
