"""The toy experiment of NUCLR (Wang et al. 2025, Sec. 3.3 and App. G.1): a model with an exact partition function.

Anchors ``x`` are uniform on the upper half unit disk, contrasts ``y`` lie in
the unit square ``Y = [0, 1]^2`` (so ``mu(Y) = 1``), the similarity is
``E(x, y) = x . y`` and the true conditional is the model of Eq. 1,

    p(y | x) = exp(x . y / tau) / Z(x),   Z(x) = h(x_1) h(x_2),   h(a) = tau (e^{a / tau} - 1) / a,  h(0) = 1.

Because ``Z`` is exact, the risk of maximum likelihood (Eq. 2), the true
popularities ``q_j = sum_j' p(y_j | x_j')`` and the true risk ``L`` (Eq. 3)
are all available, and the empirical risk of Eq. 5 can be compared with ``L``
for two approximations of ``q``: GCL's uniform ``q_tilde = n 1`` (Remark 3)
and NUCLR's ``exp(zeta* / tau)`` learned from Eq. 8
(:mod:`uncurated.theory.popularity`). :func:`run_toy` runs the protocol of
App. G.1 over a range of sample sizes ``n``: GCL's generalization error does
not shrink with ``n`` (Theorem 1, Remark 4), NUCLR's approaches that of MLE.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..toy_defaults import NUCLR_FRESH_PAIRS as DEFAULT_FRESH_PAIRS
from ..toy_defaults import NUCLR_SIZES as DEFAULT_SIZES
from ..validation import check_range
from .popularity import mis_risk, solve_popularity


@dataclass(frozen=True)
class ToyRow:
    """The toy at one temperature and sample size: each method's generalization error ``|L_hat - L|``.

    Attributes:
        tau: the temperature of the true model.
        n: the number of training pairs.
        true_risk: ``L`` of Eq. 3, estimated on fresh pairs.
        mle_error: Eq. 2, the exact-partition risk, against ``L``.
        gcl_error: Eq. 5 with the uniform ``q_tilde = n 1`` against ``L``.
        nuclr_error: Eq. 5 with the learned ``q_tilde = exp(zeta* / tau) / Z`` against ``L``.
        popularity_corr: Pearson's correlation of the true ``q`` and NUCLR's ``q_tilde``.
    """

    tau: float
    n: int
    true_risk: float
    mle_error: float
    gcl_error: float
    nuclr_error: float
    popularity_corr: float


def sample_anchors(n: int, rng: np.random.Generator) -> np.ndarray:
    """``n`` anchors uniform on the upper half unit disk, an (n, 2) array (radius ``sqrt(U)``, angle ``pi V``)."""
    _check_count("n", n, 1)
    radius = np.sqrt(rng.random(n))
    angle = np.pi * rng.random(n)
    return np.stack([radius * np.cos(angle), radius * np.sin(angle)], axis=1)


def log_partition(x: np.ndarray, tau: float) -> np.ndarray:
    """``log Z(x) = log h(x_1) + log h(x_2)`` for (m, 2) anchors, any sign of the coordinates.

    With ``t = a / tau``, ``h(a) = (e^t - 1) / t = e^{max(t, 0)} (1 - e^{-|t|}) / |t|``;
    the last factor is computed with ``expm1`` and is 1 at ``t = 0``.
    """
    tau = check_range("tau", tau, 0.0, low_open=True)
    t = _check_points("x", x) / tau
    size = np.abs(t)
    safe = np.where(size > 0, size, 1.0)
    log_h = np.maximum(t, 0.0) + np.where(size > 0, np.log(-np.expm1(-safe) / safe), 0.0)
    return log_h.sum(axis=1)


def partition_function(x: np.ndarray, tau: float) -> np.ndarray:
    """``Z(x) = integral over [0, 1]^2 of exp(x . y / tau) dy`` for (m, 2) anchors (the denominator of Eq. 1)."""
    return np.exp(log_partition(x, tau))


def log_density(x: np.ndarray, y: np.ndarray, tau: float) -> np.ndarray:
    """The (m, k) matrix of ``log p(y_j | x_i) = x_i . y_j / tau - log Z(x_i)`` (Eq. 1)."""
    log_z = log_partition(x, tau)
    return _check_points("x", x) @ _check_points("y", y).T / tau - log_z[:, None]


def sample_contrasts(x: np.ndarray, tau: float, rng: np.random.Generator) -> np.ndarray:
    """One ``y_i ~ p(. | x_i)`` per anchor by rejection sampling, an (m, 2) array.

    The proposal is uniform on the unit square and ``y`` is accepted with
    probability ``exp((x . y - max_y' x . y') / tau)``, where the maximum is
    ``max(x_1, 0) + max(x_2, 0)``; every anchor still waiting draws again.
    """
    tau = check_range("tau", tau, 0.0, low_open=True)
    x = _check_points("x", x)
    best = np.maximum(x, 0.0).sum(axis=1)
    y = np.empty_like(x)
    waiting = np.arange(len(x))
    while waiting.size:
        proposal = rng.random((waiting.size, 2))
        accept_probability = np.exp(((x[waiting] * proposal).sum(axis=1) - best[waiting]) / tau)
        accepted = rng.random(waiting.size) < accept_probability
        y[waiting[accepted]] = proposal[accepted]
        waiting = waiting[~accepted]
    return y


def true_popularity(x: np.ndarray, y: np.ndarray, tau: float) -> np.ndarray:
    """``q_j = sum_j' p(y_j | x_j')`` for each contrast ``y_j`` (the balance heuristic of Eq. 4)."""
    return np.exp(log_density(x, y, tau)).sum(axis=0)


def mle_risk(x: np.ndarray, y: np.ndarray, tau: float) -> float:
    """Eq. 2 on the pairs ``(x_i, y_i)``: ``-(1/n) sum_i tau log p(y_i | x_i)`` with the exact partition function."""
    x, y = _check_points("x", x), _check_points("y", y)
    if x.shape != y.shape:
        raise ValueError(f"x and y must have the same shape (one pair per row), got {x.shape} and {y.shape}")
    return float(np.mean(tau * log_partition(x, tau) - (x * y).sum(axis=1)))


def true_risk(tau: float, rng: np.random.Generator, pairs: int = DEFAULT_FRESH_PAIRS) -> float:
    """``L = E[-tau log p(y | x)]`` of Eq. 3, estimated on ``pairs`` fresh pairs (App. G.1 step 4)."""
    _check_count("pairs", pairs, 1)
    x = sample_anchors(pairs, rng)
    return mle_risk(x, sample_contrasts(x, tau, rng), tau)


def nuclr_popularity(zeta: np.ndarray, q: np.ndarray, tau: float) -> np.ndarray:
    """NUCLR's ``q_tilde = exp(zeta / tau) / Z`` with ``Z = max exp(zeta / tau) / max q`` (App. G.1 step 5).

    The scale uses the true ``q``, which only the toy knows; it shifts Eq. 5
    by a constant (Remark 5) and lets the risk be compared with ``L``.
    """
    tau = check_range("tau", tau, 0.0, low_open=True)
    zeta, q = np.asarray(zeta, dtype=np.float64), np.asarray(q, dtype=np.float64)
    if zeta.ndim != 1 or q.shape != zeta.shape:
        raise ValueError(f"zeta and q must be vectors of the same length, got shapes {zeta.shape} and {q.shape}")
    if not (np.isfinite(zeta).all() and np.isfinite(q).all() and (q > 0).all()):
        raise ValueError("zeta must be finite and q finite and positive")
    log_q_tilde = zeta / tau
    return np.exp(log_q_tilde - log_q_tilde.max() + np.log(q.max()))


def run_toy(
    tau: float,
    sizes: Sequence[int] = DEFAULT_SIZES,
    seed: int = 0,
    *,
    fresh_pairs: int = DEFAULT_FRESH_PAIRS,
    progress: Callable[[ToyRow], None] | None = None,
) -> list[ToyRow]:
    """The protocol of App. G.1 at temperature ``tau``: one :class:`ToyRow` per sample size.

    For each ``n``: draw ``n`` pairs, compute the true ``q``, solve Eq. 8 on
    the true scores ``E_ij = x_i . y_j`` from ``zeta = 0``, and compare three
    empirical risks with the true risk ``L`` (estimated once, on
    ``fresh_pairs`` pairs): MLE (Eq. 2), GCL (Eq. 5 with ``q_tilde = n c 1``,
    ``c = 1``: the importance weight of a uniform proposal on ``Y``, whose
    measure is 1) and NUCLR (Eq. 5 with :func:`nuclr_popularity`).

    Randomness: the fresh pairs come from ``default_rng([seed, 0])`` and the
    sample of size ``n`` from ``default_rng([seed, n])``, so a row depends on
    ``(tau, n, seed, fresh_pairs)`` only, and every temperature sees the same
    anchors. ``progress``, when given, is called with each row as it is done.
    """
    tau = check_range("tau", tau, 0.0, low_open=True)
    _check_count("seed", seed, 0)
    for index, n in enumerate(sizes):
        _check_count(f"sizes[{index}]", n, 2)
    risk = true_risk(tau, np.random.default_rng([seed, 0]), fresh_pairs)
    rows = []
    for n in sizes:
        rng = np.random.default_rng([seed, n])
        x = sample_anchors(n, rng)
        y = sample_contrasts(x, tau, rng)
        scores = x @ y.T
        q = true_popularity(x, y, tau)
        q_tilde = nuclr_popularity(solve_popularity(scores, tau), q, tau)
        row = ToyRow(
            tau=tau,
            n=int(n),
            true_risk=risk,
            mle_error=abs(mle_risk(x, y, tau) - risk),
            gcl_error=abs(mis_risk(scores, np.full(n, float(n)), tau) - risk),
            nuclr_error=abs(mis_risk(scores, q_tilde, tau) - risk),
            popularity_corr=float(np.corrcoef(q, q_tilde)[0, 1]),
        )
        rows.append(row)
        if progress is not None:
            progress(row)
    return rows


def average_over_seeds(runs: Sequence[Sequence[ToyRow]]) -> list[ToyRow]:
    """The mean of each field over runs with different seeds (the same temperature and sizes, in order).

    Averaging absolute errors does not cancel noise, but it smooths the
    curves: at tau = 1 GCL's bias (about 0.01) is the size of one seed's
    sampling noise at these n.
    """
    if not runs:
        raise ValueError("runs must hold at least one run")
    averaged = []
    for rows in zip(*runs, strict=True):
        if len({(row.tau, row.n) for row in rows}) != 1:
            raise ValueError("runs must share their temperatures and sizes, in the same order")
        mean = {
            name: float(np.mean([getattr(row, name) for row in rows]))
            for name in ("true_risk", "mle_error", "gcl_error", "nuclr_error", "popularity_corr")
        }
        averaged.append(ToyRow(tau=rows[0].tau, n=rows[0].n, **mean))
    return averaged


def format_table(rows: Sequence[ToyRow]) -> str:
    """The rows as text: one block per temperature, with columns n, MLE, GCL, NUCLR and corr(q, q~)."""
    blocks = []
    for tau, group in _by_temperature(rows).items():
        lines = [
            f"tau = {tau:g} (true risk L = {group[0].true_risk:.5f})",
            f"{'n':>6}  {'MLE':>8}  {'GCL':>8}  {'NUCLR':>8}  {'corr(q, q~)':>11}",
        ]
        lines += [
            f"{row.n:>6}  {row.mle_error:8.5f}  {row.gcl_error:8.5f}  {row.nuclr_error:8.5f}"
            f"  {row.popularity_corr:11.4f}"
            for row in group
        ]
        blocks.append("\n".join(lines))
    return "\n\n".join(blocks)


def plot_errors(rows: Sequence[ToyRow], path: str | Path) -> Path:
    """Write a PNG of ``|L_hat - L|`` against ``n`` (log scale) for MLE, GCL and NUCLR, one panel per temperature.

    Draws on matplotlib's Agg canvas directly, leaving pyplot's global backend alone. Returns the path.
    """
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    groups = _by_temperature(rows)
    if not groups:
        raise ValueError("rows must hold at least one ToyRow to plot")
    figure = Figure(figsize=(4.5 * len(groups), 3.8), layout="constrained")
    FigureCanvasAgg(figure)
    axes = figure.subplots(1, len(groups), squeeze=False)[0]
    for ax, (tau, group) in zip(axes, groups.items(), strict=True):
        sizes = [row.n for row in group]
        ax.plot(sizes, [row.mle_error for row in group], "o-", label="MLE (exact partition)")
        ax.plot(sizes, [row.gcl_error for row in group], "s-", label="GCL (uniform q~)")
        ax.plot(sizes, [row.nuclr_error for row in group], "^-", label="NUCLR (learned q~)")
        ax.set_xscale("log")
        ax.set_xticks(sizes, [str(n) for n in sizes])
        ax.minorticks_off()
        ax.set_ylim(bottom=0)
        ax.set_title(f"tau = {tau:g}")
        ax.set_xlabel("n (training pairs)")
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("generalization error |L_hat - L|")
    axes[0].legend()
    figure.suptitle("NUCLR toy (Wang et al. 2025, Sec. 3.3)")
    path = Path(path)
    figure.savefig(path, dpi=120)
    return path


def _by_temperature(rows: Sequence[ToyRow]) -> dict[float, list[ToyRow]]:
    groups: dict[float, list[ToyRow]] = {}
    for row in rows:
        groups.setdefault(row.tau, []).append(row)
    return groups


def _check_points(name: str, points: np.ndarray) -> np.ndarray:
    points = np.asarray(points, dtype=np.float64)
    if points.ndim != 2 or points.shape[1] != 2:
        raise ValueError(f"{name} must be an (m, 2) array of points, got shape {points.shape}")
    if not np.isfinite(points).all():
        raise ValueError(f"{name} contains non-finite values (NaN or inf)")
    return points


def _check_count(name: str, value: int, low: int) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise ValueError(f"{name} must be an integer >= {low}, got {value!r}")
    check_range(name, value, low)
