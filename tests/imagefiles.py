"""Small image files, CSV files and tar shards for the data tests, written with Pillow and tarfile."""

from __future__ import annotations

import io
import tarfile
from pathlib import Path

import numpy as np
from PIL import Image


def pattern(seed: int, size: int = 8, channels: int = 1) -> np.ndarray:
    """A reproducible uint8 image, (size, size) or (size, size, 3)."""
    rng = np.random.default_rng(seed)
    shape = (size, size) if channels == 1 else (size, size, channels)
    return rng.integers(0, 256, size=shape, dtype=np.uint8)


def encode(pixels: np.ndarray, fmt: str = "PNG") -> bytes:
    """The bytes of ``pixels`` saved as a PNG or JPEG file."""
    buffer = io.BytesIO()
    Image.fromarray(pixels).save(buffer, fmt)
    return buffer.getvalue()


def sixteen_bit_png() -> bytes:
    """A PNG of mode I;16, which has no faithful 8-bit conversion."""
    buffer = io.BytesIO()
    Image.fromarray(np.full((8, 8), 1000, dtype=np.uint16)).save(buffer, "PNG")
    return buffer.getvalue()


#: Bad image files, by the reason they should be skipped for.
BAD_IMAGES = {
    "zero_byte": b"",
    "truncated": encode(pattern(99, size=32))[:200],
    "corrupt": b"this is not an image" * 10,
    "wrong_mode": sixteen_bit_png(),
}


def write_tar(path: Path, members: list[tuple[str, bytes]]) -> Path:
    """A tar file holding ``members`` (name, content) in order."""
    with tarfile.open(path, "w") as tar:
        for name, content in members:
            info = tarfile.TarInfo(name)
            info.size = len(content)
            tar.addfile(info, io.BytesIO(content))
    return path
