"""Word alignments of training pairs, for guided alignment training: Pharaoh's `i-j` lines
(eflomal's and fast_align's output: source word i linked to target word j, from 0; words are
the texts' whitespace-separated tokens) and the links they give the pairs' subword pieces: a
source piece and a target piece are linked when their words are (Garg et al. 2019).
"""
from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from typing import Optional

import numpy as np

from keras_transformer.data.text_files import iter_raw_lines

WORD_START = "\u2581"  # SentencePiece's word mark, which begins a word's first piece

# Word links: (source word, target word) pairs, as Pharaoh's `i-j` format writes them.
Links = set[tuple[int, int]]


def pharaoh_lines(path: str | os.PathLike) -> Iterator[Links]:
    """The word links of each line of `path` (plain or .gz), streamed; a ValueError names the
    line of a token that is no `i-j` link."""
    for number, raw in enumerate(iter_raw_lines(path), 1):
        links = set()
        for pair in raw.decode("utf-8", errors="replace").split():
            source, _, target = pair.partition("-")
            if not (source.isdigit() and target.isdigit()):
                raise ValueError(f"{os.fspath(path)}:{number}: {pair!r} is not a link i-j of "
                                 "word positions")
            links.add((int(source), int(target)))
        yield links


def read_pharaoh(path: str | os.PathLike) -> list[Links]:
    """Every line of `path` as word links (`pharaoh_lines`)."""
    return list(pharaoh_lines(path))


# What a piece is to the words of its text (`piece_kinds`).
INSIDE, WORD, MARK = 0, 1, 2


def piece_kinds(pieces: Sequence[str]) -> np.ndarray:
    """For each of `pieces`: `WORD` if it begins a word (the word mark and more), `MARK` if
    it is the word mark alone, else `INSIDE`."""
    return np.array([MARK if piece == WORD_START else WORD if piece.startswith(WORD_START)
                     else INSIDE for piece in pieces], np.int8)


def piece_words(kinds: np.ndarray) -> np.ndarray:
    """Each piece's word (from 0), of pieces of `kinds` (`piece_kinds`): a `WORD` piece
    begins one, and so does the mark alone before a piece inside a word (byte pieces); the mark
    alone before another word or at the end is whitespace of no word (-1), as are pieces before
    the first word (e.g. a language token)."""
    following = np.append(kinds[1:], WORD)
    starts = (kinds == WORD) | ((kinds == MARK) & (following == INSIDE))
    words = np.cumsum(starts) - 1
    return np.where((kinds == MARK) & ~starts, -1, words)


def piece_links(links: Links, words: tuple[int, int], ids: tuple[Sequence[int], Sequence[int]],
                kinds: tuple[np.ndarray, np.ndarray], where: str) -> Optional[np.ndarray]:
    """The `[k, 2]` (source piece, target piece) links of a pair whose texts have `words`
    (source, target) and whose pieces are `ids` (source, target; `kinds`: the `piece_kinds`
    of each side's vocabulary, by id): every piece of a linked source word with every piece of
    its target word. None when the pieces do not make the texts' words (the pair then trains
    unsupervised); a ValueError naming `where` (file:line) for a link past a text's words."""
    for side, name in enumerate(("source", "target")):
        past = [link for link in sorted(links) if link[side] >= words[side]]
        if past:
            raise ValueError(f"{where}: the link {past[0][0]}-{past[0][1]} names {name} word "
                             f"{past[0][side]} of a {words[side]}-word {name} sentence (words "
                             "count from 0): are the alignments of these files, in this order?")
    source_words, target_words = (piece_words(side_kinds[np.asarray(side_ids, np.int64)])
                                  for side_ids, side_kinds in zip(ids, kinds))
    if ((source_words.max(initial=-1) + 1, target_words.max(initial=-1) + 1)
            != tuple(words)):
        return None
    if not links:
        return np.zeros([0, 2], np.int64)
    linked = np.zeros([words[0], words[1]], bool)
    linked[tuple(np.array(sorted(links)).T)] = True
    source_pieces, target_pieces = np.nonzero(
        linked[np.maximum(source_words, 0)][:, np.maximum(target_words, 0)]
        & (source_words >= 0)[:, None] & (target_words >= 0)[None, :])
    return np.stack([source_pieces, target_pieces], axis=1)
