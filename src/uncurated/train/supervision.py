"""Label-aware training options of the two-view loop, and DCL's clamp monitor.

* ``positives=label`` (thesis Sec. 5.3.1, Fig. 5-3): the second view of each
  image is an augmentation of a *random other* training image with the same
  label, so the positive pair is defined by the labels. ``label_noise=eta``
  first flips each training label to a related class with probability
  ``eta / 2`` (:func:`uncurated.data.flip_labels` with
  :data:`~uncurated.data.fashion_mnist.RELATED_CLASSES`), so noisy labels
  make noisy positive pairs. :class:`LabelPartners` draws the partners; its
  draws depend on ``(seed, step)`` only, so a resumed run draws what an
  uninterrupted one would.
* ``oracle_negatives=true``: the trainer passes the batch's true labels to
  the objective (``labels=``), which leaves same-label samples out of the
  negatives (the supervised oracle of thesis Figs. 3-3 and 4-2).
* :func:`dcl_clamped_fraction`: the fraction of anchors whose debiased
  negative estimate fell to DCL's floor ``e^{-1/t}`` in a batch (at small
  temperatures most anchors sit there, and DCL then trains on the floor).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from ..data import RELATED_CLASSES, flip_labels
from .config import ConfigError

POSITIVES = ("augmentation", "label")


class LabelPartners:
    """For each anchor, a random other training sample with the same (possibly noisy) label."""

    def __init__(self, dataset, *, label_noise: float = 0.0, seed: int = 0) -> None:
        labels = getattr(dataset, "labels", None)
        if not hasattr(dataset, "batch") or labels is None or bool((labels < 0).any()):
            raise ConfigError("positives=label needs an in-memory labelled dataset (fashion-mnist, mnist, digits)")
        self.dataset, self.seed = dataset, seed
        labels = labels.cpu()
        generator = torch.Generator().manual_seed(seed * 7919 + 17)
        self.labels, self.flipped = flip_labels(labels, label_noise, RELATED_CLASSES, generator)
        order = torch.argsort(self.labels, stable=True)  # samples grouped by class
        self.pool = order
        self.rank = torch.empty_like(order)
        self.rank[order] = torch.arange(len(order))  # each sample's position in the pool
        counts = torch.bincount(self.labels, minlength=int(self.labels.max()) + 1)
        self.counts = counts
        self.offsets = torch.cumsum(counts, 0) - counts

    def partners(self, index: Tensor, step: int) -> Tensor:
        """Dataset indices of the partners of ``index`` at ``step`` (the anchor itself only in a class of one)."""
        index = index.cpu().long()
        generator = torch.Generator().manual_seed(self.seed * 1_000_003 + step + 1)
        label = self.labels[index]
        others = (self.counts[label] - 1).clamp(min=1)
        draw = (torch.rand(len(index), generator=generator) * others).long().clamp(max=others - 1)
        position = self.offsets[label] + draw
        alone = self.counts[label] == 1
        position = torch.where(alone | (position < self.rank[index]), position, position + 1)
        return self.pool[position]

    def images(self, index: Tensor, step: int) -> Tensor:
        return self.dataset.batch(self.partners(index, step))["image"]


def label_partners(config, dataset) -> LabelPartners | None:
    """The partner sampler ``config`` asks for (``positives``, ``label_noise``), or ``None`` for augmentations."""
    if config.positives not in POSITIVES:
        raise ConfigError(f"positives must be one of {', '.join(POSITIVES)}, got {config.positives!r}")
    if config.positives == "augmentation":
        if config.label_noise:
            raise ConfigError("label_noise applies to positives=label (the labels define the positive pairs)")
        return None
    if config.pipeline != "two_view":
        raise ConfigError("positives=label applies to pipeline=two_view")
    return LabelPartners(dataset, label_noise=config.label_noise, seed=config.seed)


@torch.no_grad()
def dcl_clamped_fraction(objective, a: Tensor, b: Tensor) -> float | None:
    """The fraction of anchors at DCL's floor ``e^{-1/t}`` for embeddings ``(a, b)``; ``None`` if not DCL.

    Recomputes DCL's bracket ``(mean_neg e^s - tau_plus e^{s+}) / (1 - tau_plus)`` for
    every anchor of both pairings (two views: 2B anchors over 2B - 2 negatives;
    cross: both directions over B - 1), without labels or extra positives.
    """
    if getattr(objective, "name", None) != "dcl" or getattr(objective, "clamp", "min") != "min":
        return None
    scale = 1.0 / float(objective.temperature())
    tau_plus = float(objective.tau_plus)
    a, b = a.detach().float(), b.detach().float()
    if objective.normalize:
        a, b = torch.nn.functional.normalize(a, dim=-1), torch.nn.functional.normalize(b, dim=-1)
    size = a.shape[0]
    if objective.pairing == "two_view":
        z = torch.cat([a, b])
        scores = z @ z.T * scale
        positive_column = torch.arange(2 * size, device=z.device).roll(size)
        excluded = torch.eye(2 * size, dtype=torch.bool, device=z.device)
        excluded[torch.arange(2 * size), positive_column] = True
        matrices = [(scores, excluded, positive_column)]
    else:
        scores = a @ b.T * scale
        diagonal = torch.eye(size, dtype=torch.bool, device=a.device)
        columns = torch.arange(size, device=a.device)
        matrices = [(scores, diagonal, columns), (scores.T, diagonal, columns)]
    clamped, anchors = 0, 0
    for matrix, excluded, positive_column in matrices:
        negatives = matrix.masked_fill(excluded, -math.inf)
        count = (~excluded).sum(1)
        log_negative_mean = torch.logsumexp(negatives, 1) - count.log()
        positive = matrix.gather(1, positive_column[:, None])[:, 0]
        shift = torch.maximum(log_negative_mean, positive)
        bracket = (torch.exp(log_negative_mean - shift) - tau_plus * torch.exp(positive - shift)) / (1 - tau_plus)
        clamped += int((bracket <= torch.exp(-scale - shift)).sum())
        anchors += len(bracket)
    return clamped / anchors
