"""Coupon-collector quantities of Nozawa & Sato 2021, "Understanding Negative Samples in Instance Discriminative ...".

An anchor and its ``K`` negatives carry ``K + 1`` latent classes drawn i.i.d.
from a class distribution ``rho`` over ``C`` classes (Def. 1). Four numbers
of that draw enter the paper's bounds:

- :func:`coverage_probability`: ``v_n``, the probability that ``n`` draws
  contain every class (Def. 7, Eq. 9). The bound of Theorem 8 (Eq. 10) uses
  ``v_{K+1}``, so pass ``draws = K + 1`` (the anchor and its ``K`` negatives).
- :func:`expected_draws`: ``E[K + 1]``, the expected number of draws until
  every class has been seen (App. E, Eq. 26; Table 3 prints its ceiling).
- :func:`collision_probability`: ``tau_K = P(Col != 0)``, the probability
  that at least one of the ``K`` negatives shares the anchor's class
  (Prop. 6, Eq. 8).
- :func:`expected_log_collisions`: ``E[ln(Col + 1)]``, the collision term of
  Eq. 10 (and ``tau_K E[ln(Col + 1) | Col != 0]`` of Eq. 8, which is the same
  number because ``ln 1 = 0``).

Every function takes either ``classes=C`` (uniform ``rho``, as in the
paper's CIFAR and AGNews experiments) or ``frequencies=rho`` (any positive
distribution, as for ImageNet in Table 3), and ``draws``/``negatives`` as an
integer or an integer array (the result then has the array's shape).

Everything is numpy float64. The naive evaluations cancel catastrophically
(inclusion-exclusion for ``v`` gives values near 1e13 at ``C = 100``), so every sum here has only non-negative terms:

- uniform ``v_n``: the recursion over the number ``j`` of distinct classes
  seen, ``p_n(j) = p_{n-1}(j) j / C + p_{n-1}(j - 1) (C - j + 1) / C``
  ``O(N C)`` for all ``n <= N``;
- non-uniform ``v_n``: a recursion over classes of binomial mixtures,
  ``O(C N^2)`` (see :func:`coverage_probability`);
- ``tau_K``: ``sum_c rho_c (1 - (1 - rho_c)^K)`` with ``expm1``/``log1p``;
- ``E[ln(Col + 1)]``: binomial probabilities from log-gamma, ``O(C K)``.
"""

from __future__ import annotations

import math
from numbers import Integral

import numpy as np

from ..validation import check_integer

#: How far ``frequencies`` may sum from 1 before it is rejected.
FREQUENCY_TOLERANCE = 1e-9

# Entries of the (n, j) weight matrix built at once by the non-uniform recursion.
_BLOCK_ENTRIES = 1 << 22


def coverage_probability(
    draws: int | np.ndarray,
    classes: int | None = None,
    frequencies: np.ndarray | None = None,
) -> float | np.ndarray:
    """``v_n``, the probability that ``n = draws`` i.i.d. classes contain all ``C`` classes (Def. 7, Eq. 9).

    For Theorem 8 (Eq. 10) pass ``draws = K + 1``: the anchor and its ``K``
    negatives. The paper's "``v_{K=32} ~ 0.719``" (Sec. 4.1, CIFAR-10) is
    ``coverage_probability(33, classes=10) = 0.7186``, while Table 1's
    column "K+1=32" is ``coverage_probability(32, classes=10) = 0.6910``:
    the paper indexes ``v`` both ways.

    Eq. 9 writes ``v_K = sum_{n<=K} P(T = n)``, ``T`` the draw that completes
    the collection, i.e. the coupon collector's CDF ``P(T <= K)``. Its
    alternating double sum (equivalently the inclusion-exclusion
    ``sum_m (-1)^m binom(C, m) (1 - m/C)^K``) cancels to garbage in float64
    for ``C = 100``; this function uses recursions whose terms are all
    non-negative, so each step is a convex combination and errors do not
    grow by cancellation: relative error about 1e-14 for uniform classes and
    about 1e-12 for given frequencies, whose binomial weights come from
    log-gamma (a result below ~1e-308 underflows to 0, which is its value to
    float64 precision anyway).

    - ``classes=C`` (uniform): the probabilities ``p_n(j)`` of having seen
      ``j`` distinct classes after ``n`` draws obey
      ``p_n(j) = p_{n-1}(j) j / C + p_{n-1}(j-1) (C - j + 1) / C`` and
      ``v_n = p_n(C)``. Cost ``O(N C)`` time and ``O(C)``
      memory for all ``n <= N = max(draws)``.
    - ``frequencies=rho``: adds the classes one at a time. With ``S`` the
      classes added so far, ``g_S(n)`` is the probability that ``n`` draws
      conditioned to fall in ``S`` cover ``S``; adding class ``c`` with
      ``q = rho_c / (rho(S) + rho_c)`` gives
      ``g_{S+c}(n) = sum_{k=1}^{n} Binom(k; n, q) g_S(n - k)`` (``k`` draws
      of ``c`` among ``n``), and ``v_n = g_C(n)``. This is ``n!`` times the
      coefficient of ``t^n`` in ``prod_c (exp(rho_c t) - 1)``, evaluated as
      binomial mixtures. Cost ``O(C N^2)`` time (one ``exp`` per entry of an
      ``N x N`` matrix per class) and ``O(C N)`` memory plus blocks of about
      4M matrix entries: under 1 s for ``C = 100``, ``N = 1024``.

    Returns a float for an integer ``draws`` and an array of ``draws``'s
    shape otherwise.
    """
    draws_array, scalar = _check_counts("draws", draws, low=1)
    rho = _class_distribution(classes, frequencies)
    top = int(draws_array.max(initial=1))
    if isinstance(rho, int):
        table = _uniform_coverage_table(rho, top)
    else:
        table = _coverage_table(rho, top)
    return _shape_like(table[draws_array], scalar)


