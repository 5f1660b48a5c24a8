"""Label-aware training options of the two-view loop.

* ``positives=label`` (thesis Sec. 5.3.1, Fig. 5-3): the second view of each
  image is an augmentation of a *random other* training image with the same
  label, so the positive pair is defined by the labels. ``label_noise=eta``
  first flips each training label to a related class with probability
  ``eta / 2`` (:func:`uncurated.data.flip_labels` with
  :data:`~uncurated.data.fashion_mnist.RELATED_CLASSES`), so noisy labels
  make noisy positive pairs. :class:`LabelPartners` draws the partners; its
  draws depend on ``(seed, step)`` and the row of the global batch only, so
  a resumed run draws what an uninterrupted one would, and processes sharing
  a batch under ``torchrun`` draw what one process would (each takes its
  rows' numbers of the batch's draw, not the same first ones).
* ``oracle_negatives=true``: the trainer passes the batch's true labels to
  the objective (``labels=``), which leaves same-label samples out of the
  negatives (the supervised oracle of thesis Figs. 3-3 and 4-2).
"""

from __future__ import annotations

import torch
from torch import Tensor

from ..data import RELATED_CLASSES, flip_labels
from .config import ConfigError


class LabelPartners:
    """For each anchor, a random other training sample with the same (possibly noisy) label."""

    def __init__(self, dataset, *, label_noise: float = 0.0, seed: int = 0) -> None:
        labels = getattr(dataset, "labels", None)
        if not hasattr(dataset, "batch") or labels is None or bool((labels < 0).any()):
            raise ConfigError(
                "positives=label needs an in-memory labelled dataset (fashion-mnist, fashion-clutter, mnist, digits)"
            )
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

    def partners(self, index: Tensor, step: int, rows: slice | None = None) -> Tensor:
        """Dataset indices of the partners of ``index`` at ``step`` (the anchor itself only in a class of one).

        ``rows``: the rows of the step's global batch that ``index`` holds (``slice(start, stop)``, this process's
        share under ``torchrun``; default: the whole batch), whose numbers of the batch's draw it takes.
        """
        index = index.cpu().long()
        rows = slice(0, len(index)) if rows is None else rows
        generator = torch.Generator().manual_seed(self.seed * 1_000_003 + step + 1)
        label = self.labels[index]
        others = (self.counts[label] - 1).clamp(min=1)
        draw = (torch.rand(rows.stop, generator=generator)[rows] * others).long().clamp(max=others - 1)
        position = self.offsets[label] + draw
        alone = self.counts[label] == 1
        position = torch.where(alone | (position < self.rank[index]), position, position + 1)
        return self.pool[position]

    def images(self, index: Tensor, step: int, rows: slice | None = None) -> Tensor:
        return self.dataset.batch(self.partners(index, step, rows))["image"]


def label_partners(config, dataset) -> LabelPartners | None:
    """The partner sampler ``config`` asks for (``positives``, ``label_noise``), or ``None`` for augmentations."""
    if config.positives == "augmentation":
        if config.label_noise:
            raise ConfigError("label_noise applies to positives=label (the labels define the positive pairs)")
        return None
    if config.pipeline != "two_view":
        raise ConfigError("positives=label applies to pipeline=two_view")
    return LabelPartners(dataset, label_noise=config.label_noise, seed=config.seed)
