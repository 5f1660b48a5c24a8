"""Linear probe: multinomial logistic regression on frozen, standardized features."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor


@dataclass(frozen=True)
class ProbeResult:
    """Test accuracy of a linear probe: top-1 and the mean of the per-class accuracies."""

    accuracy: float
    mean_per_class_accuracy: float


def linear_probe(
    train_features: Tensor,
    train_labels: Tensor,
    test_features: Tensor,
    test_labels: Tensor,
    *,
    C: float = 1.0,
    max_iter: int = 1000,
) -> ProbeResult:
    """Fit scikit-learn's L2-regularized logistic regression (L-BFGS) and score it on the test split.

    Features are standardized with the training split's mean and standard deviation.
    """
    from sklearn.linear_model import LogisticRegression

    x_train, x_test = _standardize(_numpy(train_features), _numpy(test_features))
    y_train, y_test = _numpy(train_labels), _numpy(test_labels)
    classifier = LogisticRegression(C=C, max_iter=max_iter)
    classifier.fit(x_train, y_train)
    predictions = classifier.predict(x_test)
    return ProbeResult(float((predictions == y_test).mean()), mean_per_class_accuracy(predictions, y_test))


def mean_per_class_accuracy(predictions: np.ndarray, labels: np.ndarray) -> float:
    """The accuracy of each class present in ``labels``, averaged over the classes."""
    classes = np.unique(labels)
    return float(np.mean([(predictions[labels == c] == c).mean() for c in classes]))


def _standardize(train: np.ndarray, test: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    mean, std = train.mean(axis=0), train.std(axis=0) + 1e-8
    return (train - mean) / std, (test - mean) / std


def _numpy(values: Tensor) -> np.ndarray:
    return values.detach().cpu().numpy() if isinstance(values, Tensor) else np.asarray(values)
