"""k-variance normalized margins (Chuang 2023, the thesis's Ch. 8; Chuang et al. 2021).

Generalization of a classifier ``f`` on features ``phi(x)`` is governed by two
quantities that can be estimated from the training sample itself:

- **concentration**, the within-class *k-variance* (Def. 8.1, the version
  used: unnormalized, p = 1),

      Var_k(mu) = E_{S, S' ~ mu^k} W1(mu_S, mu_S'),

  the expected Wasserstein-1 distance between the empirical measures of two
  independent size-``k`` samples, with the Euclidean ground metric;
- **separation**, the margin of Eq. 8.1, ``rho_f(phi(x), y) = f_y - max_{j != y} f_j``,
  or its gradient-normalized (GN) version ``rho_f / (||grad_phi rho_f|| + eps)``.

Theorems 8.2 and 8.4 bound the test error by the fraction of training
margins below ``gamma`` plus ``E_c[Lip_c Var_{m_c}(phi#mu_c)] / gamma``, which
gives the measures of Sec. 8.4:

    kV-Margin(x, y)    = rho_f(phi(x), y) / sum_c p(c) Var_c Lip_c
    kV-GN-Margin(x, y) = rho~_f(phi(x), y) / sum_c p(c) Var_c          (Lip of the GN margin set to 1, eq. B.4)

Here ``Var_c`` is the empirical k-variance of class ``c``'s features with
``k = floor(m_c / 2)`` and one draw (n = 1): the class sample is split at
random into two halves whose W1 is computed exactly, here as an assignment
problem (:func:`wasserstein1`). ``Lip_c = max_{x in S_c} ||grad_phi (f_c - f_{y*})(phi(x))||``
with ``y* = argmax_{y != c} f_y(phi(x))`` is the Jacobian-based lower bound
on the margin's Lipschitz constant. The scalar score of a model is the median
of the normalized margins over the sample, the ``gamma`` at which the
empirical margin loss is about 0.5.

The authors' code (chingyaoc/kV-Margin, ``complexity.py``) reports the same
median with the opposite sign, ``-median / gamma``, as a *complexity* score
(larger predicts a larger generalization gap): :attr:`KVMargins.complexity`.
Their protocol also differs in its sample: ``protocol="authors"`` draws at
most ``200 K`` examples (``K`` classes) without replacement from NumPy's
legacy generator seeded with ``seed``, takes the margins' median over the
first ``200 floor(size / 200)`` of them (their batches of 200, the last
partial one dropped), the k-variances and Lipschitz estimates over the
drawn examples of each class (one random split, ``k = floor(m_c / 2)``) and
``p(c)`` over the whole sample. ``protocol="thesis"`` (the default) uses
every example.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch
from scipy.optimize import linear_sum_assignment
from torch import Tensor

from ..validation import check_choice, check_integer, check_range

#: The ``epsilon`` of the GN margin (the thesis's Ch. 8 definitions).
GN_EPSILON = 1e-6

#: How the sample is used: every example (the thesis), or the authors' code's subsample.
PROTOCOLS = ("thesis", "authors")

#: The authors' protocol: at most this many examples per class, scored in batches of this size.
AUTHORS_BATCH = 200

_INTEGER_DTYPES = (torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64)

#: A map from features (n, ...) to logits (n, K), applied to each sample independently.
LogitFn = Callable[[Tensor], Tensor]


@dataclass(frozen=True, eq=False)
class KVMargins:
    """The k-variance normalized margins of a sample and the quantities they are made of.

    Attributes:
        margins: (n,) the normalized margin of every sample, in the order given.
        classes: the classes present in ``labels``, sorted.
        weights: ``p(c)``, each class's share of the sample, in the order of ``classes``.
        variances: ``Var_c``, each class's empirical k-variance.
        lipschitz: ``Lip_c``, each class's Lipschitz estimate (all 1 for kV-GN-Margin).
        normalizer: ``sum_c p(c) Var_c Lip_c``, the denominator shared by all samples.
        sample: the positions in the input of the examples ``margins`` belong
            to, or ``None`` when they are all of them, in order (``protocol="thesis"``).
    """

    margins: Tensor
    classes: tuple[int, ...]
    weights: tuple[float, ...]
    variances: tuple[float, ...]
    lipschitz: tuple[float, ...]
    normalizer: float
    sample: Tensor | None = None

    @property
    def median(self) -> float:
        """The thesis's scalar score: the median normalized margin over the sample (larger: better)."""
        return self.quantile(0.5)

    @property
    def complexity(self) -> float:
        """The authors' score, ``-median``: a complexity measure (larger predicts a larger generalization gap)."""
        return -self.median

    def quantile(self, q: float) -> float:
        """The ``q``-quantile of the normalized margins (the thesis reports that other quantiles behave alike)."""
        q = check_range("q", q, 0.0, 1.0)
        return float(torch.quantile(self.margins.double(), q))


