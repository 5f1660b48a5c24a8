"""The mean (class-centroid) classifier of Nozawa & Sato 2021 (Def. 3-4; Snell et al. 2017).

With ``z = f(x) / ||f(x)||`` the L2-normalized representation, the weight of
class ``y`` is the mean of the normalized training representations of that
class, ``mu_y = mean_{x in class y} z(x)`` (not renormalized). A sample
scores ``z . mu_j / t`` for every class ``j`` and is assigned the argmax:
the linear classifier ``W z + b`` with ``W = [mu_1 .. mu_K]^T``, ``b = 0``.
Its supervised loss (Eq. 4) is the cross-entropy of those scores,

    L^mu_sup = mean_i -log( exp(z_i . mu_{y_i} / t) / sum_j exp(z_i . mu_j / t) ),

with ``t = 1`` in the paper's Eq. 4 and ``t`` the training temperature in
the authors' code. The temperature does not change the predictions.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor

from ..classes import class_means, means_of_classes
from ..validation import check_range
from .classification import (
    ClassificationResult,
    check_class_labels,
    check_feature_matrix,
    check_train_test,
    classification_result,
)

__all__ = ["MeanClassifierResult", "class_means", "mean_classifier", "mean_classifier_logits", "mean_classifier_loss"]


@dataclass(frozen=True)
class MeanClassifierResult(ClassificationResult):
    """Test accuracies of the mean classifier and its supervised loss ``L^mu_sup`` on the test split."""

    loss: float


def mean_classifier_logits(features: Tensor, means: Tensor, *, temperature: float = 1.0) -> Tensor:
    """(N, K) scores ``z . mu_j / t`` of the L2-normalized ``features`` against the class means."""
    check_feature_matrix("means", means)
    check_feature_matrix("features", features, dim=means.shape[1], dim_of="means")
    temperature = check_range("temperature", temperature, 0, math.inf, low_open=True, high_open=True)
    z = F.normalize(features.double(), dim=1).to(means.device)
    return z @ means.double().T / temperature


def mean_classifier_loss(features: Tensor, labels: Tensor, means: Tensor, *, temperature: float = 1.0) -> float:
    """``L^mu_sup`` (Eq. 4): the mean cross-entropy of the mean classifier's scores."""
    logits = mean_classifier_logits(features, means, temperature=temperature)
    check_class_labels("labels", labels, features.shape[0], num_classes=means.shape[0])
    return float(F.cross_entropy(logits, labels.long().to(logits.device)))


def mean_classifier(
    train_features: Tensor,
    train_labels: Tensor,
    test_features: Tensor,
    test_labels: Tensor,
    *,
    temperature: float = 1.0,
) -> MeanClassifierResult:
    """Class means from the training split, scored on the test split with ``L^mu_sup`` at ``temperature``.

    The classes are those of ``train_labels``: labels need not be contiguous
    (a dataset of 7 of Fashion-MNIST's 10 classes keeps its label ids), a
    class without training rows has no mean and is never predicted, and every
    class of ``test_labels`` must occur in ``train_labels``.
    """
    num_classes = check_train_test(train_features, train_labels, test_features, test_labels)
    present = torch.unique(train_labels.long().cpu())
    unseen = sorted(set(torch.unique(test_labels.long().cpu()).tolist()) - set(present.tolist()))
    if unseen:
        raise ValueError(f"test_labels has classes {unseen} that train_labels lacks: they have no class mean")
    position = torch.full((num_classes,), -1, dtype=torch.long)
    position[present] = torch.arange(len(present))
    means = means_of_classes(train_features, position[train_labels.long().cpu()], len(present), "train_labels")
    logits = mean_classifier_logits(test_features, means, temperature=temperature)
    predictions = present[logits.argmax(dim=1).cpu()]
    result = classification_result(predictions, test_labels.cpu(), num_classes)
    loss = float(F.cross_entropy(logits, position[test_labels.long().cpu()].to(logits.device)))
    return MeanClassifierResult(**vars(result), loss=loss)
