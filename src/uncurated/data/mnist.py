"""MNIST (LeCun et al. 1998) and datasets in its layout: four IDX files per folder.

MNIST and Fashion-MNIST share the file names of :data:`SPLIT_FILES` and the
format: uint8 images of 28 x 28 pixels and uint8 labels 0..9. Nothing is
downloaded; the files must be in the folder given.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import torch
from torch import Tensor

from ..validation import check_choice
from .idx import read_idx
from .tensor_dataset import TensorImageDataset

#: The stems of the image and label files of each split; each file may carry a ``.gz`` suffix.
SPLIT_FILES = {
    "train": ("train-images-idx3-ubyte", "train-labels-idx1-ubyte"),
    "test": ("t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"),
}

IMAGE_SIZE = 28
NUM_CLASSES = 10


def load_mnist(root: str | os.PathLike, split: str = "train") -> tuple[Tensor, Tensor]:
    """The images and labels of one split of MNIST in the folder ``root``.

    Args:
        root: the folder holding the IDX files (compressed ``*-ubyte.gz`` or
            uncompressed ``*-ubyte``).
        split: ``"train"`` (60,000 images) or ``"test"`` (10,000 images).

    Returns:
        ``(images, labels)``: uint8 (N, 28, 28) and int64 (N,) in 0..9.

    Raises:
        FileNotFoundError: a file is missing.
        ValueError: a file is not valid IDX, or images and labels do not match.
    """
    check_choice("split", split, SPLIT_FILES)
    root = Path(root)
    how_to_get = "Put the four MNIST files (*-ubyte or *-ubyte.gz) into a folder and pass that folder as root=."
    paths = [find_split_file(root, stem, "MNIST", how_to_get) for stem in SPLIT_FILES[split]]
    return read_image_split(root, split, *paths)


def mnist_dataset(root: str | os.PathLike, split: str = "train") -> TensorImageDataset:
    """One split of MNIST as a :class:`TensorImageDataset` of (N, 1, 28, 28) images; see :func:`load_mnist`."""
    images, labels = load_mnist(root, split)
    return TensorImageDataset(images[:, None], labels, classes=[str(digit) for digit in range(NUM_CLASSES)])


def find_split_file(root: Path, stem: str, dataset: str, how_to_get: str) -> Path:
    """The compressed or else the uncompressed file ``stem`` of ``dataset`` in ``root``.

    Raises ``FileNotFoundError`` naming the file and the folder, followed by ``how_to_get``.
    """
    for name in (f"{stem}.gz", stem):
        if (root / name).is_file():
            return root / name
    raise FileNotFoundError(f"{dataset} file {stem}.gz (or {stem}) not found in {root}. {how_to_get}")


def read_image_split(root: Path, split: str, images_path: Path, labels_path: Path) -> tuple[Tensor, Tensor]:
    """Read and check a pair of IDX files of the MNIST layout (28 x 28 uint8 images, labels 0..9)."""
    images = read_idx(images_path)
    labels = read_idx(labels_path)
    if images.dtype != np.uint8 or images.ndim != 3 or images.shape[1:] != (IMAGE_SIZE, IMAGE_SIZE):
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
    if labels.size and labels.max() >= NUM_CLASSES:
        raise ValueError(f"{labels_path}: labels must be in 0..{NUM_CLASSES - 1}, found {labels.max()}")
    return torch.from_numpy(images), torch.from_numpy(labels.astype(np.int64))