def wasserstein1(a: Tensor, b: Tensor) -> float:
    """Exact W1 between the uniform empirical measures of two (n, d) point clouds, Euclidean ground metric.

    With equal sizes and uniform weights an optimal coupling is a permutation
    (Birkhoff), so ``W1 = min_sigma (1/n) sum_i ||a_i - b_sigma(i)||``, solved
    by :func:`scipy.optimize.linear_sum_assignment` in float64.
    """
    a, b = _cloud("a", a), _cloud("b", b)
    if a.shape != b.shape:
        raise ValueError(f"a and b must have the same shape (n, d), got {tuple(a.shape)} and {tuple(b.shape)}")
    cost = torch.cdist(a, b, compute_mode="donot_use_mm_for_euclid_dist").numpy()
    rows, columns = linear_sum_assignment(cost)
    return float(cost[rows, columns].mean())


def k_variance(
    features: Tensor,
    k: int | None = None,
    *,
    draws: int = 1,
    seed: int | np.random.Generator = 0,
) -> float:
    """The empirical k-variance of one class's (m, d) feature cloud (Def. 8.1, p = 1; Lemma 8.5).

    Each draw permutes the cloud at random and takes the W1 between its first
    ``k`` and its next ``k`` points: two disjoint size-``k`` subsamples, so
    ``k`` is at most ``m / 2`` (default ``floor(m / 2)``, the thesis's choice).
    The result is the mean over ``draws`` independent draws; ``draws=1`` is
    the thesis's estimator (n = 1), more draws lower its Monte-Carlo variance.
    ``seed`` is an int for ``numpy.random.default_rng`` or a generator to draw from.
    """
    cloud = _cloud("features", features)
    size = cloud.shape[0]
    if size < 2:
        raise ValueError(f"features must hold at least 2 points to split into two subsamples, got {size}")
    k = size // 2 if k is None else check_integer("k", k, 1)
    if 2 * k > size:
        raise ValueError(f"k must be in [1, {size // 2}] (two disjoint subsamples of {size} points), got {k}")
    draws = check_integer("draws", draws, 1)
    rng = seed if isinstance(seed, np.random.Generator) else np.random.default_rng(check_integer("seed", seed, 0))
    total = 0.0
    for _ in range(draws):
        order = torch.from_numpy(rng.permutation(size))
        total += wasserstein1(cloud[order[:k]], cloud[order[k : 2 * k]])
    return total / draws


def margin(logits: Tensor, labels: Tensor) -> Tensor:
    """(n,) the margins ``f_y(x) - max_{j != y} f_j(x)`` of (n, K) logits (Eq. 8.1); differentiable."""
    _check_logits(logits)
    _check_labels(labels, logits.shape[0], logits.shape[1])
    labels = labels.long()
    true = logits.gather(1, labels[:, None]).squeeze(1)
    others = logits.scatter(1, labels[:, None], -torch.inf)
    return true - others.max(dim=1).values


def gradient_normalized_margin(
    features: Tensor, logit_fn: LogitFn, labels: Tensor, *, eps: float = GN_EPSILON
) -> Tensor:
    """(n,) GN margins ``rho / (||grad_phi rho||_2 + eps)`` of features at the chosen layer (Sec. 8.1).

    ``grad_phi rho = grad f_y - grad f_{y_max}`` with ``y_max`` the runner-up
    class (ties go to the lowest index). ``logit_fn`` must treat samples
    independently (no batch statistics, e.g. batch norm in eval mode), so that
    the gradient of the summed margins is every sample's own gradient.
    """
    eps = check_range("eps", eps, 0.0)
    margins, norms = _margins_and_gradient_norms(features, logit_fn, labels)
    return margins / (norms + eps)


