"""Margin tools of Chen et al. 2024, on transferable representation learning and zero-shot transfer in CLIP.

Chen, Deng, Li & Gu measure how far a CLIP model separates matched from
unmatched pairs. Everything here works on raw similarity scores
``f(x, y)``, not on logits ``f / tau``, so that margins at different
temperatures can be compared (App. A.2 measures margins on scores).

Batch margins (App. A.2, Sec. 7.1, Figs. 3 and 6). For a batch score matrix
``S_ij = f(x_i, y_j)`` (rows are images, columns texts):

- :func:`pairwise_differences`: every diagonal-minus-off-diagonal difference,
  ``S_ii - S_ij`` (image ``i`` against the other texts) and ``S_ii - S_ji``
  (text ``i`` against the other images), ``j != i``;
- :func:`batch_margins`: their minimum per ``i``, the diagonal minus the
  largest off-diagonal entry of row ``i`` and of column ``i``;
- :func:`alpha_hat`: the label-free failure rate of Eq. A.3,
  ``P(f(x,y) - f(x,y') <= gamma) + P(f(x,y) - f(x',y) <= gamma)``;
- :func:`alpha`: the label-aware failure rate of Eq. A.1, the same two
  probabilities restricted to pairs from different classes ``z != z'``;
- :func:`alpha_sandwich`: both, with ``sum_k p_k^2`` for Theorem A.1.

Zero-shot margins (Thm 4.2, Cor. 5.1, Cor. 6.1). For an (n, K) matrix of
each image's scores against one prompt per class and the true classes:

- :func:`zero_shot_margins`: ``f(x, y*) - max_{k != k*} f(x, y_k)``;
- :func:`top_r_error`: the fraction whose true class is not in the top r;
- :func:`lse_certificate`: the per-image term of Eq. 4.2,
  ``log sum_k exp((f(x, y_k) - f(x, y*)) / tau)``, whose mean is the ``eps'``
  of Theorem 4.2;
- :func:`lse_margin_bound`: the margin each certificate guarantees,
  ``-tau log sum_{k != k*} exp(-(f(x, y*) - f(x, y_k)) / tau) <= margin``;
- :func:`lse_failure_bound`: Cor. 5.1 and Cor. 6.1 in one Markov bound.

:func:`plot_margin_histograms` draws the distributions of Figs. 3 and 6.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from torch import Tensor

from ..validation import check_integer, check_range


def pairwise_differences(scores: Tensor) -> tuple[Tensor, Tensor]:
    """Every diagonal-minus-off-diagonal difference of square score matrices, in both directions (App. A.2).

    Args:
        scores: a (B, B) matrix ``S_ij = f(x_i, y_j)``, or a stack (..., B, B) of them (one per batch).

    Returns:
        ``(image_to_text, text_to_image)``, each of shape (..., B, B - 1): entry
        ``[i, :]`` holds ``S_ii - S_ij`` and ``S_ii - S_ji`` over ``j != i``, in order of ``j``.
    """
    scores = _check_square(scores)
    return _off_diagonal(_diagonal_minus(scores)), _off_diagonal(_diagonal_minus(scores.transpose(-1, -2)))


def batch_margins(scores: Tensor) -> tuple[Tensor, Tensor]:
    """The margin of each pair in both directions: the diagonal minus the largest off-diagonal entry.

    Returns ``(image_to_text, text_to_image)``, each of shape (..., B): row
    ``i``'s ``S_ii - max_{j != i} S_ij`` and column ``i``'s ``S_ii - max_{j != i} S_ji``.
    """
    image_to_text, text_to_image = pairwise_differences(scores)
    return image_to_text.min(dim=-1).values, text_to_image.min(dim=-1).values


def alpha_hat(scores: Tensor, gamma: float) -> float:
    """Eq. A.3: the fraction of image-to-text differences ``<= gamma`` plus that of text-to-image ones.

    Label-free, so a pair from the same class (a false negative) counts as a
    failure. The result lies in [0, 2]; at ``gamma`` it is the empirical CDF of
    the differences of :func:`pairwise_differences`, summed over directions.
    """
    gamma = check_range("gamma", gamma)
    return sum(float((differences <= gamma).double().mean()) for differences in pairwise_differences(scores))


def alpha(scores: Tensor, labels: Tensor, gamma: float) -> float:
    """Eq. A.1: :func:`alpha_hat` counting only pairs of different classes ``z_i != z_j``.

    Args:
        scores: (..., B, B) score matrices.
        labels: (..., B) integer classes ``z`` of the pairs, one per row (and column).
        gamma: the margin threshold.

    The fractions are over all off-diagonal pairs, as the probabilities of
    Eq. A.1 are joint in ``z != z'`` and the difference.
    """
    gamma = check_range("gamma", gamma)
    different = ~_same_class(scores, labels)
    return sum(
        float((different & (differences <= gamma)).double().mean()) for differences in pairwise_differences(scores)
    )


@dataclass(frozen=True)
class AlphaSandwich:
    """The two failure rates of App. A at one threshold and the collision probability ``sum_k p_k^2``.

    ``alpha <= alpha_hat`` always. The gap ``alpha_hat - alpha`` is the mass
    of same-class pairs whose difference is ``<= gamma``, summed over both
    directions, so it is at most ``2 same_class``. Theorem A.1 prints the
    lower bound ``alpha_hat - sum_k p_k^2 <= alpha``, arguing that each
    direction's same-class term is at most ``sum_k p_k^2 / 2`` by symmetry.
    Symmetry gives that only for the event "difference < 0"; with continuous
    scores it makes the two sides equal at ``gamma = 0``, but for
    ``gamma > 0`` each term is *at least* ``sum_k p_k^2 / 2``, so the printed
    bound turns into ``alpha <= alpha_hat - sum_k p_k^2`` there (App. A;
    reported, not fixed). :attr:`lower_bound` is the bound that holds
    for every ``gamma``.

    Attributes:
        gamma: the threshold.
        alpha_hat: Eq. A.3.
        alpha: Eq. A.1.
        same_class: ``sum_k p_k^2``, from the class probabilities when given,
            else the fraction of off-diagonal pairs sharing a class.
    """

    gamma: float
    alpha_hat: float
    alpha: float
    same_class: float

    @property
    def printed_bound(self) -> float:
        """``alpha_hat - sum_k p_k^2``, Theorem A.1's lower bound as printed (equal to ``alpha`` at gamma = 0)."""
        return self.alpha_hat - self.same_class

    @property
    def lower_bound(self) -> float:
        """``alpha_hat - 2 sum_k p_k^2``, a lower bound of ``alpha`` at every ``gamma``."""
        return self.alpha_hat - 2.0 * self.same_class