def expected_draws(classes: int | None = None, frequencies: np.ndarray | None = None) -> float:
    """``E[K + 1]``, the expected number of i.i.d. draws until every class is seen (App. E, Eq. 26).

    Table 3 ("The expected number of samples to draw all supervised
    classes") prints ``ceil(expected_draws(...))``: 9, 30 and 519 for
    ``C = 4, 10, 100``. The quantity is the number of *draws*, i.e. anchor
    plus negatives (``K + 1``); App. F.4's "more than 26 030 negative
    samples" for Wiki-3029 is the same ceiling, ``ceil(3029 H_3029)``.

    - ``classes=C`` (uniform): the exact ``C H_C`` (harmonic number),
      summed with :func:`math.fsum`.
    - ``frequencies=rho``: Eq. 26,
      ``int_0^inf (1 - prod_c (1 - exp(-rho_c x))) dx``, with the integrand
      evaluated as ``-expm1(sum_c log1p(-exp(-rho_c x)))`` (no cancellation
      where it is small) and integrated by 32-point Gauss-Legendre on 128
      equal panels of ``[0, X]``. ``X`` is the largest
      ``(ln(C / rho_c) + 40) / rho_c``, which bounds the neglected tail by
      ``sum_c exp(-rho_c X) / rho_c <= e^-40``. The integrand is smooth
      and varies on the scale ``1 / min(rho)``, which each panel resolves;
      cost ``O(4096 C)``. Relative error about 1e-13 (tested against
      ``C H_C`` and exact inclusion-exclusion). The paper's ImageNet value
      (7 709) needs ImageNet's class counts, which are not part of this
      library.
    """
    rho = _class_distribution(classes, frequencies)
    if isinstance(rho, int):
        return rho * math.fsum(1.0 / k for k in range(1, rho + 1))
    return _eq26_integral(rho)


def collision_probability(
    negatives: int | np.ndarray,
    classes: int | None = None,
    frequencies: np.ndarray | None = None,
) -> float | np.ndarray:
    """``tau_K = P(Col != 0)`` for ``K = negatives`` (Prop. 6, Eq. 8).

    ``Col = sum_k 1[c = c_k^-]`` counts the negatives that share the
    anchor's class; anchor and negatives are i.i.d. ``rho``. So
    ``tau_K = sum_c rho_c (1 - (1 - rho_c)^K)``, which is
    ``1 - (1 - 1/C)^K`` for uniform classes (Sec. 3.2; it reproduces the
    paper's tau rows to 2 decimals). Computed as
    ``sum_c rho_c * -expm1(K log1p(-rho_c))``: every term is non-negative
    and small values keep their relative precision.

    Note the index: the paper's "``tau_{K=32} ~ 0.967``" (Sec. 3.3) is
    ``collision_probability(32, classes=10) = 0.9657``, while Table 1's
    column "K+1=32" is ``collision_probability(31, classes=10) = 0.9618``
    (the paper indexes ``tau`` both ways). ``negatives = 0`` gives 0.
    """
    counts, scalar = _check_counts("negatives", negatives, low=0)
    rho, weights = _anchor_classes(_class_distribution(classes, frequencies))
    k = counts.reshape(-1, 1).astype(np.float64)
    with np.errstate(invalid="ignore", divide="ignore"):
        # rho_c = 1 (a single class) gives log1p(-1) = -inf: every negative collides.
        hit = np.where(k == 0, 0.0, -np.expm1(k * np.log1p(-rho)))
    tau = hit @ weights
    return _shape_like(np.clip(tau, 0.0, 1.0).reshape(counts.shape), scalar)


