"""Zero-shot classification with weighted point sets (Uesaka et al. 2025, Sec. 6.2, Table 5).

A class is the plain mean of its prompts' Eq. 8 vectors, not renormalized:
by bilinearity that is the WPS similarity averaged over the prompts (the
Thm 4.2 classifier). Images score ``e_image . e_class``. The random features
are fixed for an evaluation; accuracy is averaged over several draws.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from ..similarity import WeightedPointSet, WPSEmbedding


@dataclass(frozen=True)
class ZeroShotResult:
    """Top-1 accuracy of each random-feature draw, with their mean and standard deviation."""

    accuracies: tuple[float, ...]

    @property
    def mean(self) -> float:
        return statistics.fmean(self.accuracies)

    @property
    def std(self) -> float:
        return statistics.stdev(self.accuracies) if len(self.accuracies) > 1 else 0.0


def class_embeddings(embedding: WPSEmbedding, prompts: Sequence[WeightedPointSet]) -> Tensor:
    """(K, e) class vectors: the mean over each class's prompts of their Eq. 8 vectors (no renormalization)."""
    return torch.stack([embedding(class_prompts)[0].mean(dim=0) for class_prompts in prompts])


@torch.no_grad()
def point_set_zero_shot(
    images: WeightedPointSet,
    labels: Tensor,
    prompts: Sequence[WeightedPointSet],
    embedding: WPSEmbedding,
    *,
    draws: int = 5,
    seed: int = 0,
) -> ZeroShotResult:
    """Zero-shot top-1 accuracy over ``draws`` fixed random-feature draws (seeds ``seed .. seed + draws - 1``).

    Args:
        images: the images' point sets, batch N.
        labels: (N,) class indices into ``prompts``.
        prompts: one batch of prompt point sets per class.
        embedding: the model's :class:`WPSEmbedding`; it is put in eval mode
            and left with the last draw.
    """
    if isinstance(draws, bool) or not isinstance(draws, int) or draws < 1:
        raise ValueError(f"draws must be an integer >= 1, got {draws!r}")
    if labels.shape != (images.batch_size,):
        raise ValueError(f"labels must have shape ({images.batch_size},), got {tuple(labels.shape)}")
    if not prompts:
        raise ValueError("prompts must hold at least one class")
    embedding.eval()
    accuracies = []
    for draw in range(seed, seed + draws):
        embedding.redraw(draw, images.dim)
        (image_vectors,) = embedding(images)
        predictions = (image_vectors @ class_embeddings(embedding, prompts).T).argmax(dim=1)
        accuracies.append(float((predictions == labels.to(predictions.device)).double().mean()))
    return ZeroShotResult(tuple(accuracies))
