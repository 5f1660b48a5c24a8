"""The bounds of Nozawa & Sato 2021 on the contrastive loss, measured on features.

With ``K`` negatives an InfoNCE anchor sees ``K + 1`` latent classes. The
paper lower-bounds the contrastive loss ``L_Info`` by supervised losses of
the mean classifier (Secs. 3-5, Def. 3-4):

- Eq. 8 (Prop. 6, the CURL-style bound)::

      L_Info >= (1 - tau_K) E[L_sub(f, C_sub) | Col = 0]
                + tau_K E[ln(Col + 1) | Col != 0] + d(f)

- Eq. 10 (Thm. 8, the proposed bound)::

      L_Info >= 1/2 { v_{K+1} E[L_sub(f, C) | C_sub = C]
                      + (1 - v_{K+1}) E[L_sub(f, C_sub) | C_sub != C]
                      + E[ln(Col + 1)] } + d(f)

where ``Col`` counts the negatives sharing the anchor's class, ``C_sub`` is
the set of distinct classes among anchor and negatives, ``L_sub`` is the mean
classifier's cross-entropy restricted to a class subset (Eq. 16, logits
``z . mu_j / t``) and ``d(f)`` is the gap between class means and the
sample's augmentation mean (Eq. 7, 15).

:func:`bound_terms` follows the paper's procedure (section 1.10, and the
authors' code, section 7): class means ``mu_c`` over several augmentations of
the training set; the validation set shuffled each epoch and cut into
disjoint groups of ``K + 1`` (remainder dropped); each member an anchor
(its first view ``z``) against the group's second views (its own is the
positive, the others its ``K`` negatives). Every term is reported *with its
coefficient*, as in the paper's tables, so that the identities

    bound(10) = sup + sub + collision / 2 + d
    bound(8)  = collision + sup_curl + sub_curl + d

hold exactly. ``d(f)`` keeps only the negative part of
``z . (mu_c - mu(x)) / t`` per anchor: App. D.1 drops the gap where it is
non-negative, and the positive part is not a valid lower bound there.

:func:`supervised_loss_upper_bounds` rearranges both bounds into upper bounds
on the supervised loss (section 1.8, Fig. 1): the CURL one divides by
``1 - tau_K`` and explodes as K grows; the proposed one divides by
``v_{K+1}`` and does not. Where the realised ``v`` (or ``1 - tau``) is 0,
the theoretical value from :mod:`.coupon` is used instead, as the paper does.
:func:`collision_bound` is the within-class spread of Eq. 27 (Cor. 9).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import torch
from torch import Tensor

from ..validation import check_integer, check_range
from .coupon import collision_probability, coverage_probability


@dataclass(frozen=True)
class BoundTerms:
    """Every row of the paper's Tables 1, 4-6 for one ``K``, coefficients included.

    Attributes:
        negatives: ``K``.
        anchors: anchors averaged over (``epochs x groups x (K + 1)``).
        tau: realised fraction of anchors with a same-class negative.
        v: realised fraction of anchors whose group covers every class.
        info_nce: ``L_Info``, InfoNCE of each anchor against its group (Eq. 2).
        gap: ``d(f)`` (Eq. 7), truncated at 0 per anchor.
        collision_curl: ``E[ln(Col + 1)]`` (the paper's dagger Collision).
        sup_curl, sub_curl: the Col = 0 sub-class loss of Eq. 8, split into
            anchors of covering groups and the rest, each ``/ anchors``.
        bound_curl: Eq. 8, ``collision_curl + sup_curl + sub_curl + gap``.
        sup, sub: the two mean-classifier terms of Eq. 10 with their 1/2.
        bound: Eq. 10, ``sup + sub + collision_curl / 2 + gap``.
        supervised_loss: the mean classifier's full cross-entropy ``L^mu_sup``
            over every anchor (what the upper bounds bound).
        mean_accuracy: the mean classifier's top-1 accuracy on the anchors.
        upper_curl, upper: the supervised-loss upper bounds from Eq. 8 and
            Eq. 10 (section 1.8); ``upper_curl`` may be astronomically large.
    """

    negatives: int
    anchors: int
    tau: float
    v: float
    info_nce: float
    gap: float
    collision_curl: float
    sup_curl: float
    sub_curl: float
    bound_curl: float
    sup: float
    sub: float
    bound: float
    supervised_loss: float
    mean_accuracy: float
    upper_curl: float
    upper: float

    def as_dict(self) -> dict[str, float]:
        return asdict(self)


def subclass_loss(z: Tensor, labels: Tensor, means: Tensor, subset: Tensor, temperature: float) -> Tensor:
    """Eq. 16 per anchor: ``-log softmax`` of ``z . mu_c / t`` over the classes where ``subset`` is true.

    Args:
        z: (..., d) anchors; labels: (...) their classes, which must be in their subset.
        means: (C, d) class means; subset: (..., C) boolean, the classes each anchor competes with.
    """
    logits = z @ means.T / temperature
    own = logits.gather(-1, labels.unsqueeze(-1)).squeeze(-1)
    return torch.logsumexp(logits.masked_fill(~subset, -math.inf), dim=-1) - own


def bound_terms(
    views: Tensor,
    labels: Tensor,
    means: Tensor,
    negatives: int,
    *,
    temperature: float = 0.5,
    epochs: int = 10,
    seed: int = 0,
) -> BoundTerms:
    """Both bounds' terms for ``negatives = K`` on labelled validation features (see the module).

    Args:
        views: (N, A, d) L2-normalized embeddings of ``A >= 2`` augmentations
            of each validation sample: view 0 is the anchor, view 1 the
            positive and negative candidate, the mean of all ``A`` is ``mu(x)``.
        labels: (N,) validation classes in ``0 .. C - 1``.
        means: (C, d) class means from the training set
            (:func:`uncurated.evaluate.class_means` of its views, ``normalize=False``).
        negatives: ``K >= 1``; needs ``N >= K + 1``.
        temperature: ``t`` of the InfoNCE and mean-classifier logits.
        epochs: reshuffles of the validation set (the paper uses 10).
        seed: seed of the shuffles.
    """
    classes = means.shape[0] if means.ndim == 2 else 0
    _check_views("views", views, labels, minimum_views=2)
    if means.ndim != 2 or means.shape[1] != views.shape[-1] or classes < 2:
        raise ValueError(f"means must have shape (C >= 2, {views.shape[-1]}), got {tuple(means.shape)}")
    _check_labels(labels, classes)
    means = means.to(views.dtype)
    absent = (torch.bincount(labels, minlength=classes) == 0).nonzero().flatten().tolist()
    if absent:
        raise ValueError(f"labels: classes {absent} never occur, so no group can cover every class")
    negatives = check_integer("negatives", negatives, 1)
    group = negatives + 1
    if group > len(labels):
        raise ValueError(
            f"negatives must be at most {len(labels) - 1} (the validation samples minus 1), got {negatives}"
        )
    check_range("temperature", temperature, low=0.0, low_open=True)
    epochs = check_integer("epochs", epochs, 1)

    generator = torch.Generator().manual_seed(seed)
    groups_per_epoch = len(labels) // group
    totals = torch.zeros(len(_SUMS), dtype=torch.float64)
    for _ in range(epochs):
        order = torch.randperm(len(labels), generator=generator)[: groups_per_epoch * group].to(labels.device)
        totals += _group_sums(
            views[order].view(groups_per_epoch, group, *views.shape[1:]),
            labels[order].view(groups_per_epoch, group),
            means,
            temperature,
        )
    anchors = epochs * groups_per_epoch * group
    mean = dict(zip(_SUMS, (totals / anchors).tolist(), strict=True))
    return _terms(mean, negatives, anchors, torch.bincount(labels, minlength=classes).double() / len(labels))


#: The per-anchor quantities :func:`_group_sums` adds up, in order.
_SUMS = (
    "info_nce",
    "gap",
    "collision",
    "collided",
    "covered",
    "sup",
    "sub",
    "sup_curl",
    "sub_curl",
    "supervised_loss",
    "correct",
)


def _group_sums(views: Tensor, labels: Tensor, means: Tensor, temperature: float) -> Tensor:
    """Sums over the anchors of (G, K + 1) groups of every quantity in ``_SUMS``."""
    classes = means.shape[0]
    anchors, candidates = views[:, :, 0], views[:, :, 1]
    logits = anchors @ candidates.transpose(1, 2) / temperature
    info_nce = torch.logsumexp(logits, dim=-1) - logits.diagonal(dim1=1, dim2=2)

    counts = torch.nn.functional.one_hot(labels, classes).sum(dim=1)  # (G, C)
    multiplicity = counts.gather(1, labels)  # Col + 1 of each anchor
    present = (counts > 0)[:, None, :].expand(-1, labels.shape[1], -1)
    covered = present.all(dim=-1)
    unique = multiplicity == 1
    present_loss = subclass_loss(anchors, labels, means, present, temperature)
    full_loss = subclass_loss(anchors, labels, means, torch.ones_like(present), temperature)
    full_logits = anchors @ means.T
    gap = ((anchors * (means[labels] - views.mean(dim=2))).sum(-1) / temperature).clamp(max=0.0)

    values = (
        info_nce,
        gap,
        multiplicity.to(views.dtype).log(),
        (~unique).to(views.dtype),
        covered.to(views.dtype),
        0.5 * full_loss * covered,
        0.5 * present_loss * ~covered,
        present_loss * (unique & covered),
        present_loss * (unique & ~covered),
        full_loss,
        (full_logits.argmax(-1) == labels).to(views.dtype),
    )
    return torch.stack([value.sum().double().cpu() for value in values])


def _terms(mean: dict[str, float], negatives: int, anchors: int, frequencies: Tensor) -> BoundTerms:
    collision, gap = mean["collision"], mean["gap"]
    bound = mean["sup"] + mean["sub"] + collision / 2 + gap
    bound_curl = collision + mean["sup_curl"] + mean["sub_curl"] + gap
    rho = frequencies[frequencies > 0].numpy()
    v = mean["covered"] or float(coverage_probability(negatives + 1, frequencies=rho))
    unique = (1 - mean["collided"]) or 1 - float(collision_probability(negatives, frequencies=rho))
    upper, upper_curl = supervised_loss_upper_bounds(
        info_nce=mean["info_nce"],
        gap=gap,
        collision_curl=collision,
        sub=mean["sub"],
        v=v,
        sub_curl=mean["sub_curl"],
        tau=1 - unique,
    )
    return BoundTerms(
        negatives=negatives,
        anchors=anchors,
        tau=mean["collided"],
        v=mean["covered"],
        info_nce=mean["info_nce"],
        gap=gap,
        collision_curl=collision,
        sup_curl=mean["sup_curl"],
        sub_curl=mean["sub_curl"],
        bound_curl=bound_curl,
        sup=mean["sup"],
        sub=mean["sub"],
        bound=bound,
        supervised_loss=mean["supervised_loss"],
        mean_accuracy=mean["correct"],
        upper_curl=upper_curl,
        upper=upper,
    )


def supervised_loss_upper_bounds(
    *, info_nce: float, gap: float, collision_curl: float, sub: float, v: float, sub_curl: float, tau: float
) -> tuple[float, float]:
    """Upper bounds on ``L^mu_sup`` rearranged from Eq. 10 and Eq. 8 (Fig. 1): ``(proposed, curl)``.

    ``(2 (L_Info - d) - 2 sub - collision) / v`` and
    ``(L_Info - d - collision - sub_curl) / (1 - tau)``, with every term as
    the tables print it (coefficients included). A bound whose denominator
    is 0 (``v = 0``: no group can cover every class; ``tau = 1``) says
    nothing and is reported as infinite.
    """
    check_range("v", v, low=0.0, high=1.0)
    check_range("tau", tau, low=0.0, high=1.0)
    proposed = _ratio(2 * (info_nce - gap) - 2 * sub - collision_curl, v)
    curl = _ratio(info_nce - gap - collision_curl - sub_curl, 1 - tau)
    return proposed, curl


def _ratio(numerator: float, denominator: float) -> float:
    return numerator / denominator if denominator > 0 else math.copysign(math.inf, numerator)


def collision_bound(first: Tensor, second: Tensor, labels: Tensor, *, chunk: int = 1024) -> float:
    """Eq. 27: ``1/N sum_i 1/N_{y_i} sum_{j != i, y_j = y_i} |z_i . (z_j - z_i^+)|``.

    ``first`` and ``second`` are (N, d) L2-normalized embeddings of two
    augmentations of the same training samples (``z_i`` and ``z_i^+``). The
    normalizer is ``N_{y_i}`` although there are ``N_{y_i} - 1`` terms, as
    the paper prints it (Cor. 9, Eq. 11).
    """
    if first.shape != second.shape or first.ndim != 2:
        raise ValueError(
            f"first and second must be (N, d) of one shape, got {tuple(first.shape)}, {tuple(second.shape)}"
        )
    if labels.shape != (first.shape[0],):
        raise ValueError(f"labels must have shape ({first.shape[0]},), got {tuple(labels.shape)}")
    total = 0.0
    for label in labels.unique():
        members = (labels == label).nonzero().flatten()
        z, positive = first[members], second[members]
        own = (z * positive).sum(-1)
        for start in range(0, len(members), chunk):
            rows = slice(start, start + chunk)
            spread = (z[rows] @ z.T - own[rows, None]).abs()
            spread[torch.arange(spread.shape[0]), torch.arange(start, start + spread.shape[0])] = 0.0
            total += float(spread.sum()) / len(members)
    return total / len(labels)


def _check_views(name: str, views: Tensor, labels: Tensor, *, minimum_views: int) -> None:
    if not isinstance(views, Tensor) or views.ndim != 3 or views.shape[1] < minimum_views:
        raise ValueError(
            f"{name} must be a tensor of shape (N, A >= {minimum_views}, d), got "
            f"{tuple(views.shape) if isinstance(views, Tensor) else type(views).__name__}"
        )
    if not isinstance(labels, Tensor) or labels.shape != (views.shape[0],):
        raise ValueError(f"labels must have shape ({views.shape[0]},) to match {name}")
    if not torch.isfinite(views).all():
        raise ValueError(f"{name} must be finite")


def _check_labels(labels: Tensor, classes: int) -> None:
    if labels.dtype not in (torch.int32, torch.int64) or labels.numel() == 0:
        raise ValueError("labels must be a non-empty integer tensor")
    if labels.min() < 0 or labels.max() >= classes:
        raise ValueError(f"labels must lie in 0 .. {classes - 1}, got {int(labels.min())} .. {int(labels.max())}")
