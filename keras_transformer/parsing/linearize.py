"""Trees <-> token sequences for sequence-to-sequence parsing (Vinyals & Kaiser et al. 2015).

Source: the sentence's words separated by spaces.
Target: the bracketing with labelled opening tokens, bare closing tokens and one ``XX`` per
word, e.g. ``(S (NP XX XX ) (VP XX (NP XX ) ) XX )``. Words and part-of-speech tags are both
left out: EVALB scores neither, the model only has to emit the structure and one ``XX`` per
source word, and `delinearize` puts the words (and their tags, when known) back. With
``leaves="words"`` the words themselves take the ``XX`` slots (``(S (NP The cat ) ...``): a longer
target, but one the decoder can align with the source by copying. The ``TOP`` root is implicit:
its children are linearized and `delinearize` wraps the result in it.
"""
from __future__ import annotations

import difflib
import re
from typing import Optional, Sequence

from keras_transformer.config import LEAVES
from keras_transformer.parsing.preprocess import ROOT_LABEL
from keras_transformer.parsing.trees import Tree

WORD = "XX"
CLOSE = ")"
UNKNOWN_TAG = "XX"
# "(LABEL" opens, ")" optionally followed by a label closes, anything else is a word slot.
_TOKEN = re.compile(r"\(([^\s()]*)|\)[^\s()]*|[^\s()]+")


def source_text(tree: Tree) -> str:
    """The sentence: `tree`'s words separated by single spaces."""
    return " ".join(tree.words())


def linearize(tree: Tree, leaves: str = "placeholder") -> str:
    """The target sequence of a preprocessed tree (under a ``TOP`` root); `leaves` is
    "placeholder" (one ``XX`` per word) or "words" (the words themselves)."""
    if leaves not in LEAVES:
        raise ValueError(f"leaves: {leaves!r} is not one of {', '.join(LEAVES)}")
    tokens: list[str] = []
    for child in tree.children:
        _append_tokens(child, tokens, leaves == "words")
    return " ".join(tokens)


def _append_tokens(node: Tree | str, tokens: list[str], words: bool) -> None:
    if isinstance(node, str) or node.is_preterminal:
        tokens.append((node if isinstance(node, str) else node.children[0]) if words else WORD)
        return
    tokens.append(f"({node.label}")
    for child in node.children:
        _append_tokens(child, tokens, words)
    tokens.append(CLOSE)


def delinearize(
    sequence: str, words: Sequence[str], tags: Optional[Sequence[str]] = None
) -> Tree:
    """A well-formed ``TOP`` tree over exactly `words`, in order, from any decoded `sequence`.

    Word slots (``XX`` or any other bare token) take the next word and its tag from `tags`
    (``XX`` when no tags are given); slots beyond the last word are dropped. When the slots
    hold words (``leaves="words"``), they are first aligned with `words`, so that a misspelt,
    doubled or skipped word costs only its own slot instead of shifting every later word:
    a doubled word's extra slot stays empty and a skipped word joins its predecessor's
    constituent. Closing tokens with nothing open and openings without a label are ignored,
    brackets still open at the end are closed, words never placed go to the innermost
    constituent open at the end of the sequence, and constituents without words are removed.
    """
    if tags is not None and len(tags) != len(words):
        raise ValueError(f"got {len(tags)} tags for {len(words)} words")
    leaves = [Tree(tag, (word,)) for word, tag in zip(words, tags or [UNKNOWN_TAG] * len(words))]
    tokens = [(match.group(), match.group(1)) for match in _TOKEN.finditer(sequence)]
    slots = [token for token, label in tokens if label is None and not token.startswith(CLOSE)]
    emitted = iter(_slot_words(slots, words))
    stack: list[tuple[str, list[Tree]]] = [(ROOT_LABEL, [])]
    placed = 0
    for token, label in tokens:
        if label is not None:
            if label:
                stack.append((label, []))
        elif token.startswith(CLOSE):
            if len(stack) > 1:
                _close(stack)
        else:
            for index in next(emitted):
                stack[-1][1].append(leaves[index])
                placed = index + 1
    stack[-1][1].extend(leaves[placed:])
    while len(stack) > 1:
        _close(stack)
    return Tree(ROOT_LABEL, tuple(stack[0][1]))


def _slot_words(slots: Sequence[str], words: Sequence[str]) -> list[list[int]]:
    """For each decoded word slot, the indices of the words it places (increasing overall).

    Placeholder slots (no slot equals a word) take one word each, in order. Otherwise the
    slots are aligned with the words (`difflib`): matched and substituted slots take their
    words, surplus slots none, and words without a slot go with the slot before them (words
    after the last slot are left for the caller to place at the end).
    """
    if not set(slots) & set(words):
        return [[index] if index < len(words) else [] for index in range(len(slots))]
    placed: list[list[int]] = [[] for _ in slots]
    matcher = difflib.SequenceMatcher(a=list(slots), b=list(words), autojunk=False)
    for _, slot_start, slot_end, word_start, word_end in matcher.get_opcodes():
        if slot_end > slot_start:  # Matched or substituted: in order, extra words to the last.
            for offset, index in enumerate(range(word_start, word_end)):
                placed[min(slot_start + offset, slot_end - 1)].append(index)
        elif slot_start < len(slots):  # Skipped words: with the slot before (or the first).
            placed[max(slot_start - 1, 0)].extend(range(word_start, word_end))
    return placed


def _close(stack: list[tuple[str, list[Tree]]]) -> None:
    """Pops the innermost open constituent into its parent, unless it has no words."""
    label, children = stack.pop()
    if children:
        stack[-1][1].append(Tree(label, tuple(children)))
