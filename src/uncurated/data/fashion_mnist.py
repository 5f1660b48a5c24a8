"""Fashion-MNIST (Xiao, Rasul & Vollgraf 2017) from its four IDX files.

The loader reads the files from a folder, by default where Debian's package
``dataset-fashion-mnist`` installs them; it never downloads anything.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import torch
from torch import Tensor

from ..validation import check_choice
from .idx import read_idx

#: Where ``sudo apt-get install dataset-fashion-mnist`` puts the files.
DEFAULT_ROOT = Path("/usr/share/datasets/fashion-mnist")

#: The ten classes, indexed by label.
CLASS_NAMES = (
    "T-shirt/top",
    "Trouser",
    "Pullover",
    "Dress",
    "Coat",
    "Sandal",
    "Shirt",
    "Sneaker",
    "Bag",
    "Ankle boot",
)

#: The stems of the image and label files of each split; each file may carry a ``.gz`` suffix.
SPLIT_FILES = {
    "train": ("train-images-idx3-ubyte", "train-labels-idx1-ubyte"),
    "test": ("t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"),
}

IMAGE_SIZE = 28


def load_fashion_mnist(root: str | os.PathLike | None = None, split: str = "train") -> tuple[Tensor, Tensor]:
    """The images and labels of one split of Fashion-MNIST.

    Args:
        root: the folder holding the IDX files (compressed ``*-ubyte.gz`` or
            uncompressed ``*-ubyte``); ``None`` takes :data:`DEFAULT_ROOT`.
        split: ``"train"`` (60,000 images) or ``"test"`` (10,000 images).

    Returns:
        ``(images, labels)``: a uint8 tensor of shape (N, 28, 28) and an int64
        tensor of shape (N,) with values in 0..9 (see :data:`CLASS_NAMES`).

    Raises:
        FileNotFoundError: a file is missing; the message says how to get the data.
        ValueError: a file is not valid IDX, or images and labels do not match.
    """
    check_choice("split", split, SPLIT_FILES)
    root = DEFAULT_ROOT if root is None else Path(root)
    images_path, labels_path = (_find(root, stem) for stem in SPLIT_FILES[split])
    images = read_idx(images_path)
    labels = read_idx(labels_path)
    expected_shape = (IMAGE_SIZE, IMAGE_SIZE)
    if images.dtype != np.uint8 or images.ndim != 3 or images.shape[1:] != expected_shape:
        raise ValueError(
            f"{images_path}: expected uint8 images of shape (N, {IMAGE_SIZE}, {IMAGE_SIZE}), "
            f"got {images.dtype} of shape {images.shape}"
        )
    if labels.dtype != np.uint8 or labels.ndim != 1:
        raise ValueError(
            f"{labels_path}: expected uint8 labels of shape (N,), got {labels.dtype} of shape {labels.shape}"
        )
    if len(images) != len(labels):
        raise ValueError(
            f"{root}: the {split} split has {len(images)} images ({images_path.name}) "
            f"but {len(labels)} labels ({labels_path.name})"
        )
    if labels.size and labels.max() >= len(CLASS_NAMES):
        raise ValueError(f"{labels_path}: labels must be in 0..{len(CLASS_NAMES) - 1}, found {labels.max()}")
    return torch.from_numpy(images), torch.from_numpy(labels.astype(np.int64))


def _find(root: Path, stem: str) -> Path:
    """The compressed or else the uncompressed file ``stem`` in ``root``."""
    for name in (f"{stem}.gz", stem):
        if (root / name).is_file():
            return root / name
    raise FileNotFoundError(
        f"Fashion-MNIST file {stem}.gz (or {stem}) not found in {root}. Get the data with\n"
        f"  sudo apt-get install dataset-fashion-mnist   (Debian, Ubuntu; installs to {DEFAULT_ROOT})\n"
        f"or download the four *-ubyte.gz files of https://github.com/zalandoresearch/fashion-mnist "
        f"into a folder and pass that folder: root= in Python, --data-dir on the command line."
    )
