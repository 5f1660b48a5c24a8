"""The features of Nozawa & Sato 2021's bound, read from a trained run: the run-level half of the bound.

:func:`features_from_run` rebuilds the run through :func:`~uncurated.train.restore.load_run` and embeds augmented
training and test images (:mod:`uncurated.theory.bound_report` computes the bound from them). ``uncurated bound``
and the bench's theory suite both call it, so it sits below both.
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch

from ..data import TensorImageDataset
from ..progress import progress
from ..theory.bound_report import BoundFeatures, augmented_embeddings
from .restore import load_run


def features_from_run(
    folder: Path,
    *,
    train_samples: int = 5000,
    augmentations: int = 10,
    seed: int = 0,
    temperature: float | None = None,
) -> BoundFeatures:
    """The features of the bound for the trained run in ``folder``, with a progress report.

    ``train_samples`` random training images give the class means; every
    test image is embedded (:func:`~uncurated.theory.bound_report.augmented_embeddings`);
    ``temperature`` defaults to the run's objective's (learned or set).
    """
    restored = load_run(folder)
    splits = restored.splits
    if not (isinstance(splits.train, TensorImageDataset) and isinstance(splits.test, TensorImageDataset)):
        raise ValueError(f"{folder}: the bound needs an in-memory dataset with a labelled test split")
    temperature = temperature or restored.temperature()
    generator = torch.Generator().manual_seed(seed)
    chosen = torch.randperm(len(splits.train), generator=generator)[:train_samples]
    train, test = splits.train.batch(chosen), splits.test.batch(torch.arange(len(splits.test)))
    embed = getattr(restored.model, "embed_images", restored.model)
    total = (len(train["image"]) + len(test["image"])) * augmentations
    report, done = progress(total, unit="image", desc="embedding augmentations", stream=sys.stderr), 0

    def advance(count: int) -> None:
        nonlocal done
        done += count
        report.update(done)

    try:
        views = [
            augmented_embeddings(
                embed, images, restored.augment, views=augmentations, seed=seed + offset, progress=advance
            )
            for offset, images in enumerate((train["image"], test["image"]))
        ]
    finally:
        report.close()
    return BoundFeatures(views[0], train["label"], views[1], test["label"], float(temperature))
