"""Labelled feature matrices: their checks, and the mean representation of each class.

Labels are class indices ``0 .. K-1``. :func:`class_means` gives Nozawa & Sato 2021's ``mu_c`` (Def. 3-4), which
both the mean classifier (:mod:`uncurated.evaluate.mean_classifier`) and the coupon-collector bound
(:mod:`uncurated.theory.bound_report`) read, so it and the checks it makes sit below the evaluation and the theory.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from .validation import check_integer


def check_feature_matrix(name: str, features: Tensor, *, dim: int | None = None, dim_of: str = "") -> None:
    """A finite floating-point (rows, dim) tensor with at least one row; ``dim`` pins the width."""
    if not isinstance(features, Tensor):
        raise ValueError(f"{name} must be a torch.Tensor of shape (rows, dim), got {type(features).__name__}")
    if features.ndim != 2 or features.shape[0] == 0 or features.shape[1] == 0:
        raise ValueError(f"{name} must have shape (rows, dim) with rows, dim >= 1, got {tuple(features.shape)}")
    if not features.is_floating_point():
        raise ValueError(f"{name} must be a floating-point tensor, got dtype {features.dtype}")
    if dim is not None and features.shape[1] != dim:
        raise ValueError(f"{name} must have {dim} columns like {dim_of}, got {features.shape[1]}")
    if not bool(torch.isfinite(features).all()):
        raise ValueError(f"{name} contains non-finite values (NaN or inf)")


def check_class_labels(name: str, labels: Tensor, rows: int, *, num_classes: int | None = None) -> None:
    """An integer (rows,) tensor of indices ``>= 0`` (and ``< num_classes`` when given): labels, image ids."""
    integer = isinstance(labels, Tensor) and not (labels.is_floating_point() or labels.is_complex())
    if not integer or labels.dtype == torch.bool:
        raise ValueError(f"{name} must be an integer tensor of indices, got {labels!r:.80}")
    if labels.shape != (rows,):
        raise ValueError(f"{name} must have shape ({rows},) (one per feature row), got {tuple(labels.shape)}")
    if bool((labels < 0).any()) or (num_classes is not None and bool((labels >= num_classes).any())):
        accepted = "[0, inf)" if num_classes is None else f"[0, {num_classes - 1}]"
        raise ValueError(
            f"{name} must hold indices in {accepted}, got values in [{int(labels.min())}, {int(labels.max())}]"
        )


def count_classes(*labels: Tensor) -> int:
    """``K``: one more than the largest class index in any of ``labels``."""
    return 1 + max(int(values.max()) for values in labels)


def class_means(features: Tensor, labels: Tensor, num_classes: int | None = None, *, normalize: bool = True) -> Tensor:
    """(K, d) float64 ``mu_y``: the mean of the rows of each class ``0 .. K-1``, each L2-normalized first.

    ``features`` are (N, d) rows, or (N, A, d): ``A`` views of each row (Nozawa &
    Sato's augmentations, whose mean over samples and views is its ``mu_c``),
    every view counting as a row. ``normalize=False`` averages the rows as
    they are (already normalized views). ``K`` defaults to one more than the
    largest label; every class must have a row.
    """
    views = 1
    if isinstance(features, Tensor) and features.ndim == 3:
        views, features = features.shape[1], features.flatten(0, 1)
    check_feature_matrix("features", features)
    check_class_labels("labels", labels, features.shape[0] // views)
    num_classes = count_classes(labels) if num_classes is None else check_integer("num_classes", num_classes, 1)
    check_class_labels("labels", labels, labels.shape[0], num_classes=num_classes)
    return means_of_classes(features, labels.repeat_interleave(views), num_classes, "labels", normalize=normalize)


def means_of_classes(
    features: Tensor, labels: Tensor, num_classes: int, name: str, *, normalize: bool = True
) -> Tensor:
    """:func:`class_means` of checked ``features`` with one label of ``0 .. num_classes - 1`` per row (a class
    without rows is refused, naming the labels' argument ``name``)."""
    labels = labels.long().to(features.device)
    counts = torch.bincount(labels, minlength=num_classes)
    missing = torch.nonzero(counts == 0).flatten().tolist()
    if missing:
        raise ValueError(
            f"{name} must contain every class in [0, {num_classes - 1}] to form its mean; "
            f"classes {missing} have no samples"
        )
    z = F.normalize(features.double(), dim=1) if normalize else features.double()
    sums = torch.zeros(num_classes, z.shape[1], dtype=z.dtype, device=z.device).index_add_(0, labels, z)
    return sums / counts[:, None].double()