def kv_margin(
    features: Tensor,
    logit_fn: LogitFn,
    labels: Tensor,
    *,
    k: int | None = None,
    draws: int = 1,
    seed: int = 0,
    protocol: str = "thesis",
) -> KVMargins:
    """kV-Margin (Sec. 8.4): ``rho_f(phi(x), y) / sum_c p(c) Var_c Lip_c`` for every sample.

    Args:
        features: (n, ...) the sample's features ``phi(x)`` at the chosen layer.
        logit_fn: maps features to (n, K) logits, sample by sample (the rest of the network).
        labels: (n,) integer labels in ``[0, K)``; every class present needs at least 2 samples.
        k: the subsample size of every class's k-variance; default ``floor(m_c / 2)`` per class.
        draws: the random splits averaged per class (the thesis uses 1).
        seed: class ``c``'s splits come from ``numpy.random.default_rng([seed, c])``;
            with ``protocol="authors"`` it seeds their legacy generator.
        protocol: ``"thesis"`` (every example) or ``"authors"`` (their
            subsample, see the module documentation; ``k`` and ``draws`` keep
            their defaults there).

    ``p(c)`` is each class's share of the sample, ``Lip_c`` the largest margin
    gradient norm (w.r.t. the features, as the bound requires) over class
    ``c``'s samples. The result's :attr:`KVMargins.median` is the thesis's
    score, :attr:`KVMargins.complexity` the authors'.
    """
    if check_choice("protocol", protocol, PROTOCOLS) == "authors":
        return _authors_protocol(features, logit_fn, labels, k, draws, seed, gradient_normalized=False)
    margins, norms = _margins_and_gradient_norms(features, logit_fn, labels)
    lipschitz = {c: float(norms[labels == c].max()) for c in _classes(labels)}
    return _normalize(margins, features, labels, lipschitz, k, draws, seed)


def kv_gn_margin(
    features: Tensor,
    logit_fn: LogitFn,
    labels: Tensor,
    *,
    k: int | None = None,
    draws: int = 1,
    seed: int = 0,
    eps: float = GN_EPSILON,
    protocol: str = "thesis",
) -> KVMargins:
    """kV-GN-Margin (Sec. 8.4): the GN margin over ``sum_c p(c) Var_c``, its Lipschitz constant set to 1 (eq. B.4).

    The arguments are those of :func:`kv_margin`, plus the GN margin's ``eps``.
    """
    eps = check_range("eps", eps, 0.0)
    if check_choice("protocol", protocol, PROTOCOLS) == "authors":
        return _authors_protocol(features, logit_fn, labels, k, draws, seed, gradient_normalized=True, eps=eps)
    margins, norms = _margins_and_gradient_norms(features, logit_fn, labels)
    lipschitz = dict.fromkeys(_classes(labels), 1.0)
    return _normalize(margins / (norms + eps), features, labels, lipschitz, k, draws, seed)


def _margins_and_gradient_norms(features: Tensor, logit_fn: LogitFn, labels: Tensor) -> tuple[Tensor, Tensor]:
    """Each sample's margin and the norm of its gradient w.r.t. that sample's features, both detached."""
    if not isinstance(features, Tensor) or features.ndim < 2 or not features.is_floating_point():
        raise ValueError(f"features must be a floating-point tensor of shape (n, ...), got {features!r:.80}")
    inputs = features.detach().clone().requires_grad_(True)
    with torch.enable_grad():
        logits = logit_fn(inputs)
        if not isinstance(logits, Tensor) or logits.ndim != 2 or logits.shape[0] != features.shape[0]:
            shape = tuple(logits.shape) if isinstance(logits, Tensor) else type(logits).__name__
            raise ValueError(f"logit_fn must return (n, K) = ({features.shape[0]}, K) logits, got {shape}")
        margins = margin(logits, labels)
        (gradient,) = torch.autograd.grad(margins.sum(), inputs)
    return margins.detach(), gradient.flatten(1).norm(dim=1)


def _normalize(
    margins: Tensor,
    features: Tensor,
    labels: Tensor,
    lipschitz: dict[int, float],
    k: int | None,
    draws: int,
    seed: int,
) -> KVMargins:
    """Divide ``margins`` by ``sum_c p(c) Var_c Lip_c`` over the classes in ``labels``."""
    seed = check_integer("seed", seed, 0)
    classes = _classes(labels)
    if not classes:
        raise ValueError("labels must hold at least one sample")
    flat = features.detach().flatten(1)
    weights, variances = [], []
    for c in classes:
        members = labels == c
        count = int(members.sum())
        if count < 2 or (k is not None and 2 * k > count):
            least = 2 if k is None else 2 * k
            raise ValueError(f"labels: class {c} has {count} sample(s); the k-variance needs at least {least}")
        weights.append(count / labels.shape[0])
        variances.append(k_variance(flat[members], k, draws=draws, seed=np.random.default_rng([seed, c])))
    normalizer = sum(w * v * lipschitz[c] for w, v, c in zip(weights, variances, classes, strict=True))
    if normalizer <= 0.0:
        raise ValueError(
            "features: every class's k-variance (or Lipschitz estimate) is zero, so the margins cannot be normalized"
        )
    return KVMargins(
        margins=margins / normalizer,
        classes=classes,
        weights=tuple(weights),
        variances=tuple(variances),
        lipschitz=tuple(lipschitz[c] for c in classes),
        normalizer=normalizer,
    )


