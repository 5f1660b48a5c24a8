"""A tiny stand-in for the Fashion-MNIST folder, written with write_idx."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from uncurated.data import write_idx
from uncurated.data.fashion_mnist import SPLIT_FILES


def write_fake_fashion_mnist(
    root: Path, *, sizes: dict[str, int] | None = None, compressed: bool = True, seed: int = 0
) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Write random uint8 images and labels 0..9 for each split into ``root``; return what was written."""
    sizes = {"train": 12, "test": 20} if sizes is None else sizes
    rng = np.random.default_rng(seed)
    suffix = ".gz" if compressed else ""
    root.mkdir(parents=True, exist_ok=True)
    written = {}
    for split, count in sizes.items():
        images = rng.integers(0, 256, size=(count, 28, 28), dtype=np.uint8)
        labels = (np.arange(count) % 10).astype(np.uint8)
        images_stem, labels_stem = SPLIT_FILES[split]
        write_idx(root / f"{images_stem}{suffix}", images)
        write_idx(root / f"{labels_stem}{suffix}", labels)
        written[split] = (images, labels)
    return written
