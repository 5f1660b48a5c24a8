"""The sizes and SHA-256 checksums of a checkpoint's files, each hashed once within :func:`hashing_once`.

A checkpoint's manifest lists every file with its size and checksum (:mod:`.checkpoint`); reading the file to hash
it is the cost of verifying it, so a process that chooses a checkpoint and then loads it hashes each file once.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

_HASHED: list[dict[Path, dict[str, Any]]] = []


@contextmanager
def hashing_once() -> Iterator[None]:
    """Within, each file is hashed once by this process: a checksum computed here is reused for the same path
    (a resumed run chooses its checkpoint, then loads it). Only for a span in which the files do not change."""
    _HASHED.append({})
    try:
        yield
    finally:
        _HASHED.pop()


def described(path: Path) -> dict[str, Any]:
    """:func:`_describe`, or its value for ``path`` already computed within :func:`hashing_once`."""
    if not _HASHED:
        return describe_file(path)
    known = _HASHED[-1]
    if path not in known:
        known[path] = describe_file(path)
    return known[path]


def describe_file(path: Path) -> dict[str, Any]:
    """The size and SHA-256 of the file ``path``."""
    hasher = hashlib.sha256()
    with open(path, "rb") as file:
        for block in iter(lambda: file.read(1 << 20), b""):
            hasher.update(block)
    return {"bytes": path.stat().st_size, "sha256": hasher.hexdigest()}
