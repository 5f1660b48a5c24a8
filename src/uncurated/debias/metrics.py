"""Fairness and robustness metrics of thesis Ch. 7.

- :func:`group_robustness`: worst-group accuracy, average accuracy and their
  gap, the accuracy form of the group-robustness gap (eq. 7.1) reported in
  Tables 7.2 to 7.4.
- :func:`max_skew_at_k`: MaxSkew@k (Geyik et al.) for retrieval (Table 7.5).
- :func:`parity_discrepancy`: the statistical-parity discrepancy (eq. 7.2) for
  generated images (Tables 7.7 and 7.8).
- :func:`mean_pair_distance`: the mean projected pair distance (Table 7.6).

Attributes and groups are integer ids; ``num_attributes`` gives ``|A|``
explicitly because attributes absent from a sample still count.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor

from ..validation import check_integer

__all__ = ["GroupAccuracy", "group_robustness", "max_skew_at_k", "mean_pair_distance", "parity_discrepancy"]


def _check_ids(name: str, ids: Tensor, length: int | None = None) -> None:
    if not isinstance(ids, Tensor) or ids.ndim != 1 or ids.is_floating_point() or ids.is_complex():
        got = tuple(ids.shape) if isinstance(ids, Tensor) else type(ids).__name__
        raise ValueError(f"{name} must be a 1-D integer tensor, got {got}")
    if length is not None and ids.shape[0] != length:
        raise ValueError(f"{name} must have length {length}, got {ids.shape[0]}")


def _attribute_fractions(attributes: Tensor, num_attributes: int) -> Tensor:
    """Fraction of entries equal to each attribute id, shape ``(|A|,)``, float64."""
    _check_ids("attributes", attributes)
    num_attributes = check_integer("num_attributes", num_attributes, 2)
    if attributes.numel() == 0:
        raise ValueError("attributes must not be empty")
    if int(attributes.min()) < 0 or int(attributes.max()) >= num_attributes:
        raise ValueError(
            f"attributes must be ids in [0, {num_attributes - 1}] (num_attributes={num_attributes}), "
            f"got values in [{int(attributes.min())}, {int(attributes.max())}]"
        )
    counts = torch.bincount(attributes.long(), minlength=num_attributes)
    return counts.double() / attributes.numel()


@dataclass(frozen=True)
class GroupAccuracy:
    """Accuracies for one classifier over the groups ``G = Y x A`` (eq. 7.1).

    ``average`` is the accuracy over all samples, ``E_P`` in eq. 7.1, not the
    unweighted mean of the group accuracies. ``gap = average - worst_group``.
    ``per_group`` maps each group id present to its accuracy.
    """

    worst_group: float
    average: float
    gap: float
    per_group: dict[int, float]


def group_robustness(predictions: Tensor, labels: Tensor, groups: Tensor) -> GroupAccuracy:
    """Worst-group accuracy, average accuracy and their gap (eq. 7.1 with the 0-1 loss).

    Eq. 7.1 is ``max_g E_{P_g}[loss] - E_P[loss]``; with the 0-1 loss that is
    the average accuracy minus the worst-group accuracy, the "Gap" column of
    Table 7.2. ``predictions``, ``labels`` and ``groups`` are 1-D integer
    tensors of one length; ``groups`` holds one id per sample (for example
    ``label * |A| + attribute``). Only groups with samples are considered.
    """
    _check_ids("predictions", predictions)
    _check_ids("labels", labels, predictions.shape[0])
    _check_ids("groups", groups, predictions.shape[0])
    if predictions.numel() == 0:
        raise ValueError("predictions must not be empty")
    correct = (predictions == labels).double()
    per_group = {int(g): float(correct[groups == g].mean()) for g in torch.unique(groups)}
    worst = min(per_group.values())
    average = float(correct.mean())
    return GroupAccuracy(worst_group=worst, average=average, gap=average - worst, per_group=per_group)


def max_skew_at_k(attributes_of_top_k: Tensor, num_attributes: int) -> float:
    """MaxSkew@k of Geyik et al. (Section 7.3, Table 7.5): ``max_a log(r_{a,k} / (1/|A|))``.

    ``attributes_of_top_k`` holds the attribute id of each of the ``k`` top
    retrieved items; ``r_{a,k}`` is the fraction with attribute ``a``. The value
    is 0 for a balanced top-k and ``log |A|`` when one attribute fills it;
    smaller is fairer.
    """
    fractions = _attribute_fractions(attributes_of_top_k, num_attributes)
    return math.log(float(fractions.max()) * num_attributes)


def parity_discrepancy(attributes: Tensor, num_attributes: int) -> float:
    """Statistical-parity discrepancy (eq. 7.2): ``sqrt(sum_a (E[1{h(x) = a}] - 1/|A|)^2)``.

    ``attributes`` holds the predicted attribute ``h(x)`` of each generated
    image. The value is 0 when the attributes are uniform and
    ``sqrt(1 - 1/|A|)``, its maximum, when only one attribute appears.
    """
    fractions = _attribute_fractions(attributes, num_attributes)
    return float(torch.linalg.vector_norm(fractions - 1.0 / num_attributes))


def mean_pair_distance(P: Tensor, z_i: Tensor, z_j: Tensor) -> float:
    """Mean projected pair distance ``1/|S| sum_{(i,j) in S} ||P z_i - P z_j||`` (Table 7.6).

    ``P`` is ``(d, d)``; ``z_i`` and ``z_j`` are ``(|S|, d)``, one pair per row.
    Pass the identity for the distance before debiasing.
    """
    if not isinstance(P, Tensor) or P.ndim != 2 or P.shape[0] != P.shape[1]:
        got = tuple(P.shape) if isinstance(P, Tensor) else type(P).__name__
        raise ValueError(f"P must be a square (dim, dim) tensor, got {got}")
    for name, z in (("z_i", z_i), ("z_j", z_j)):
        if not isinstance(z, Tensor) or z.ndim != 2 or z.shape[1] != P.shape[0]:
            got = tuple(z.shape) if isinstance(z, Tensor) else type(z).__name__
            raise ValueError(f"{name} must have shape (pairs, {P.shape[0]}) to match P, got {got}")
    if z_i.shape != z_j.shape:
        raise ValueError(f"z_i and z_j must have the same shape, got {tuple(z_i.shape)} and {tuple(z_j.shape)}")
    if z_i.shape[0] == 0:
        raise ValueError("the pair set S is empty: z_i and z_j must have at least one row")
    return float(torch.linalg.vector_norm((z_i - z_j) @ P.T.to(z_i.dtype), dim=1).mean())
