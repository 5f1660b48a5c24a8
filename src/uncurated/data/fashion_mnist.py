"""Fashion-MNIST (Xiao, Rasul & Vollgraf 2017) from its four IDX files.

The loader reads the files from a folder, by default where Debian's package
``dataset-fashion-mnist`` installs them; it never downloads anything. The
files have MNIST's names and layout (:mod:`uncurated.data.mnist`).
"""

from __future__ import annotations

import os
from pathlib import Path

import torch
from torch import Tensor

from ..validation import check_choice
from .mnist import IMAGE_SIZE, SPLIT_FILES, find_split_file, read_image_split
from .tensor_dataset import TensorImageDataset

__all__ = [
    "CLASS_NAMES",
    "CONFUSABLE_GROUPS",
    "DEFAULT_ROOT",
    "IMAGE_SIZE",
    "RELATED_CLASSES",
    "SPLIT_FILES",
    "checked_fashion_images",
    "fashion_mnist_dataset",
    "load_fashion_mnist",
]

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

#: For each label, the semantically related labels a noisy label flips to
#: (:func:`uncurated.data.noise.flip_labels`): the tops T-shirt/top <-> Shirt
#: and Pullover <-> Coat, the shoes Sandal <-> Sneaker and Ankle boot -> Sneaker,
#: and Trouser <-> Dress, the closest pair among the remaining long garments.
#: Bag has no related class and keeps its label.
RELATED_CLASSES: dict[int, tuple[int, ...]] = {
    0: (6,),
    1: (3,),
    2: (4,),
    3: (1,),
    4: (2,),
    5: (7,),
    6: (0,),
    7: (5,),
    8: (),
    9: (7,),
}

#: Groups of classes that look alike: the upper-body garments (T-shirt/top,
#: Pullover, Coat, Shirt) and the shoes (Sandal, Sneaker, Ankle boot). A
#: "confusable" mismatched caption of FashionCaptions comes from the same group.
CONFUSABLE_GROUPS: tuple[tuple[int, ...], ...] = ((0, 2, 4, 6), (5, 7, 9))


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
    how_to_get = (
        f"Get the data with\n"
        f"  sudo apt-get install dataset-fashion-mnist   (Debian, Ubuntu; installs to {DEFAULT_ROOT})\n"
        f"or download the four *-ubyte.gz files of https://github.com/zalandoresearch/fashion-mnist "
        f"into a folder and pass that folder: root= in Python, --data-dir on the command line."
    )
    paths = [find_split_file(root, stem, "Fashion-MNIST", how_to_get) for stem in SPLIT_FILES[split]]
    return read_image_split(root, split, *paths)


def fashion_mnist_dataset(root: str | os.PathLike | None = None, split: str = "train") -> TensorImageDataset:
    """One split of Fashion-MNIST as a :class:`TensorImageDataset` of (N, 1, 28, 28) uint8 images.

    See :func:`load_fashion_mnist` for the arguments; ``classes`` is :data:`CLASS_NAMES`.
    """
    images, labels = load_fashion_mnist(root, split)
    return TensorImageDataset(images[:, None], labels, classes=CLASS_NAMES)


def checked_fashion_images(images: Tensor, labels: Tensor) -> tuple[Tensor, Tensor]:
    """``images`` as (N, 28, 28) uint8 and ``labels`` as (N,) int64 in 0..9, N >= 1, both on the CPU, for a
    dataset built from Fashion-MNIST's images (with or without their channel axis); ``ValueError`` naming the one
    that is not."""
    if isinstance(images, Tensor) and images.ndim == 4 and images.shape[1] == 1:
        images = images[:, 0]
    if not isinstance(images, Tensor) or images.dtype != torch.uint8 or images.ndim != 3:
        shape = f"{images.dtype} of shape {tuple(images.shape)}" if isinstance(images, Tensor) else repr(images)
        raise ValueError(f"images must be uint8 of shape (N, 28, 28) or (N, 1, 28, 28), got {shape:.80}")
    count = len(images)
    if not isinstance(labels, Tensor) or labels.shape != (count,) or labels.is_floating_point() or count == 0:
        raise ValueError(f"labels must be a non-empty integer tensor of shape ({count},)")
    if int(labels.min()) < 0 or int(labels.max()) >= len(CLASS_NAMES):
        raise ValueError(f"labels must be in 0..{len(CLASS_NAMES) - 1}")
    return images.cpu(), labels.long().cpu()
