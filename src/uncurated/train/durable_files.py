"""Files that survive a crash once written: what a checkpoint's publish relies on.

A checkpoint folder is written in full, flushed to the disk file by file (:func:`sync_tree`), then renamed into
place; the pointer to the latest one is replaced in one rename of a flushed temporary file
(:func:`replace_durably`), so a reader sees the old pointer or the new one, never a partial one.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path


def write_durably(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` (flushed to the disk with the rest of its folder by :func:`sync_tree`)."""
    with open(path, "w") as file:
        file.write(text)


def replace_durably(path: Path, text: str) -> None:
    """Replace ``path`` with ``text`` in one rename of a flushed temporary file beside it."""
    handle, temporary = tempfile.mkstemp(prefix=f".{path.name}-", dir=path.parent)
    try:
        with os.fdopen(handle, "w") as file:
            file.write(text)
            file.flush()
            os.fsync(file.fileno())
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


def sync_tree(folder: Path) -> None:
    """Flush every file under ``folder`` to the disk."""
    for path in folder.iterdir():
        if path.is_dir():
            sync_tree(path)
            continue
        with open(path, "rb") as file:
            os.fsync(file.fileno())