def alpha_sandwich(scores: Tensor, labels: Tensor, gamma: float, class_probs: Tensor | None = None) -> AlphaSandwich:
    """:func:`alpha_hat`, :func:`alpha` and ``sum_k p_k^2`` of the same batches (Theorem A.1).

    ``class_probs``, the true ``p_k`` when known, gives ``sum_k p_k^2``;
    without it the batches' own fraction of same-class off-diagonal pairs is
    used, for which ``alpha >= alpha_hat - 2 sum_k p_k^2`` holds exactly.
    """
    if class_probs is None:
        same_class = float(_same_class(scores, labels).double().mean())
    else:
        same_class = float((_check_probabilities(class_probs) ** 2).sum())
    return AlphaSandwich(
        gamma=check_range("gamma", gamma),
        alpha_hat=alpha_hat(scores, gamma),
        alpha=alpha(scores, labels, gamma),
        same_class=same_class,
    )


def zero_shot_margins(scores: Tensor, labels: Tensor) -> Tensor:
    """``f(x, y*) - max_{k != k*} f(x, y_k)`` per image: positive iff the true class wins top-1 strictly.

    Args:
        scores: (n, K) scores of each image against one prompt per class, K >= 2.
        labels: (n,) true classes in ``[0, K)``.
    """
    scores, labels = _check_zero_shot(scores, labels)
    return -_rival_gaps(scores, labels).max(dim=1).values


def top_r_error(scores: Tensor, labels: Tensor, r: int = 1) -> float:
    """The fraction of images whose true class is not among the top ``r`` (ties count against it; Cor. 5.1)."""
    scores, labels = _check_zero_shot(scores, labels)
    r = check_integer("r", r, 1)
    rivals_ahead = (_rival_gaps(scores, labels) >= 0).sum(dim=1)
    return float((rivals_ahead >= r).double().mean())


