"""Accuracy summaries and input checks shared by the classifiers of :mod:`uncurated.evaluate`.

The checks of labelled feature matrices live in :mod:`uncurated.classes`, below the evaluation and the theory.

Labels are class indices ``0 .. K-1``. A classifier reports top-1 accuracy,
the accuracy of each class (``nan`` for a class absent from the scored
labels) and their mean over the classes present, which weights rare classes
like common ones.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from ..classes import check_class_labels, check_feature_matrix, count_classes


@dataclass(frozen=True)
class ClassificationResult:
    """Top-1 accuracy, the mean of the per-class accuracies and the per-class accuracies (index = class)."""

    accuracy: float
    mean_per_class_accuracy: float
    per_class_accuracy: tuple[float, ...]


def classification_result(predictions: Tensor, labels: Tensor, num_classes: int) -> ClassificationResult:
    """Score ``predictions`` against ``labels``; ``per_class_accuracy`` has ``num_classes`` entries."""
    per_class = _per_class_accuracy(predictions, labels, num_classes)
    accuracy = float((predictions == labels).double().mean())
    return ClassificationResult(accuracy, _nanmean(per_class), tuple(per_class))


def mean_per_class_accuracy(predictions: Tensor | np.ndarray, labels: Tensor | np.ndarray) -> float:
    """The accuracy of each class present in ``labels``, averaged over those classes."""
    predictions, labels = torch.as_tensor(predictions), torch.as_tensor(labels)
    if predictions.shape != labels.shape or labels.ndim != 1 or labels.numel() == 0:
        raise ValueError(
            f"predictions and labels must be non-empty 1-D arrays of the same length, "
            f"got shapes {tuple(predictions.shape)} and {tuple(labels.shape)}"
        )
    classes, codes = torch.unique(labels, return_inverse=True)
    correct = (predictions == labels).double()
    hits = torch.zeros(len(classes), dtype=torch.float64).index_add_(0, codes, correct)
    counts = torch.bincount(codes, minlength=len(classes)).double()
    return float((hits / counts).mean())


def _per_class_accuracy(predictions: Tensor, labels: Tensor, num_classes: int) -> list[float]:
    correct = (predictions == labels).double().cpu()
    labels = labels.cpu()
    counts = torch.bincount(labels, minlength=num_classes).double()
    hits = torch.bincount(labels, weights=correct, minlength=num_classes)
    return [float(h / c) if c > 0 else math.nan for h, c in zip(hits.tolist(), counts.tolist(), strict=True)]


def _nanmean(values: list[float]) -> float:
    present = [v for v in values if not math.isnan(v)]
    return sum(present) / len(present)


def check_train_test(train_features: Tensor, train_labels: Tensor, test_features: Tensor, test_labels: Tensor) -> int:
    """Check a train/test split of features and their labels; return the number of classes ``K``."""
    check_feature_matrix("train_features", train_features)
    check_feature_matrix("test_features", test_features, dim=train_features.shape[1], dim_of="train_features")
    check_class_labels("train_labels", train_labels, train_features.shape[0])
    check_class_labels("test_labels", test_labels, test_features.shape[0])
    return count_classes(train_labels, test_labels)
