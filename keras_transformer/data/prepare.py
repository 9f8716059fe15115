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
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

import numpy as np
import sentencepiece

from keras_transformer.config import DEFAULT_SHARD_PAIRS
from keras_transformer.data.text_files import (FIRST_LINES, count_lines, iter_parallel,
                                               line_list, require_files)
from keras_transformer.data.tfds_source import tfds_pairs
from keras_transformer.data.token_storage import (MANIFEST, MAX_SIDE, StorageWriter,
                                                  TokenStorage, vocabulary_sha256)
from keras_transformer.data.sentencepiece_pair import Tokenizer, vocabulary_pieces
from keras_transformer.data.word_links import Links, pharaoh_lines, piece_kinds, piece_links

MAX_SHARDS = 400  # two files each are open while preparing: within the usual limit of 1,024
CHUNK_PAIRS = 8192
EMPTY_SIDE = "an empty side"  # why prepare drops a pair
OVER_MAX_SIDE = f"a side over {MAX_SIDE} ids"


@dataclass(frozen=True)
class ParallelSource:
    """Where training pairs come from. `description` identifies the data (paths, sizes and
    modification times, or a tensorflow-datasets split): prepared storage is reused only for
    the same one. `count()` is the number of pairs `pairs()` streams (empty ones included).
    `parts`: the corpora a `combined_source` streams one after the other (empty: one
    corpus). `alignments`: the pairs' word links, a pair a line (`word_links.pharaoh_lines`),
    for guided alignment training (None: none)."""

    description: dict[str, Any]
    count: Callable[[], int]
    pairs: Callable[[], Iterator[tuple[str, str]]]
    parts: tuple["ParallelSource", ...] = ()
    alignments: Optional[Callable[[], Iterator[Links]]] = None


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


def text_file_source(src_path: str | os.PathLike, tgt_path: str | os.PathLike,
                     alignments: Optional[str | os.PathLike] = None) -> ParallelSource:
    """Two line-aligned files (plain or .gz); mismatched line counts are refused naming both
    (`iter_parallel`). `alignments`: a file of their word links, a pair a line (Pharaoh's
    `i-j`)."""
    paths = [os.path.abspath(os.fspath(path)) for path in (src_path, tgt_path)]
    extra = [] if alignments is None else [os.path.abspath(os.fspath(alignments))]
    require_files(*paths, *extra)
    files = [{"path": path, "bytes": os.stat(path).st_size,
              "modified_ns": os.stat(path).st_mtime_ns} for path in paths + extra]
    description = {"files": files[:2], **({"alignments": files[2]} if extra else {})}
    return ParallelSource(description, lambda: count_lines(paths[0]),
                          lambda: iter_parallel(*paths),
                          alignments=(lambda: pharaoh_lines(extra[0])) if extra else None)


def check_alignments(source: ParallelSource) -> None:
    """Refuses (ValueError naming the files) word alignments of another line count than their
    corpus's, before anything is prepared."""
    for corpus in source.parts or (source,):
        if corpus.alignments is not None:
            lines, pairs = count_lines(corpus.description["alignments"]["path"]), corpus.count()
            if lines != pairs:
                raise ValueError(f"{corpus.description['alignments']['path']}: {lines:,} "
                                 f"line{'' if lines == 1 else 's'} of word alignments for the "
                                 f"{pairs:,} pairs of "
                                 f"{source_name(corpus.description)}: one line a pair")


def tfds_source(name: str, split: str, source_lang: str, target_lang: str,
                data_dir: Optional[str] = None) -> ParallelSource:
    """A tensorflow-datasets translation split (`tfds_pairs`), in the given direction."""
    def pairs() -> Iterator[tuple[str, str]]:
        return tfds_pairs(name, split, source_lang, target_lang, data_dir=data_dir)[1]

    return ParallelSource({"tfds": name, "split": split, "source_lang": source_lang,
                           "target_lang": target_lang},
                          lambda: tfds_pairs(name, split, source_lang, target_lang,
                                             data_dir=data_dir)[0],
                          pairs)