def lse_certificate(scores: Tensor, labels: Tensor, tau: float) -> Tensor:
    """Eq. 4.2's term per image, ``log sum_k exp((f(x, y_k) - f(x, y*)) / tau) >= 0`` (the ``k = k*`` term is 1).

    Its mean is the ``eps'`` of Theorem 4.2 (1): small ``eps'`` certifies
    zero-shot accuracy (:func:`lse_failure_bound`).
    """
    return torch.nn.functional.softplus(_rival_logsumexp(scores, labels, tau))


def lse_margin_bound(scores: Tensor, labels: Tensor, tau: float) -> Tensor:
    """The margin each certificate guarantees: ``-tau log sum_{k != k*} exp(-(f(x, y*) - f(x, y_k)) / tau)``.

    A soft minimum of the gaps to the rivals, so it is at most
    :func:`zero_shot_margins`, by at most ``tau log(K - 1)``. It is the
    inverse of :func:`lse_certificate`: ``certificate = log(1 + exp(-bound / tau))``.
    """
    tau = check_range("tau", tau, 0.0, low_open=True)
    return -tau * _rival_logsumexp(scores, labels, tau)


def lse_failure_bound(certificate: Tensor, tau: float, *, margin: float = 0.0, r: int = 1) -> float:
    """Markov's bound on the fraction of images with at least ``r`` rivals within ``margin`` of the true class.

    A rival ``k`` with ``f(x, y*) - f(x, y_k) <= margin`` adds at least
    ``exp(-margin / tau)`` inside the certificate's logarithm, so

        fraction <= mean(certificate) / log(1 + r exp(-margin / tau)).

    ``margin = 0`` bounds the top-r error (Cor. 5.1, ``eps' / log(1 + r)``);
    ``margin = tau, r = 1`` bounds the images not correct with margin ``tau``
    (Cor. 6.1, ``eps' / log(1 + e^-1)``). The bound may exceed 1.
    """
    tau = check_range("tau", tau, 0.0, low_open=True)
    margin = check_range("margin", margin)
    r = check_integer("r", r, 1)
    certificate = torch.as_tensor(certificate)
    if certificate.ndim != 1 or certificate.numel() == 0 or not bool(torch.isfinite(certificate).all()):
        raise ValueError(f"certificate must be a non-empty finite vector, got shape {tuple(certificate.shape)}")
    return float(certificate.double().mean()) / math.log1p(r * math.exp(-margin / tau))


def plot_margin_histograms(
    margins: Mapping[str, Tensor | np.ndarray],
    path: str | Path,
    *,
    gamma: float | None = None,
    title: str = "Margin distributions (Chen et al. 2024, Figs. 3 and 6)",
    bins: int = 60,
) -> Path:
    """Write a PNG of overlaid, normalized histograms of margins or differences, one per label.

    A dashed line marks 0 and, when given, a dotted one the threshold
    ``gamma``. Draws on matplotlib's Agg canvas directly, leaving pyplot's
    global backend alone. Returns the path.
    """
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    if not margins:
        raise ValueError("margins must map at least one label to its values")
    bins = check_integer("bins", bins, 1)
    values = {label: _finite_values(f"margins[{label!r}]", sample) for label, sample in margins.items()}
    edges = np.histogram_bin_edges(np.concatenate(list(values.values())), bins=bins)
    figure = Figure(figsize=(6.0, 3.8), layout="constrained")
    FigureCanvasAgg(figure)
    ax = figure.subplots()
    for label, sample in values.items():
        ax.hist(sample, bins=edges.tolist(), density=True, histtype="step", linewidth=1.5, label=label)
    ax.axvline(0.0, color="black", linestyle="--", linewidth=0.8)
    if gamma is not None:
        ax.axvline(check_range("gamma", gamma), color="black", linestyle=":", linewidth=0.8, label=f"gamma = {gamma:g}")
    ax.set_xlabel("margin f(x, y) - f(x, y')")
    ax.set_ylabel("density")
    ax.set_title(title, fontsize=9)
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    path = Path(path)
    figure.savefig(path, dpi=120)
    return path


def _diagonal_minus(scores: Tensor) -> Tensor:
    return scores.diagonal(dim1=-2, dim2=-1).unsqueeze(-1) - scores


