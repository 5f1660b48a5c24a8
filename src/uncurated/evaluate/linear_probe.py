"""Linear probe: L2-regularized multinomial logistic regression on frozen, standardized features.

The linear evaluation protocol of Chen et al. 2020 (SimCLR) and the thesis:
features are standardized with the training split's mean and standard
deviation, a logistic regression is fit on the training split and scored on
the test split. The regularization strength is chosen as in Chen et al.'s
transfer experiments: each grid value is fit on a stratified split of the
training features (``validation_fraction`` of every class held out,
``seed`` fixing the draw; at most ``search_rows`` training rows, a stratified
subsample, take part), walking the grid from strong to weak regularization
with warm starts; the value with the best validation accuracy (the strongest
one on ties) is refit on all training features. A one-decade grid and the
cap keep the search within a few times one fit: a half-decade grid over
20,000 rows took over 20 minutes on 2 busy cores.

Two solvers give the same :class:`ProbeResult`:

- :func:`linear_probe`: scikit-learn's L-BFGS, minimizing
  ``C * sum_i CE_i + ||W||^2 / 2``; since that sum grows with the rows, the
  ``C`` chosen on ``n_fit`` rows is refit as ``C n_fit / n`` on ``n`` rows
  (the same regularization per row) and reported so;
- :func:`torch_linear_probe`: full-batch L-BFGS in torch float64 on the
  features' device (a GPU for large feature sets), minimizing
  ``mean_i CE_i + weight_decay * ||W||^2 / 2``; ``weight_decay = 1 / (C n)``
  for ``n`` training rows gives the same classifier.

The bias is not penalized in either.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor

from ..validation import check_integer, check_range
from .classification import (
    ClassificationResult,
    check_class_labels,
    check_train_test,
    classification_result,
    mean_per_class_accuracy,
)

__all__ = [
    "DEFAULT_C_GRID",
    "DEFAULT_WEIGHT_DECAY_GRID",
    "ProbeResult",
    "linear_probe",
    "mean_per_class_accuracy",
    "stratified_split",
    "torch_linear_probe",
]

DEFAULT_C_GRID: tuple[float, ...] = tuple(10.0**e for e in range(-4, 3))
"""Inverse regularization strengths searched by :func:`linear_probe`: 1e-4 .. 1e2 in decades."""

DEFAULT_WEIGHT_DECAY_GRID: tuple[float, ...] = tuple(10.0**e for e in range(-6, 1))
"""Weight decays searched by :func:`torch_linear_probe`: 1e-6 .. 1 in decades."""

DEFAULT_SEARCH_ROWS = 10_000
"""Training rows, at most, that take part in the regularization search."""

# Yields the predictions on the evaluation features of a classifier fit with each value in turn.
_Path = Callable[[Tensor, Tensor, Sequence[float], Tensor], Iterator[Tensor]]


@dataclass(frozen=True)
class ProbeResult(ClassificationResult):
    """Test accuracies of a linear probe with its regularization.

    ``C`` is set by :func:`linear_probe`, ``weight_decay`` by
    :func:`torch_linear_probe`; ``validation_accuracy`` is the chosen value's
    accuracy on the validation split, ``None`` when the value was given.
    """

    C: float | None = None
    weight_decay: float | None = None
    validation_accuracy: float | None = None


def linear_probe(
    train_features: Tensor,
    train_labels: Tensor,
    test_features: Tensor,
    test_labels: Tensor,
    *,
    C: float | None = None,
    C_grid: Sequence[float] = DEFAULT_C_GRID,
    validation_fraction: float = 0.2,
    search_rows: int = DEFAULT_SEARCH_ROWS,
    seed: int = 0,
    max_iter: int = 1000,
) -> ProbeResult:
    """Fit scikit-learn's logistic regression (L-BFGS) and score it on the test split.

    Args:
        train_features, test_features: (n, d) and (m, d) features.
        train_labels, test_labels: their class indices.
        C: the inverse regularization strength; ``None`` searches ``C_grid``
            on a validation split (see the module's documentation).
        C_grid: the values searched when ``C`` is ``None``.
        validation_fraction: the share of each class held out for the search.
        search_rows: the most training rows the search uses (a stratified subsample).
        seed: fixes the subsample and the validation split.
        max_iter: L-BFGS iterations per fit.
    """
    max_iter = check_integer("max_iter", max_iter, 1)

    def path(x: Tensor, y: Tensor, values: Sequence[float], x_eval: Tensor) -> Iterator[Tensor]:
        return _sklearn_path(x, y, values, x_eval, max_iter)

    def per_row(C: float, fit_rows: int, rows: int) -> float:
        return C * fit_rows / rows

    chosen, validation_accuracy, result = _probe(
        path,
        "C",
        C,
        sorted(_check_grid("C_grid", C_grid)),
        per_row,
        (validation_fraction, search_rows, seed),
        train_features,
        train_labels,
        test_features,
        test_labels,
    )
    return ProbeResult(**vars(result), C=chosen, validation_accuracy=validation_accuracy)


def torch_linear_probe(
    train_features: Tensor,
    train_labels: Tensor,
    test_features: Tensor,
    test_labels: Tensor,
    *,
    weight_decay: float | None = None,
    weight_decay_grid: Sequence[float] = DEFAULT_WEIGHT_DECAY_GRID,
    validation_fraction: float = 0.2,
    search_rows: int = DEFAULT_SEARCH_ROWS,
    seed: int = 0,
    max_iter: int = 500,
) -> ProbeResult:
    """A torch linear classifier fit by full-batch L-BFGS, for feature sets too large for scikit-learn.

    Runs in float64 on ``train_features``' device. Arguments as in
    :func:`linear_probe`, with ``weight_decay`` (``None``: search
    ``weight_decay_grid``) in place of ``C``.
    """
    max_iter = check_integer("max_iter", max_iter, 1)

    def path(x: Tensor, y: Tensor, values: Sequence[float], x_eval: Tensor) -> Iterator[Tensor]:
        return _torch_path(x, y.to(x.device), values, x_eval, max_iter)

    def per_row(weight_decay: float, fit_rows: int, rows: int) -> float:
        return weight_decay  # the loss is a mean over rows already

    chosen, validation_accuracy, result = _probe(
        path,
        "weight_decay",
        weight_decay,
        sorted(_check_grid("weight_decay_grid", weight_decay_grid), reverse=True),
        per_row,
        (validation_fraction, search_rows, seed),
        train_features,
        train_labels,
        test_features,
        test_labels,
    )
    return ProbeResult(**vars(result), weight_decay=chosen, validation_accuracy=validation_accuracy)


def stratified_split(labels: Tensor, validation_fraction: float, seed: int) -> tuple[Tensor, Tensor]:
    """Sorted row indices ``(fit, validation)``, split class by class with a generator seeded by ``seed``.

    A class of ``n >= 2`` rows holds out ``round(validation_fraction * n)`` of
    them, at least one and at most ``n - 1``; a class of one row stays in ``fit``.
    """
    if not isinstance(labels, Tensor) or labels.ndim != 1:
        raise ValueError(f"labels must be a 1-D integer tensor of class indices, got {labels!r:.80}")
    check_class_labels("labels", labels, len(labels))
    validation_fraction = check_range("validation_fraction", validation_fraction, 0, 1, low_open=True, high_open=True)
    seed = check_integer("seed", seed, 0)
    generator = torch.Generator().manual_seed(seed)
    labels = labels.cpu()
    fit, validation = [], []
    for label in torch.unique(labels):
        rows = torch.nonzero(labels == label).flatten()
        rows = rows[torch.randperm(len(rows), generator=generator)]
        held_out = min(len(rows) - 1, max(1, round(validation_fraction * len(rows))))
        validation.append(rows[:held_out])
        fit.append(rows[held_out:])
    return torch.cat(fit).sort().values, torch.cat(validation).sort().values


def _probe(
    path: _Path,
    name: str,
    value: float | None,
    grid: list[float],
    per_row: Callable[[float, int, int], float],
    search: tuple[float, int, int],
    train_features: Tensor,
    train_labels: Tensor,
    test_features: Tensor,
    test_labels: Tensor,
) -> tuple[float, float | None, ClassificationResult]:
    """Choose the regularization (or check the given one), refit on all training rows, score the test split.

    ``search`` is ``(validation_fraction, search_rows, seed)``; ``per_row``
    maps a value chosen on ``fit_rows`` rows to the same strength on ``rows``.
    """
    num_classes = check_train_test(train_features, train_labels, test_features, test_labels)
    if len(torch.unique(train_labels)) < 2:
        raise ValueError("train_labels must contain at least 2 classes to fit a probe")
    x_train, y_train = train_features.double(), train_labels.long()
    validation_accuracy = None
    if value is None:
        value, validation_accuracy, fit_rows = _search(path, grid, x_train, y_train, *search)
        value = per_row(value, fit_rows, len(y_train))
    else:
        value = check_range(name, value, 0, math.inf, low_open=True, high_open=True)
    x_train, x_test = _standardize(x_train, test_features.double())
    (predictions,) = path(x_train, y_train, [value], x_test)
    return value, validation_accuracy, classification_result(predictions.cpu(), test_labels.cpu(), num_classes)


def _search(
    path: _Path,
    grid: list[float],
    features: Tensor,
    labels: Tensor,
    validation_fraction: float,
    search_rows: int,
    seed: int,
) -> tuple[float, float, int]:
    """The grid value with the best accuracy on a stratified validation split (the first on ties), that accuracy, and
    the number of rows fit."""
    search_rows = check_integer("search_rows", search_rows, 2)
    if search_rows < len(labels):
        _, chosen = stratified_split(labels, search_rows / len(labels), seed)
        features, labels = features[chosen], labels[chosen]
    fit, validation = stratified_split(labels, validation_fraction, seed)
    if len(validation) == 0:
        raise ValueError(
            "searching the regularization needs a validation split, but no class of train_labels has 2 rows; "
            "give the regularization value instead"
        )
    x_fit, x_validation = _standardize(features[fit], features[validation])
    y_validation = labels[validation]
    scores = [
        float((predictions.cpu() == y_validation.cpu()).double().mean())
        for predictions in path(x_fit, labels[fit], grid, x_validation)
    ]
    best = scores.index(max(scores))
    return grid[best], scores[best], len(fit)


def _sklearn_path(x: Tensor, y: Tensor, values: Sequence[float], x_eval: Tensor, max_iter: int) -> Iterator[Tensor]:
    from sklearn.linear_model import LogisticRegression

    classifier = LogisticRegression(max_iter=max_iter, warm_start=True)
    x_numpy, y_numpy, eval_numpy = x.cpu().numpy(), y.cpu().numpy(), x_eval.cpu().numpy()
    for C in values:
        classifier.set_params(C=C).fit(x_numpy, y_numpy)
        yield torch.from_numpy(classifier.predict(eval_numpy))


def _torch_path(x: Tensor, y: Tensor, values: Sequence[float], x_eval: Tensor, max_iter: int) -> Iterator[Tensor]:
    num_classes = 1 + int(y.max())
    weight = torch.zeros(x.shape[1], num_classes, dtype=x.dtype, device=x.device, requires_grad=True)
    bias = torch.zeros(num_classes, dtype=x.dtype, device=x.device, requires_grad=True)
    for weight_decay in values:
        _minimize(weight, bias, x, y, weight_decay, max_iter)
        with torch.no_grad():
            yield (x_eval @ weight + bias).argmax(dim=1)


def _minimize(weight: Tensor, bias: Tensor, x: Tensor, y: Tensor, weight_decay: float, max_iter: int) -> None:
    """L-BFGS on ``mean CE + weight_decay * ||weight||^2 / 2``, starting from the current parameters."""
    optimizer = torch.optim.LBFGS(
        [weight, bias],
        lr=1.0,
        max_iter=max_iter,
        history_size=20,
        tolerance_grad=1e-6,
        tolerance_change=1e-10,
        line_search_fn="strong_wolfe",
    )

    def closure() -> Tensor:
        optimizer.zero_grad()
        loss = F.cross_entropy(x @ weight + bias, y) + 0.5 * weight_decay * weight.pow(2).sum()
        loss.backward()
        return loss

    with torch.enable_grad():
        optimizer.step(closure)


def _standardize(train: Tensor, other: Tensor) -> tuple[Tensor, Tensor]:
    mean, std = train.mean(dim=0), train.std(dim=0, correction=0) + 1e-8
    return (train - mean) / std, (other.to(train.device) - mean) / std


def _check_grid(name: str, grid: Sequence[float]) -> list[float]:
    values = [check_range(f"{name} entries", v, 0, math.inf, low_open=True, high_open=True) for v in grid]
    if not values:
        raise ValueError(f"{name} must hold at least one value > 0, got {grid!r}")
    return values
