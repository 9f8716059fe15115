"""Constituency trees and a strict reader for Penn Treebank bracketed (`.mrg`) text."""
from __future__ import annotations

import dataclasses
import os
import re
from typing import Callable, Iterator, Union

Child = Union["Tree", str]
_TOKEN = re.compile(r"\(|\)|[^\s()]+")


class TreeFormatError(ValueError):
    """A malformed tree; the message names the source, the 1-based tree index and the line."""


@dataclasses.dataclass(frozen=True)
class Tree:
    """A labelled node. A pre-terminal has one child, the word (a `str`); others hold Trees.

    The Penn Treebank wraps every sentence in an unlabelled root, read as label ``""``.
    """

    label: str
    children: tuple[Child, ...]

    @property
    def is_preterminal(self) -> bool:
        return len(self.children) == 1 and isinstance(self.children[0], str)

    def preterminals(self) -> Iterator["Tree"]:
        """The pre-terminal nodes (tag and word) from left to right."""
        if self.is_preterminal:
            yield self
            return
        for child in self.children:
            if isinstance(child, Tree):
                yield from child.preterminals()

    def words(self) -> list[str]:
        return [node.children[0] for node in self.preterminals()]  # type: ignore[misc]

    def tags(self) -> list[str]:
        return [node.label for node in self.preterminals()]

    def __str__(self) -> str:
        inner = " ".join(str(child) for child in self.children)
        return f"({self.label} {inner})"


def read_trees(text: str, source: str = "<string>") -> list[Tree]:
    """Every tree in `text`, in order; raises TreeFormatError on the first malformed one.

    Besides unbalanced brackets, a ``(`` in the first column while a tree is still open is
    an error (the treebank starts each tree there), so a missing ``)`` cannot silently merge
    two trees.
    """
    trees: list[Tree] = []
    stack: list[tuple[str, list[Child]]] = []
    start_line = 0

    def fail(line: int, message: str, index: int = 0) -> TreeFormatError:
        index = index or len(trees) + 1
        return TreeFormatError(f"{source}: tree {index} (line {line}): {message}")

    for line_number, line in enumerate(text.splitlines(), start=1):
        if stack and line.startswith("("):
            raise fail(start_line, f"not closed before the next tree at line {line_number}")
        tokens = _TOKEN.findall(line)
        position = 0
        while position < len(tokens):
            token = tokens[position]
            position += 1
            if token == "(":
                if not stack:
                    start_line = line_number
                label = ""
                if position < len(tokens) and tokens[position] not in ("(", ")"):
                    label = tokens[position]
                    position += 1
                stack.append((label, []))
            elif token == ")":
                if not stack:
                    raise fail(line_number, "')' without a matching '('", max(len(trees), 1))
                label, children = stack.pop()
                node = _make_node(label, children, lambda msg: fail(line_number, msg))
                if stack:
                    stack[-1][1].append(node)
                else:
                    trees.append(node)
            elif not stack:
                raise fail(line_number, f"text {token!r} outside any tree")
            else:
                stack[-1][1].append(token)
    if stack:
        raise fail(start_line, f"{len(stack)} bracket(s) not closed at the end of the text")
    return trees


def read_tree(text: str) -> Tree:
    """The single tree in `text`."""
    trees = read_trees(text)
    if len(trees) != 1:
        raise TreeFormatError(f"expected exactly one tree, found {len(trees)}")
    return trees[0]


def read_tree_file(path: str | os.PathLike) -> list[Tree]:
    """Every tree in a bracketed file (`.mrg`, or one tree a line); errors name the file."""
    with open(path, encoding="utf-8") as handle:
        return read_trees(handle.read(), source=os.fspath(path))


def _make_node(
    label: str, children: list[Child], fail: Callable[[str], TreeFormatError]
) -> Tree:
    """Checks the node shape: one word (a pre-terminal) or one or more subtrees."""
    words = [child for child in children if isinstance(child, str)]
    if not children:
        raise fail(f"empty bracket ({label})")
    if words and len(children) > 1:
        raise fail(f"node ({label} ...) mixes words {words[:3]} with other children")
    return Tree(label, tuple(children))