def _authors_protocol(
    features: Tensor,
    logit_fn: LogitFn,
    labels: Tensor,
    k: int | None,
    draws: int,
    seed: int,
    *,
    gradient_normalized: bool,
    eps: float = GN_EPSILON,
) -> KVMargins:
    """The authors' ``complexity`` sample and estimates (see the module documentation)."""
    if k is not None or draws != 1:
        raise ValueError("protocol='authors' splits each class once into halves: leave k=None and draws=1")
    seed = check_integer("seed", seed, 0)
    if not isinstance(features, Tensor) or features.ndim < 2:
        raise ValueError(f"features must be a floating-point tensor of shape (n, ...), got {features!r:.80}")
    _check_labels(labels, features.shape[0], int(labels.max()) + 1 if labels.numel() else 1)
    total = labels.shape[0]
    count = int(labels.max()) + 1
    rng = np.random.RandomState(seed)
    size = min(total, count * AUTHORS_BATCH)
    scored = size // AUTHORS_BATCH * AUTHORS_BATCH
    if scored == 0:
        raise ValueError(
            f"labels: protocol='authors' scores margins in batches of {AUTHORS_BATCH} (the last partial batch "
            f"dropped), so it needs at least {AUTHORS_BATCH} samples, got {total}"
        )
    chosen = torch.from_numpy(rng.permutation(total)[:size])
    sub_features, sub_labels = features[chosen], labels[chosen]
    margins, norms = _margins_and_gradient_norms(sub_features, logit_fn, sub_labels)
    if gradient_normalized:
        margins = margins / (norms + eps)
    flat = sub_features.detach().flatten(1)
    classes, weights, variances, lipschitz = tuple(range(count)), [], [], []
    for c in classes:
        members = np.flatnonzero(sub_labels.cpu().numpy() == c)
        order = torch.from_numpy(rng.permutation(members))
        half = len(order) // 2
        if half < 1:
            raise ValueError(
                f"labels: class {c} has {len(order)} sample(s) in the authors' subsample; "
                "the k-variance needs at least 2"
            )
        weights.append(int((labels == c).sum()) / total)
        variances.append(wasserstein1(flat[order[:half]], flat[order[half : 2 * half]]))
        lipschitz.append(1.0 if gradient_normalized else float(norms[order].max()))
    normalizer = sum(w * v * lip for w, v, lip in zip(weights, variances, lipschitz, strict=True))
    if normalizer <= 0.0:
        raise ValueError(
            "features: every class's k-variance (or Lipschitz estimate) is zero, so the margins cannot be normalized"
        )
    return KVMargins(
        margins=margins[:scored] / normalizer,
        classes=classes,
        weights=tuple(weights),
        variances=tuple(variances),
        lipschitz=tuple(lipschitz),
        normalizer=normalizer,
        sample=chosen[:scored],
    )


def _classes(labels: Tensor) -> tuple[int, ...]:
    return tuple(int(c) for c in torch.unique(labels))


def _cloud(name: str, points: Tensor) -> Tensor:
    """``points`` as a finite float64 (n, d) tensor on the CPU, detached, with n >= 1."""
    cloud = torch.as_tensor(points).detach()
    if cloud.ndim != 2 or cloud.shape[0] == 0 or cloud.is_complex():
        raise ValueError(f"{name} must be a non-empty (n, d) point cloud, got shape {tuple(cloud.shape)}")
    cloud = cloud.to(device="cpu", dtype=torch.float64)
    if not bool(torch.isfinite(cloud).all()):
        raise ValueError(f"{name} contains non-finite values (NaN or inf)")
    return cloud


def _check_logits(logits: Tensor) -> None:
    if not isinstance(logits, Tensor) or logits.ndim != 2 or logits.shape[1] < 2:
        raise ValueError(f"logits must be an (n, K) tensor with K >= 2 classes, got {logits!r:.80}")


def _check_labels(labels: Tensor, size: int, classes: int) -> None:
    if not isinstance(labels, Tensor) or labels.dtype not in _INTEGER_DTYPES:
        raise ValueError(f"labels must be an integer tensor of shape ({size},), got {labels!r:.80}")
    if labels.shape != (size,):
        raise ValueError(f"labels must have shape ({size},) (one per sample), got {tuple(labels.shape)}")
    if size and (int(labels.min()) < 0 or int(labels.max()) >= classes):
        low, high = int(labels.min()), int(labels.max())
        raise ValueError(f"labels must lie in [0, {classes - 1}] (K = {classes}), got values in [{low}, {high}]")
