"""Files written whole or not at all: a temporary file beside the target, flushed to disk,
then renamed over it (and the rename itself flushed), so that a reader, a crash or a power loss
leaves either the old file or the new one, never part of one."""
from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Union


def write_atomic(path: Union[str, os.PathLike], data: Union[bytes, str]) -> None:
    """Writes `data` (text as UTF-8) to `path` atomically and durably."""
    path = Path(path)
    payload = data.encode("utf-8") if isinstance(data, str) else data
    with tempfile.NamedTemporaryFile("wb", dir=path.parent, delete=False,
                                     prefix=f".{path.name}.") as handle:
        handle.write(payload)
        handle.flush()
        os.fsync(handle.fileno())
    os.chmod(handle.name, 0o644)
    os.replace(handle.name, path)
    sync_directory(path.parent)


def sync_directory(directory: Union[str, os.PathLike]) -> None:
    """Flushes a directory's entries (a rename into it) to disk, where the system allows."""
    try:
        descriptor = os.open(directory, os.O_RDONLY)
    except OSError:  # e.g. a system whose directories cannot be opened
        return
    try:
        os.fsync(descriptor)
    except OSError:
        pass
    finally:
        os.close(descriptor)


def sync_tree(directory: Union[str, os.PathLike]) -> None:
    """Flushes every file and directory under `directory` to disk (before a rename publishes
    it, e.g. an export's version directory)."""
    for root, _, files in os.walk(directory):
        for name in files:
            with open(os.path.join(root, name), "rb") as handle:
                os.fsync(handle.fileno())
        sync_directory(root)