def _off_diagonal(matrix: Tensor) -> Tensor:
    size = matrix.shape[-1]
    keep = ~torch.eye(size, dtype=torch.bool, device=matrix.device)
    return matrix[..., keep].reshape(*matrix.shape[:-2], size, size - 1)


def _same_class(scores: Tensor, labels: Tensor) -> Tensor:
    """Whether pair ``(i, j)``, ``j != i``, shares a class, laid out as :func:`pairwise_differences`."""
    scores = _check_square(scores)
    if not isinstance(labels, Tensor) or labels.is_floating_point() or labels.is_complex():
        raise ValueError(f"labels must be an integer tensor of shape {tuple(scores.shape[:-1])}, got {labels!r:.80}")
    if labels.shape != scores.shape[:-1]:
        raise ValueError(
            f"labels must have shape {tuple(scores.shape[:-1])} (one class per pair), got {tuple(labels.shape)}"
        )
    return _off_diagonal(labels.unsqueeze(-1) == labels.unsqueeze(-2))


def _rival_gaps(scores: Tensor, labels: Tensor) -> Tensor:
    """``f(x, y_k) - f(x, y*)`` for every rival ``k``, an (n, K - 1) tensor (the true class dropped)."""
    gaps = scores - scores.gather(1, labels.unsqueeze(1))
    rival = torch.ones_like(gaps, dtype=torch.bool).scatter_(1, labels.unsqueeze(1), False)
    return gaps[rival].view(len(gaps), -1)


def _rival_logsumexp(scores: Tensor, labels: Tensor, tau: float) -> Tensor:
    tau = check_range("tau", tau, 0.0, low_open=True)
    scores, labels = _check_zero_shot(scores, labels)
    return torch.logsumexp(_rival_gaps(scores, labels) / tau, dim=1)


def _check_square(scores: Tensor) -> Tensor:
    scores = _check_scores("scores", scores)
    if scores.ndim < 2 or scores.shape[-1] != scores.shape[-2] or scores.shape[-1] < 2:
        raise ValueError(f"scores must be square (..., B, B) matrices with B >= 2, got shape {tuple(scores.shape)}")
    return scores


def _check_zero_shot(scores: Tensor, labels: Tensor) -> tuple[Tensor, Tensor]:
    scores = _check_scores("scores", scores)
    if scores.ndim != 2 or scores.shape[1] < 2 or scores.shape[0] < 1:
        raise ValueError(f"scores must be an (n, K) matrix with n >= 1 and K >= 2 classes, got {tuple(scores.shape)}")
    if not isinstance(labels, Tensor) or labels.is_floating_point() or labels.is_complex():
        raise ValueError(f"labels must be an integer tensor of shape ({len(scores)},), got {labels!r:.80}")
    if labels.shape != scores.shape[:1]:
        raise ValueError(f"labels must have shape ({len(scores)},) (one class per image), got {tuple(labels.shape)}")
    if bool(((labels < 0) | (labels >= scores.shape[1])).any()):
        raise ValueError(f"labels must lie in [0, {scores.shape[1]}) (a column of scores)")
    return scores, labels.long()


def _check_scores(name: str, scores: Tensor) -> Tensor:
    if not isinstance(scores, Tensor) or not scores.is_floating_point():
        raise ValueError(f"{name} must be a floating-point torch.Tensor, got {type(scores).__name__}")
    if not bool(torch.isfinite(scores).all()):
        raise ValueError(f"{name} contains non-finite values (NaN or inf)")
    return scores


def _check_probabilities(class_probs: Tensor) -> Tensor:
    probs = torch.as_tensor(class_probs, dtype=torch.float64)
    valid = probs.ndim == 1 and probs.numel() > 0 and bool(torch.isfinite(probs).all()) and bool((probs >= 0).all())
    if not valid or abs(float(probs.sum()) - 1.0) > 1e-9:
        raise ValueError(f"class_probs must be a non-negative vector summing to 1, got {class_probs!r:.80}")
    return probs


def _finite_values(name: str, sample: Tensor | np.ndarray) -> np.ndarray:
    values = (sample.detach().cpu().numpy() if isinstance(sample, Tensor) else np.asarray(sample)).ravel()
    if values.size == 0 or not np.issubdtype(values.dtype, np.number) or not np.isfinite(values).all():
        raise ValueError(f"{name} must be a non-empty array of finite numbers")
    return values.astype(np.float64)