def expected_log_collisions(
    negatives: int | np.ndarray,
    classes: int | None = None,
    frequencies: np.ndarray | None = None,
) -> float | np.ndarray:
    """``E[ln(Col + 1)]`` for ``K = negatives``: the collision term of Eq. 10.

    Given the anchor's class ``c``, ``Col ~ Binomial(K, rho_c)``, so
    ``E[ln(Col + 1)] = sum_c rho_c sum_{k=0}^{K} Binom(k; K, rho_c) ln(k + 1)``.
    It also equals Eq. 8's ``tau_K E[ln(Col + 1) | Col != 0]`` because
    ``ln 1 = 0``: the tables' "†Collision" row, of which the
    proposed bound's collision is half.

    These are draws *with* replacement. The paper's †Collision rows were
    measured on finite, class-balanced validation sets (groups drawn without
    replacement) and sit up to 0.005 below these values for CIFAR-100
    (0.697 here versus 0.692 hypergeometric and 0.69
    printed at ``K + 1 = 128``).

    Binomial probabilities come from log-gamma (all terms non-negative);
    cost ``O(C K)`` per distinct ``K``.
    """
    counts, scalar = _check_counts("negatives", negatives, low=0)
    rho, weights = _anchor_classes(_class_distribution(classes, frequencies))
    flat = counts.reshape(-1)
    values = np.empty(flat.shape, dtype=np.float64)
    cache: dict[int, float] = {}
    for index, k in enumerate(flat.tolist()):
        if k not in cache:
            log_counts = np.log1p(np.arange(k + 1, dtype=np.float64))
            cache[k] = float(weights @ (_binomial_pmf(k, rho) @ log_counts))
        values[index] = cache[k]
    return _shape_like(values.reshape(counts.shape), scalar)


# ---------------------------------------------------------------------------
# Recursions and the Eq. 26 integral


def _uniform_coverage_table(classes: int, top: int) -> np.ndarray:
    """``v_n`` for ``n = 0..top`` and uniform classes, by the recursion over distinct classes seen."""
    table = np.zeros(top + 1, dtype=np.float64)
    seen = np.arange(classes + 1, dtype=np.float64)
    stay = seen / classes  # P(the next draw repeats one of j seen classes)
    new = (classes - seen + 1) / classes  # P(it is new | j - 1 seen), for j >= 1
    p = np.zeros(classes + 1, dtype=np.float64)
    p[0] = 1.0
    for n in range(1, top + 1):
        shifted = np.empty_like(p)
        shifted[0] = 0.0
        shifted[1:] = p[:-1] * new[1:]
        p = p * stay + shifted
        table[n] = p[classes]
    return table


