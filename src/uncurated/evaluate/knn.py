"""Weighted cosine k-nearest-neighbour classifier (Wu et al. 2018, InstDisc; the protocol DINO reports).

Train and test features are L2-normalized. Each test row takes its ``k``
training rows of highest cosine similarity ``s_i``; neighbour ``i`` votes for
its label with weight ``exp(s_i / T)`` and the class with the largest total
wins (the lowest class index on an exact tie). The weights of a row are
computed as ``exp((s_i - s_max) / T)``, which scales them all by one factor
and leaves the vote unchanged while avoiding overflow at small ``T``. Test
rows are processed ``chunk_size`` at a time, so memory grows with
``chunk_size x n_train``, not ``n_test x n_train``.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor

from ..validation import check_integer, check_range
from .classification import (
    ClassificationResult,
    check_class_labels,
    check_feature_matrix,
    check_train_test,
    classification_result,
    count_classes,
)

__all__ = ["knn_classifier", "knn_predict"]

#: The number of neighbours that vote, and the temperature of their weights ``exp(cos / t)``.
DEFAULT_K = 20
DEFAULT_TEMPERATURE = 0.07


@torch.no_grad()
def knn_predict(
    train_features: Tensor,
    train_labels: Tensor,
    test_features: Tensor,
    *,
    k: int = DEFAULT_K,
    temperature: float = DEFAULT_TEMPERATURE,
    chunk_size: int = 256,
) -> Tensor:
    """(m,) predicted class indices of the test rows (see the module's documentation for the vote)."""
    check_feature_matrix("train_features", train_features)
    check_feature_matrix("test_features", test_features, dim=train_features.shape[1], dim_of="train_features")
    check_class_labels("train_labels", train_labels, train_features.shape[0])
    return _predict(train_features, train_labels, test_features, k, temperature, chunk_size)


def knn_classifier(
    train_features: Tensor,
    train_labels: Tensor,
    test_features: Tensor,
    test_labels: Tensor,
    *,
    k: int = DEFAULT_K,
    temperature: float = DEFAULT_TEMPERATURE,
    chunk_size: int = 256,
) -> ClassificationResult:
    """Classify the test rows by their weighted cosine neighbours among the training rows and score them.

    Args:
        train_features, test_features: (n, d) and (m, d) features.
        train_labels, test_labels: their class indices.
        k: neighbours per test row, in ``[1, n]``.
        temperature: ``T > 0`` of the ``exp(s / T)`` vote weights.
        chunk_size: test rows scored at once.
    """
    num_classes = check_train_test(train_features, train_labels, test_features, test_labels)
    predictions = _predict(train_features, train_labels, test_features, k, temperature, chunk_size)
    return classification_result(predictions.cpu(), test_labels.cpu(), num_classes)


@torch.no_grad()
def _predict(
    train_features: Tensor, train_labels: Tensor, test_features: Tensor, k: int, temperature: float, chunk_size: int
) -> Tensor:
    k = check_integer("k", k, 1)
    if k > train_features.shape[0]:
        raise ValueError(f"k must be in [1, {train_features.shape[0]}] (the number of training rows), got {k}")
    temperature = check_range("temperature", temperature, 0, math.inf, low_open=True, high_open=True)
    chunk_size = check_integer("chunk_size", chunk_size, 1)
    train = F.normalize(train_features.double(), dim=1)
    test = F.normalize(test_features.double().to(train.device), dim=1)
    labels = train_labels.long().to(train.device)
    num_classes = count_classes(labels)
    predictions = []
    for chunk in test.split(chunk_size):
        similarities, neighbours = (chunk @ train.T).topk(k, dim=1)
        weights = ((similarities - similarities[:, :1]) / temperature).exp()
        votes = torch.zeros(len(chunk), num_classes, dtype=weights.dtype, device=weights.device)
        predictions.append(votes.scatter_add_(1, labels[neighbours], weights).argmax(dim=1))
    return torch.cat(predictions)