def sample_sentences(source: ParallelSource, sentences: int, seed: int) -> Iterator[str]:
    """The texts a shared vocabulary is learned from, streamed: a seeded uniform sample of
    `sentences // 2` of the source's pairs (their line numbers drawn first, then read in one
    pass), the chosen pairs' sources then their targets, pairs with an empty side left out. A
    corpus that small is taken whole, in order. Memory: the line numbers, not the texts (the
    targets wait in a temporary file while the sources are read)."""
    with tempfile.TemporaryFile() as targets:
        for text, target in drawn(source.pairs(), source.count(), max(1, sentences // 2),
                                  seed):
            if text and target:
                encoded = target.encode("utf-8")
                targets.write(len(encoded).to_bytes(4, "little") + encoded)
                yield text
        targets.seek(0)
        while size := targets.read(4):
            yield targets.read(int.from_bytes(size, "little")).decode("utf-8")


def drawn(items: Iterable[Any], count: int, wanted: int,
          seed: int | Sequence[int]) -> Iterator[Any]:
    """A seeded uniform sample of `wanted` of the `count` `items`, in their order, read in one
    pass to their end (their indices drawn first, so memory holds those alone; a file's error
    after the last chosen line is still raised); all of them when there are no more than
    `wanted`."""
    if count <= wanted:
        yield from items
        return
    chosen = iter(np.sort(np.random.default_rng(seed).choice(count, wanted,
                                                             replace=False)).tolist())
    following = next(chosen)
    for index, item in enumerate(items):
        if index == following:
            yield item
            following = next(chosen, -1)


def prepare(source: ParallelSource, directory: str | os.PathLike, tokenizer: Tokenizer,
            shard_pairs: int = DEFAULT_SHARD_PAIRS, seed: int = 0, threads: Optional[int] = None,
            subword_dropout: float = 0.0, samples: int = 1,
            max_length: Optional[int] = None,
            prefixes: tuple[Sequence[int], Sequence[int]] = ((), ())) -> TokenStorage:
    """Tokenizes every pair of `source` (`text_file_source`, `tfds_source`) with `tokenizer`, the
    run's (its files are saved beside the shards), into token storage in `directory` (created if
    needed; an earlier storage there is replaced), and returns the storage.

    A shard holds `shard_pairs` pairs on average (the shard count is the pairs to store over this,
    rounded up, at most `MAX_SHARDS`: shards grow beyond 400 million). `seed` draws each pair's
    shard and the sampled segmentations. `threads` are the SentencePiece threads of the
    deterministic segmentation (default: every core).

    `subword_dropout` 0 gives the deterministic segmentation; p > 0 stores `samples` BPE-dropout
    segmentations of each pair (each merge skipped with probability p), sampled on one thread from
    seeds derived from `seed`, so the storage depends on the arguments alone (`samples` counts only
    when `subword_dropout` > 0).

    `max_length`, a model's (optional): the stored segmentations with a side longer than it, EOS
    included, which such a model does not train on (`BatchPlan`), are counted too
    ("longer_than_max_length"). `prefixes` are ids put before every pair's source ids and before its
    target ids (e.g. a target-language token, `languages`), counted in its lengths; recorded in the
    manifest ("prefixes") when there are any.

    Pairs with an empty side, and segmentations with a side over 65,535 ids, are dropped and counted
    in the manifest ("pairs"; for a `combined_source`, each corpus' counts too, under "corpora"),
    with the first line numbers of each kind (`FIRST_LINES` at most, 1-based in their corpus:
    "first_lines"); see `left_out`.
    """
    if shard_pairs < 1 or samples < 1:
        raise ValueError(f"shard_pairs and samples must be positive, got {shard_pairs} and "
                         f"{samples}")
    copies = samples if subword_dropout else 1
    shard_count = min(MAX_SHARDS, max(1, math.ceil(source.count() * copies / shard_pairs)))
    threads = threads or os.cpu_count() or 1
    corpora = source.parts or (source,)
    kinds = (tuple(map(piece_kinds, vocabulary_pieces(tokenizer)))
             if any(corpus.alignments for corpus in corpora) else None)
    writer = StorageWriter(directory, tokenizer.serialized, tokenizer.vocab_size, shard_count,
                           links=kinds is not None)
    generator = np.random.default_rng(seed)
    numbers = itertools.count()  # the chunks', across corpora
    counts = []
    try:
        for corpus in corpora:
            read = stored = 0
            found = {reason: _Lines() for reason in (EMPTY_SIDE, OVER_MAX_SIDE)}
            longer, unlinked = _Lines(), _Lines()
            for chunk, chunk_links in _chunks(corpus):
                number = next(numbers)
                kept = [i for i, pair in enumerate(chunk) if pair[0] and pair[1]]
                found[EMPTY_SIDE].add([read + i + 1 for i, pair in enumerate(chunk)
                                       if not (pair[0] and pair[1])])
                for copy in range(copies):
                    sources, targets = (
                        _prefixed(prefixes[side], _segmented(
                            tokenizer, [chunk[i][side] for i in kept], side, threads,
                            subword_dropout, [seed, number, copy, side]))
                        for side in (0, 1))
                    longest = [max(len(ids), len(other)) for ids, other in zip(sources, targets)]
                    short = [i for i, length in enumerate(longest) if length <= MAX_SIDE]
                    found[OVER_MAX_SIDE].add([read + kept[i] + 1 for i, length
                                              in enumerate(longest) if length > MAX_SIDE])
                    if max_length is not None:  # as BatchPlan counts: a side and its EOS
                        longer.add([read + kept[i] + 1 for i in short
                                    if longest[i] + 1 > max_length])
                    stored += len(short)
                    links = None
                    if kinds is not None:
                        links = [_pair_links(corpus, chunk[kept[i]], chunk_links, kept[i],
                                             (sources[i], targets[i]), kinds, read)
                                 for i in short]
                        unlinked.add([read + kept[i] + 1 for i, pair_links
                                      in zip(short, links) if pair_links is None])
                        links = [np.zeros([0, 2], np.int64) if pair_links is None
                                 else pair_links for pair_links in links]
                    writer.add(generator.integers(0, shard_count, len(short)),
                               [sources[i] for i in short], [targets[i] for i in short],
                               links)
                read += len(chunk)
            counts.append({"read": read, "stored": stored,
                           "dropped": {reason: lines.count for reason, lines in found.items()},
                           "first_lines": {reason: lines.first
                                           for reason, lines in found.items()}})
            if kinds is not None:  # pairs trained without supervised alignment
                counts[-1]["without_links"] = {"pairs": unlinked.count,
                                               "first_lines": unlinked.first}
            if max_length is not None:
                counts[-1]["longer_than_max_length"] = {
                    "max_length": max_length, "pairs": longer.count, "first_lines": longer.first}
    except BaseException:
        writer.close()
        raise
    tokenizer.save(directory)
    manifest = {"source": source.description, "shard_seed": seed,
                "segmentation": _segmentation(subword_dropout, samples),
                "pairs": _total(counts), **_prefix_record(prefixes)}
    if source.parts:
        manifest["corpora"] = [{"source": corpus.description, "pairs": corpus_counts}
                               for corpus, corpus_counts in zip(source.parts, counts)]
    return writer.finish(manifest)


def _chunks(corpus: ParallelSource) -> Iterator[tuple[list[tuple[str, str]],
                                                      Optional[list[Links]]]]:
    """`corpus`'s pairs, `CHUNK_PAIRS` at a time, each chunk with its pairs' word links (None
    for a corpus without alignments); a ValueError names an alignments file that ends before
    the pairs or after them."""
    pairs = corpus.pairs()
    alignments = corpus.alignments() if corpus.alignments else None
    read = 0
    while chunk := list(itertools.islice(pairs, CHUNK_PAIRS)):
        links = None
        if alignments is not None:
            links = list(itertools.islice(alignments, len(chunk)))
            if len(links) < len(chunk):
                raise ValueError(f"{corpus.description['alignments']['path']}: ends at line "
                                 f"{read + len(links):,}, before the pairs of "
                                 f"{source_name(corpus.description)}: one line a pair")
        read += len(chunk)
        yield chunk, links
    if alignments is not None and next(alignments, None) is not None:
        raise ValueError(f"{corpus.description['alignments']['path']}: more lines than the "
                         f"{read:,} pairs of {source_name(corpus.description)}: one line a pair")


def _pair_links(corpus: ParallelSource, pair: tuple[str, str], links: list[Links],
                index: int, ids: tuple[list[int], list[int]],
                kinds: tuple[np.ndarray, np.ndarray], read: int) -> Optional[np.ndarray]:
    """`word_links.piece_links` of the `index`th pair of a chunk, `pair` (its texts), whose
    word links are `links[index]` (a corpus without alignments: none) and whose ids are
    `ids`; `read`: the corpus's pairs before the chunk."""
    if links is None:
        return None
    where = f"{corpus.description['alignments']['path']}:{read + index + 1}"
    return piece_links(links[index], (len(pair[0].split()), len(pair[1].split())), ids, kinds,
                       where)


def _total(counts: list[dict[str, Any]]) -> dict[str, Any]:
    """The sum of per-corpus pair counts (one corpus': its counts, with its line numbers)."""
    if len(counts) == 1:
        return counts[0]
    total = {"read": sum(count["read"] for count in counts),
             "stored": sum(count["stored"] for count in counts),
             "dropped": {reason: sum(count["dropped"][reason] for count in counts)
                         for reason in counts[0]["dropped"]}}
    if "longer_than_max_length" in counts[0]:
        total["longer_than_max_length"] = {
            "max_length": counts[0]["longer_than_max_length"]["max_length"],
            "pairs": sum(count["longer_than_max_length"]["pairs"] for count in counts)}
    if "without_links" in counts[0]:
        total["without_links"] = {"pairs": sum(count["without_links"]["pairs"]
                                               for count in counts)}
    return total


class _Lines:
    """A count of lines found for some reason, and the first `FIRST_LINES` of their numbers
    (a line found again, in another segmentation of its pair, counted again)."""

    def __init__(self):
        self.count, self.first = 0, []

    def add(self, numbers: list[int]) -> None:
        self.count += len(numbers)
        self.first = sorted(set(self.first) | set(numbers[:FIRST_LINES]))[:FIRST_LINES]


def source_name(description: dict[str, Any]) -> str:
    """A corpus as its `ParallelSource.description` names it: its two files, or its
    tensorflow-datasets split, or its corpora one after the other."""
    if "files" in description:
        return " and ".join(entry["path"] for entry in description["files"])
    if "tfds" in description:
        return f"{description['tfds']} split {description['split']}"
    return "; ".join(source_name(corpus) for corpus in description.get("corpora", []))


def check_pairs(source: ParallelSource, what: str) -> None:
    """Refuses a corpus of `source` in which no pair has two non-empty sides (ValueError
    naming `what`, e.g. the command's flags, and the corpus): there is nothing to train on.
    Reads each corpus up to its first such pair."""
    for corpus in source.parts or (source,):
        if not any(text and target for text, target in corpus.pairs()):
            raise ValueError(f"{what}: {source_name(corpus.description)}: no pair with two "
                             "non-empty sides (an empty file?)")


def longer_than(max_length: int) -> str:
    """Why a stored pair is left out of a model's training: a side too long for its
    `max_length`."""
    return f"a side longer than max_length {max_length} (EOS included)"


def left_out(manifest: dict[str, Any], max_length: int,
             trained_on: Optional[int] = None) -> list[dict[str, Any]]:
    """The pairs of the storage whose manifest is `manifest` that a model of `max_length`
    does not train on: per corpus and reason, `{"corpus", "reason", "pairs", "first_lines"}`
    (the first line numbers, 1-based in the corpus; [] for storage prepared without them).
    `trained_on`: the segmentations a `BatchPlan` of that model takes (`pairs_per_epoch`),
    which counts the over-long ones of storage prepared for another `max_length`."""
    corpora = manifest.get("corpora") or [{"source": manifest["source"],
                                           "pairs": manifest["pairs"]}]
    entries = []
    for corpus in corpora:
        counts, name = corpus["pairs"], source_name(corpus["source"])
        found = [(reason, count, counts.get("first_lines", {}).get(reason, []))
                 for reason, count in counts["dropped"].items()]
        longer = counts.get("longer_than_max_length", {})
        if longer.get("max_length") == max_length:
            found.append((longer_than(max_length), longer["pairs"], longer["first_lines"]))
        entries += [{"corpus": name, "reason": reason, "pairs": count, "first_lines": lines}
                    for reason, count, lines in found if count]
    if trained_on is not None:
        recorded = sum(entry["pairs"] for entry in entries
                       if entry["reason"] == longer_than(max_length))
        unrecorded = manifest["pairs"]["stored"] - trained_on - recorded
        if unrecorded > 0:
            entries.append({"corpus": source_name(manifest["source"]),
                            "reason": longer_than(max_length), "pairs": unrecorded,
                            "first_lines": []})
    return entries


def describe_left_out(entry: dict[str, Any]) -> str:
    """An entry of `left_out` as a line: the corpus, the count, why, the first lines."""
    pairs = entry["pairs"]
    lines = entry["first_lines"]
    return (f"{entry['corpus']}: {pairs:,} pair{'s' if pairs > 1 else ''} with "
            f"{entry['reason']}, not trained on"
            + (f" ({line_list(lines, pairs)})" if lines else " (line numbers not recorded)"))


def _segmented(tokenizer: Tokenizer, texts: list[str], side: int, threads: int,
               subword_dropout: float, seeds: list[int]) -> list[list[int]]:
    """The ids of `texts` of `side` (0: source, 1: target): deterministic, or BPE-dropout
    sampled from a seed drawn from `seeds` (SentencePiece's generator is reset to it; one
    thread keeps the draws in order)."""
    name = ("source", "target")[side]
    if not subword_dropout:
        return tokenizer.encode_batch(texts, name, threads)
    sentencepiece.set_random_generator_seed(
        int(np.random.SeedSequence(seeds).generate_state(1)[0]))
    return tokenizer.encode_batch(texts, name, 1, alpha=subword_dropout)


def _prefixed(prefix: Sequence[int], ids: list[list[int]]) -> list[list[int]]:
    """`ids` with `prefix` before each row (the rows themselves when it is empty)."""
    return [list(prefix) + row for row in ids] if prefix else ids


def _prefix_record(prefixes: tuple[Sequence[int], Sequence[int]]) -> dict[str, Any]:
    """The manifest's record of the ids put before each side: none without any."""
    if not any(prefixes):
        return {}
    return {"prefixes": {side: [int(i) for i in prefix]
                         for side, prefix in zip(("source", "target"), prefixes)}}


def _segmentation(subword_dropout: float, samples: int) -> dict[str, Any]:
    """The manifest's record of how pairs were segmented."""
    return ({"subword_dropout": subword_dropout, "samples": samples} if subword_dropout
            else {"subword_dropout": 0.0})


def prepared(source: ParallelSource, directory: str | os.PathLike,
             tokenizer: Tokenizer, seed: int = 0, shard_pairs: int = DEFAULT_SHARD_PAIRS,
             subword_dropout: float = 0.0, samples: int = 1,
             max_length: Optional[int] = None,
             prefixes: tuple[Sequence[int], Sequence[int]] = ((), ())
             ) -> tuple[TokenStorage, bool]:
    """The storage of `source` in `directory`: the one there if it was prepared from the same
    data with the same vocabulary, seed, segmentation and prefixes, else prepared now
    (`prepare`, whose arguments these are). Returns it and whether it was reused."""
    if (Path(directory) / MANIFEST).is_file():
        try:
            storage = TokenStorage.open(directory)
        except ValueError:
            storage = None
        if (storage is not None and storage.manifest.get("source") == source.description
                and storage.manifest.get("shard_seed") == seed
                and storage.manifest.get("segmentation", _segmentation(0.0, 1))
                == _segmentation(subword_dropout, samples)
                and storage.manifest.get("prefixes") == _prefix_record(prefixes).get("prefixes")
                and storage.vocabulary_sha256 == vocabulary_sha256(tokenizer.serialized)):
            return storage, True
    return prepare(source, directory, tokenizer, shard_pairs, seed,
                   subword_dropout=subword_dropout, samples=samples,
                   max_length=max_length, prefixes=prefixes), False


def check_segmentation(storage: TokenStorage, subword_dropout: float, samples: int) -> None:
    """Refuses (ValueError naming both) storage segmented otherwise than the recipe says."""
    found = storage.manifest.get("segmentation", _segmentation(0.0, 1))
    wanted = _segmentation(subword_dropout, samples)
    if found != wanted:
        raise ValueError(f"{storage.directory} was segmented with {found}, the recipe says "
                         f"{wanted}: prepare it with the recipe's subword_dropout and "
                         "subword_samples")
