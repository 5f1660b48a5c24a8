"""scikit-learn's bundled handwritten digits: 1,797 images of 8 x 8 pixels, for tiny smoke runs.

The data ships inside scikit-learn (``sklearn.datasets.load_digits``), so it
needs no download and no system package. Pixel values 0..16 are scaled to
[0, 1]. scikit-learn has no official split; :func:`digits_dataset` draws a
fixed one from ``seed``.
"""

from __future__ import annotations

import numpy as np
import torch

from ..validation import check_choice, check_integer, check_range
from .tensor_dataset import TensorImageDataset

NUM_IMAGES = 1797
IMAGE_SIZE = 8
MAX_VALUE = 16


def digits_dataset(split: str = "train", seed: int = 0, test_fraction: float = 0.2) -> TensorImageDataset:
    """One split of the digits as a :class:`TensorImageDataset` of float32 (N, 1, 8, 8) images in [0, 1].

    Args:
        split: ``"train"``, ``"test"``, or ``"all"`` (the 1,797 images in
            scikit-learn's order).
        seed: the seed of the split; the same seed gives the same split, and
            the two parts never overlap. An integer >= 0.
        test_fraction: the share of the images in the test split, in (0, 1)
            (0.2: 359 test and 1,438 training images).

    A sample's index is its position in the split, in its original order.
    """
    check_choice("split", split, ("train", "test", "all"))
    seed = check_integer("seed", seed, 0)
    test_fraction = check_range("test_fraction", test_fraction, 0.0, 1.0, low_open=True, high_open=True)
    from sklearn.datasets import load_digits  # imported here: scikit-learn takes a second to import

    digits = load_digits()
    images = torch.from_numpy(digits.images.astype(np.float32) / MAX_VALUE)[:, None]
    labels = torch.from_numpy(digits.target.astype(np.int64))
    if split != "all":
        order = np.random.default_rng(seed).permutation(len(images))
        test_count = round(test_fraction * len(images))
        chosen = np.sort(order[:test_count] if split == "test" else order[test_count:])
        images, labels = images[chosen], labels[chosen]
    return TensorImageDataset(images, labels, classes=[str(digit) for digit in range(10)])
