"""Simulating what makes web data uncurated, on any labelled dataset.

Three kinds of damage, each a function of the labels and a generator, so
that any dataset can build on them (:class:`~uncurated.data.captions.FashionCaptions` does):

* a long-tailed class distribution (:func:`long_tail_indices`);
* pairs whose text describes another class, false positives
  (:func:`choose_fraction` and :func:`other_classes`);
* exact copies of another pair's text (:func:`choose_fraction` and :func:`draw_same_class`).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

from ..validation import check_range


def long_tail_indices(labels: Tensor, ratio: float, generator: torch.Generator | None = None) -> Tensor:
    """The sorted positions of a long-tailed subsample of a labelled dataset.

    The classes present, in the order of their labels ``k = 0..K-1``, keep
    ``round(n_max * ratio ** (-k / (K - 1)))`` samples each, at least one,
    drawn at random, where ``n_max`` is the size of the smallest class. The
    first class is the largest, the last has ``n_max / ratio``; ``ratio = 1``
    keeps ``n_max`` of every class (a balanced dataset is left whole).

    Args:
        labels: (N,) integer labels.
        ratio: the imbalance ratio, the size of the largest class over that
            of the smallest, >= 1.
        generator: the random stream of the draws.
    """
    ratio = check_range("imbalance_ratio", ratio, 1.0)
    classes, counts = torch.unique(labels, return_counts=True)
    n_max = int(counts.min())
    exponents = torch.arange(len(classes), dtype=torch.float64) / max(len(classes) - 1, 1)
    targets = (n_max * ratio ** (-exponents)).round().clamp(min=1).long()
    kept = []
    for label, target in zip(classes.tolist(), targets.tolist(), strict=True):
        members = (labels == label).nonzero().squeeze(1)
        kept.append(members[torch.randperm(len(members), generator=generator)[:target]])
    return torch.cat(kept).sort().values


def choose_fraction(
    count: int, fraction: float, generator: torch.Generator | None = None, *, among: Tensor | None = None
) -> Tensor:
    """A (count,) boolean mask with exactly ``round(fraction * count)`` positions set, drawn at random.

    ``among`` (a (count,) boolean mask) restricts the draw to its positions;
    it must hold enough of them.
    """
    chosen_count = round(fraction * count)
    candidates = torch.arange(count) if among is None else among.nonzero().squeeze(1)
    if chosen_count > len(candidates):
        raise ValueError(f"cannot choose {chosen_count} of {count} samples among {len(candidates)} candidates")
    mask = torch.zeros(count, dtype=torch.bool)
    mask[candidates[torch.randperm(len(candidates), generator=generator)[:chosen_count]]] = True
    return mask


def other_classes(
    labels: Tensor,
    num_classes: int,
    generator: torch.Generator | None = None,
    *,
    groups: Sequence[Sequence[int]] = (),
) -> Tensor:
    """For each label, another class drawn at random.

    A label that belongs to one of ``groups`` (e.g. classes that look alike)
    gets another member of its group; any other label gets any other class,
    uniformly.
    """
    group_of = {member: tuple(group) for group in groups for member in group}
    drawn = torch.empty_like(labels)
    for label in labels.unique().tolist():
        choices = [other for other in group_of.get(label, range(num_classes)) if other != label]
        if not choices:
            raise ValueError(f"class {label} has no other class to draw from")
        where = labels == label
        picks = torch.randint(len(choices), (int(where.sum()),), generator=generator)
        drawn[where] = torch.tensor(choices, dtype=labels.dtype)[picks]
    return drawn


def draw_same_class(pool: Tensor, labels: Tensor, wanted: Tensor, generator: torch.Generator | None = None) -> Tensor:
    """For each class in ``wanted``, a position of ``pool`` whose label is that class, drawn uniformly.

    Args:
        pool: the candidate positions, a 1-D LongTensor.
        labels: the labels of all positions.
        wanted: the class of each draw.

    Raises ``ValueError`` if a wanted class has no position in the pool.
    """
    pool_labels = labels[pool]
    every_label = torch.cat([labels, wanted])
    num_classes = int(every_label.max()) + 1 if len(every_label) else 1
    counts = torch.bincount(pool_labels, minlength=num_classes)
    if len(wanted) and bool((counts[wanted] == 0).any()):
        empty = sorted(set(wanted[counts[wanted] == 0].tolist()))
        raise ValueError(f"no sample of class {empty} is left to draw from")
    by_class = pool[torch.argsort(pool_labels, stable=True)]
    starts = torch.cumsum(counts, 0) - counts
    offsets = (torch.rand(len(wanted), generator=generator, dtype=torch.float64) * counts[wanted]).long()
    return by_class[starts[wanted] + torch.minimum(offsets, counts[wanted] - 1)]