def _coverage_table(rho: np.ndarray, top: int) -> np.ndarray:
    """``v_n`` for ``n = 0..top`` and class frequencies ``rho``, by the recursion over classes.

    ``stages[s]`` is ``g_S`` for the first ``s + 1`` classes. Row ``n`` of a
    stage needs only rows ``< n`` of the stage before, so the rows are taken
    in blocks (outer loop) and the classes inside a block (inner loop): the
    class-independent part of the log-weights is built once per block.
    """
    log_factorial = _log_factorials(top)
    stages = np.zeros((len(rho), top + 1), dtype=np.float64)
    # One class: g(n) = 1 for n >= 1 (every draw is that class), g(0) = 0.
    stages[0, 1:] = 1.0
    cumulative = np.cumsum(rho)
    q = rho[1:] / cumulative[1:]
    log_q, log_not_q = np.log(q), np.log1p(-q)
    rows_per_block = max(1, _BLOCK_ENTRIES // (top + 1))
    for start in range(1, top + 1, rows_per_block):
        stop = min(top + 1, start + rows_per_block)
        rows = np.arange(start, stop)
        j = np.arange(stop - 1)  # g(j) for j = n - k <= n - 1
        k = rows[:, None] - j[None, :]  # draws of the added class, k >= 1
        valid = k >= 1
        k = np.where(valid, k, 0).astype(np.float64)
        log_choose = np.where(
            valid,
            log_factorial[rows][:, None] - log_factorial[j][None, :] - log_factorial[k.astype(np.int64)],
            -np.inf,
        )
        jf = j.astype(np.float64)[None, :]
        for s in range(1, len(rho)):
            weight = np.exp(log_choose + k * log_q[s - 1] + jf * log_not_q[s - 1])
            stages[s, rows] = weight @ stages[s - 1, : stop - 1]
    return np.clip(stages[-1], 0.0, 1.0)


def _eq26_integral(rho: np.ndarray, panels: int = 128, order: int = 32) -> float:
    """Eq. 26, ``int_0^inf (1 - prod_c (1 - exp(-rho_c x))) dx``, by panelled Gauss-Legendre."""
    upper = float(np.max((np.log(len(rho) / rho) + 40.0) / rho))
    nodes, weights = np.polynomial.legendre.leggauss(order)
    edges = np.linspace(0.0, upper, panels + 1)
    half = np.diff(edges) / 2.0
    total = []
    for left, width in zip(edges[:-1], half, strict=True):
        x = left + width * (nodes + 1.0)
        log_prod = np.log1p(-np.exp(-np.outer(x, rho))).sum(axis=1)
        total.append(width * float(weights @ -np.expm1(log_prod)))
    return math.fsum(total)


def _binomial_pmf(trials: int, p: np.ndarray) -> np.ndarray:
    """``Binom(k; trials, p_c)`` as a ``(len(p), trials + 1)`` matrix, from log-gamma; exact at ``p = 1``."""
    k = np.arange(trials + 1, dtype=np.float64)
    log_factorial = _log_factorials(trials)
    log_choose = log_factorial[trials] - log_factorial - log_factorial[::-1]
    p = p.reshape(-1, 1)
    with np.errstate(divide="ignore", invalid="ignore"):
        # 0 * log(0) is taken as 0 (the k = trials term when p = 1).
        log_not_p = np.log1p(-p)
        failures = trials - k
        log_pmf = log_choose + k * np.log(p) + np.where(failures == 0, 0.0, failures * log_not_p)
    return np.exp(log_pmf)


def _log_factorials(top: int) -> np.ndarray:
    """``ln(n!)`` for ``n = 0..top`` from :func:`math.lgamma` (accurate to a few ulps each)."""
    return np.array([math.lgamma(n + 1.0) for n in range(top + 1)], dtype=np.float64)


# ---------------------------------------------------------------------------
# Argument checks


def _class_distribution(classes: int | None, frequencies: np.ndarray | None) -> int | np.ndarray:
    """Return ``C`` for uniform classes or the checked frequency vector; exactly one must be given."""
    if (classes is None) == (frequencies is None):
        raise ValueError("give exactly one of classes (uniform classes) and frequencies (a class distribution)")
    if classes is not None:
        return check_integer("classes", classes, 1)
    rho = np.asarray(frequencies, dtype=np.float64)
    if rho.ndim != 1 or rho.size < 1:
        raise ValueError(f"frequencies must be a non-empty 1-D array (one entry per class), got shape {rho.shape}")
    if not np.isfinite(rho).all() or not (rho > 0).all():
        raise ValueError(f"frequencies must be in (0, 1] elementwise, got minimum {np.nanmin(rho):g}")
    total = float(rho.sum())
    if abs(total - 1.0) > FREQUENCY_TOLERANCE:
        raise ValueError(f"frequencies must sum to 1 (within {FREQUENCY_TOLERANCE:g}), got sum {total!r}")
    return rho / total


def _anchor_classes(rho: int | np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The anchor's class distribution as (a negative's hit probability, weight) pairs.

    Uniform classes all look alike, so one pair ``(1/C, 1)`` stands for all
    ``C`` classes and the cost does not grow with ``C``.
    """
    if isinstance(rho, int):
        return np.array([1.0 / rho]), np.array([1.0])
    return rho, rho


def _check_counts(name: str, value: int | np.ndarray, low: int) -> tuple[np.ndarray, bool]:
    """Return ``value`` as an int64 array and whether it was a scalar; every entry must be an integer ``>= low``."""
    if isinstance(value, Integral) and not isinstance(value, bool):
        return np.asarray(check_integer(name, value, low), dtype=np.int64), True
    array = np.asarray(value)
    if array.dtype == bool or not np.issubdtype(array.dtype, np.integer):
        raise ValueError(f"{name} must be an integer or an integer array with entries >= {low}, got {value!r:.80}")
    if array.size and int(array.min()) < low:
        raise ValueError(f"{name} must be an integer >= {low}, got minimum {int(array.min())}")
    return array.astype(np.int64), False


def _shape_like(values: np.ndarray, scalar: bool) -> float | np.ndarray:
    return float(values) if scalar else np.asarray(values, dtype=np.float64)
