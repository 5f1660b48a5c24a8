"""Concentration of the DCL estimator (Chuang 2023, the thesis's Ch. 3, Sec. 3.2 and Thm. 3.3).

DCL replaces InfoNCE's negative term by an estimate of the expectation over
*true* negatives, ``E_{x^- ~ p_x^-} e^{f(x)^T f(x^-)}``, built from ``N``
unlabeled samples ``u_i ~ p`` and ``M`` positives ``v_i ~ p_x^+`` (eq. 3.6):

    g = max{ (1/tau^-) ( (1/N) sum_i e^{f(x)^T f(u_i)} - tau^+ (1/M) sum_i e^{f(x)^T f(v_i)} ),  e^{-1/t} }.

Theorem 3.3 bounds the resulting error of the loss (eq. 3.7 with Q = N
against the asymptotic loss of eq. 3.5) by

    e^{3/2}/tau^- sqrt(pi / (2N)) + e^{3/2} tau^+/tau^- sqrt(pi / (2M)),

a rate of ``N^{-1/2} + M^{-1/2}`` (the statement's constant; its proof ends
with ``sqrt(2 pi / N)``, twice as large). This module measures that rate on a
latent-class model where the true negative distribution is known exactly:

- ``C`` classes with uniform prior, so ``tau^+ = 1/C``; class ``c``'s
  embeddings are von Mises-Fisher on the unit sphere of ``R^d`` with a random
  mean direction ``mu_c`` and concentration ``kappa``;
- scores ``s = z^T z'`` with temperature ``t = 1`` (the theory's convention,
  under which the bound above holds; the clamp is at ``e^{-1}``);
- the ideal term ``E_{p_x^-} e^{s}`` in closed form: the mean over the other
  classes of the vMF moment generating function ``E e^{a^T z} = C_d(kappa) / C_d(||kappa mu + a||)``.

:func:`run_dcl_concentration` draws, per trial, an anchor ``x`` of a random
class, an independent positive ``x^+``, ``N`` unlabeled samples and ``M``
positives, and reports the mean absolute error of ``g`` against the ideal
term for every ``(N, M)``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from scipy.special import ive
from scipy.stats import vonmises_fisher

from ..toy_defaults import DCL_CLASSES as DEFAULT_CLASSES
from ..toy_defaults import DCL_DIM as DEFAULT_DIM
from ..toy_defaults import DCL_KAPPA as DEFAULT_KAPPA
from ..toy_defaults import DCL_NEGATIVES as DEFAULT_NEGATIVES
from ..toy_defaults import DCL_POSITIVES as DEFAULT_POSITIVES
from ..toy_defaults import DCL_TRIALS as DEFAULT_TRIALS
from ..validation import check_integer, check_range, check_sizes

#: The temperature of the experiment: the theory's ``t = 1`` (scores are plain inner products of unit vectors).
TEMPERATURE = 1.0


@dataclass(frozen=True, eq=False)
class LatentClassModel:
    """``C`` equiprobable latent classes whose unit embeddings are vMF(``means[c]``, ``kappa``) in ``R^d``.

    Attributes:
        means: (C, d) unit mean directions, one per class.
        kappa: the concentration shared by the classes (> 0).
    """

    means: np.ndarray
    kappa: float

    def __post_init__(self) -> None:
        means = np.asarray(self.means, dtype=np.float64)
        if means.ndim != 2 or means.shape[0] < 2 or means.shape[1] < 2:
            raise ValueError(f"means must be a (C, d) array with C >= 2 classes and d >= 2, got shape {means.shape}")
        if not np.allclose(np.linalg.norm(means, axis=1), 1.0):
            raise ValueError("means must be unit vectors (one per row)")
        object.__setattr__(self, "means", means)
        object.__setattr__(self, "kappa", check_range("kappa", self.kappa, 0.0, low_open=True))

    @classmethod
    def random(cls, classes: int, dim: int, kappa: float, rng: np.random.Generator) -> LatentClassModel:
        """A model with ``classes`` mean directions uniform on the sphere of ``R^dim``."""
        check_integer("classes", classes, 2)
        check_integer("dim", dim, 2)
        directions = rng.standard_normal((classes, dim))
        return cls(directions / np.linalg.norm(directions, axis=1, keepdims=True), kappa)

    @property
    def classes(self) -> int:
        return self.means.shape[0]

    @property
    def tau_plus(self) -> float:
        """``tau^+ = rho(c) = 1/C``: the probability that a sample of ``p`` shares the anchor's class."""
        return 1.0 / self.classes

    def sample(self, labels: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """One embedding per entry of the integer array ``labels``, an array of shape ``labels.shape + (d,)``."""
        labels = np.asarray(labels)
        out = np.empty(labels.shape + (self.means.shape[1],))
        for c, mean in enumerate(self.means):
            chosen = labels == c
            out[chosen] = vonmises_fisher(mean, self.kappa).rvs(int(chosen.sum()), random_state=rng)
        return out

    def sample_unlabeled(self, shape: tuple[int, ...], rng: np.random.Generator) -> np.ndarray:
        """Samples of the marginal ``p``: a uniform class, then its vMF."""
        return self.sample(rng.integers(self.classes, size=shape), rng)

    def ideal_negative_term(
        self, anchors: np.ndarray, labels: np.ndarray, temperature: float = TEMPERATURE
    ) -> np.ndarray:
        """(n,) ``E_{x^- ~ p_x^-} e^{x^T x^- / t}``, exactly, for (n, d) anchors of the given classes.

        The true negatives are the other ``C - 1`` classes, equally likely: the
        term is the mean over ``c != label`` of the vMF MGF at ``x / t``.
        """
        temperature = check_range("temperature", temperature, 0.0, low_open=True)
        terms = np.stack([vmf_log_mgf(anchors / temperature, mean, self.kappa) for mean in self.means], axis=1)
        others = np.arange(self.classes)[None, :] != np.asarray(labels)[:, None]
        return (np.exp(terms) * others).sum(axis=1) / (self.classes - 1)


@dataclass(frozen=True)
class ConcentrationRow:
    """The DCL estimator at one ``(N, M)``, averaged over trials.

    Attributes:
        negatives: ``N``, the unlabeled samples per anchor.
        positives: ``M``, the positives per anchor.
        trials: the anchors averaged over.
        ideal: the mean of the ideal term ``E_{p_x^-} e^{s}`` over the trials' anchors.
        error: the mean of ``|g - E_{p_x^-} e^{s}|`` (eq. 3.6 against the ideal term).
        biased_error: the same for InfoNCE's term ``(1/N) sum_i e^{s(x, u_i)}`` (``tau^+ = 0``);
            it does not vanish.
        loss_error: the mean of ``|log(e^{s+} + N g) - log(e^{s+} + N E_{p_x^-} e^{s})|``, the
            per-anchor loss error that Thm. 3.3 bounds.
        bound: Thm. 3.3's bound on the loss error (as stated).
        clamped: the fraction of trials where ``g`` sits at the clamp ``e^{-1/t}``.
    """

    negatives: int
    positives: int
    trials: int
    ideal: float
    error: float
    biased_error: float
    loss_error: float
    bound: float
    clamped: float


def vmf_log_mgf(a: np.ndarray, mean: np.ndarray, kappa: float) -> np.ndarray:
    """``log E[e^{a^T z}]`` for ``z ~ vMF(mean, kappa)`` on the sphere of ``R^d``, for each row of (n, d) ``a``.

    ``E e^{a^T z} = C_d(kappa) / C_d(r)`` with ``r = ||kappa mean + a||`` and
    ``C_d(k) = k^nu / ((2 pi)^{d/2} I_nu(k))``, ``nu = d/2 - 1``; computed
    with the exponentially scaled Bessel function ``ive`` so large arguments stay finite.
    """
    kappa = check_range("kappa", kappa, 0.0, low_open=True)
    a = np.atleast_2d(np.asarray(a, dtype=np.float64))
    nu = a.shape[1] / 2.0 - 1.0
    r = np.linalg.norm(kappa * np.asarray(mean, dtype=np.float64) + a, axis=1)
    return nu * (math.log(kappa) - np.log(r)) + np.log(ive(nu, r)) + r - math.log(ive(nu, kappa)) - kappa


def dcl_negative_term(
    negative_scores: np.ndarray, positive_scores: np.ndarray, tau_plus: float, temperature: float = TEMPERATURE
) -> np.ndarray:
    """(R,) DCL's ``g`` of eq. 3.6 from (R, N) scores ``s(x, u_i)`` and (R, M) scores ``s(x, v_i)``.

    ``g = max{(mean_i e^{s(x, u_i)} - tau^+ mean_i e^{s(x, v_i)}) / (1 - tau^+), e^{-1/t}}``.
    With ``tau_plus = 0`` it is InfoNCE's mean over the negatives (the clamp
    never binds, as ``e^{s} >= e^{-1/t}`` for unit vectors).
    """
    tau_plus = check_range("tau_plus", tau_plus, 0.0, 1.0, high_open=True)
    temperature = check_range("temperature", temperature, 0.0, low_open=True)
    negative_scores = _check_scores("negative_scores", negative_scores)
    positive_scores = _check_scores("positive_scores", positive_scores)
    if negative_scores.shape[0] != positive_scores.shape[0]:
        raise ValueError(
            "negative_scores and positive_scores must have one row per anchor, "
            f"got {negative_scores.shape[0]} and {positive_scores.shape[0]} rows"
        )
    bracket = np.exp(negative_scores).mean(axis=1) - tau_plus * np.exp(positive_scores).mean(axis=1)
    return np.maximum(bracket / (1.0 - tau_plus), math.exp(-1.0 / temperature))


def theorem_bound(negatives: int, positives: int, tau_plus: float) -> float:
    """Thm. 3.3 (t = 1): ``e^{3/2}/tau^- sqrt(pi/(2N)) + e^{3/2} tau^+/tau^- sqrt(pi/(2M))``."""
    negatives = check_integer("negatives", negatives, 1)
    positives = check_integer("positives", positives, 1)
    tau_plus = check_range("tau_plus", tau_plus, 0.0, 1.0, high_open=True)
    tau_minus = 1.0 - tau_plus
    return (
        math.exp(1.5)
        / tau_minus
        * (math.sqrt(math.pi / (2 * negatives)) + tau_plus * math.sqrt(math.pi / (2 * positives)))
    )


def run_dcl_concentration(
    sizes_N: Sequence[int] = DEFAULT_NEGATIVES,
    sizes_M: Sequence[int] = DEFAULT_POSITIVES,
    trials: int = DEFAULT_TRIALS,
    seed: int = 0,
    *,
    classes: int = DEFAULT_CLASSES,
    dim: int = DEFAULT_DIM,
    kappa: float = DEFAULT_KAPPA,
) -> list[ConcentrationRow]:
    """The error of DCL's estimator against the ideal term, one :class:`ConcentrationRow` per ``(N, M)``.

    The estimator uses the model's true ``tau^+ = 1/classes``. Every trial
    draws its anchor, positive, ``max(sizes_N)`` unlabeled samples and
    ``max(sizes_M)`` positives once, and a cell ``(N, M)`` uses the first ``N``
    and ``M`` of them (common random numbers: the curves are smoother than
    independent draws would make them, and each cell's mean is still unbiased).
    Everything comes from ``numpy.random.default_rng(seed)``, so the rows depend
    on the arguments only. Rows are ordered by ``N``, then ``M``.
    """
    sizes_N = check_sizes("sizes_N", sizes_N)
    sizes_M = check_sizes("sizes_M", sizes_M)
    trials = check_integer("trials", trials, 1)
    rng = np.random.default_rng(check_integer("seed", seed, 0))
    model = LatentClassModel.random(classes, dim, kappa, rng)
    labels = rng.integers(model.classes, size=trials)
    anchors = model.sample(labels, rng)
    positive_score = (model.sample(labels, rng) * anchors).sum(axis=1) / TEMPERATURE
    positive_views = model.sample(np.repeat(labels[:, None], max(sizes_M), axis=1), rng)
    unlabeled = model.sample_unlabeled((trials, max(sizes_N)), rng)
    view_scores = np.einsum("td,tmd->tm", anchors, positive_views) / TEMPERATURE
    unlabeled_scores = np.einsum("td,tnd->tn", anchors, unlabeled) / TEMPERATURE
    ideal = model.ideal_negative_term(anchors, labels)
    rows = []
    for n in sizes_N:
        biased = np.exp(unlabeled_scores[:, :n]).mean(axis=1)
        for m in sizes_M:
            g = dcl_negative_term(unlabeled_scores[:, :n], view_scores[:, :m], model.tau_plus)
            loss_gap = np.logaddexp(positive_score, np.log(n * g)) - np.logaddexp(positive_score, np.log(n * ideal))
            rows.append(
                ConcentrationRow(
                    negatives=n,
                    positives=m,
                    trials=trials,
                    ideal=float(ideal.mean()),
                    error=float(np.abs(g - ideal).mean()),
                    biased_error=float(np.abs(biased - ideal).mean()),
                    loss_error=float(np.abs(loss_gap).mean()),
                    bound=theorem_bound(n, m, model.tau_plus),
                    clamped=float((g <= math.exp(-1.0 / TEMPERATURE)).mean()),
                )
            )
    return rows


def loglog_slope(sizes: Sequence[float], errors: Sequence[float]) -> float:
    """The least-squares slope of ``log(error)`` against ``log(size)``: -1/2 for an ``size^{-1/2}`` rate."""
    x, y = np.asarray(sizes, dtype=np.float64), np.asarray(errors, dtype=np.float64)
    if x.ndim != 1 or x.shape != y.shape or len(x) < 2:
        raise ValueError(f"sizes and errors must be vectors of the same length >= 2, got {x.shape} and {y.shape}")
    if not ((x > 0).all() and (y > 0).all()):
        raise ValueError("sizes and errors must be positive to take logarithms")
    if np.unique(x).size < 2:
        raise ValueError("sizes must hold at least two distinct values to fit a slope")
    return float(np.polyfit(np.log(x), np.log(y), 1)[0])


def format_table(rows: Sequence[ConcentrationRow]) -> str:
    """The rows as text: the mean absolute error of ``g`` on a grid of ``N`` (rows) by ``M`` (columns).

    Each line also shows the biased (InfoNCE) term's error and the slope of
    the error against ``M``; the last line, the slope against ``N`` per ``M``.
    """
    if not rows:
        raise ValueError("rows must hold at least one ConcentrationRow")
    grid = {(row.negatives, row.positives): row for row in rows}
    negatives = sorted({row.negatives for row in rows})
    positives = sorted({row.positives for row in rows})
    lines = [
        f"DCL estimator error |g - E_{{p_x^-}} e^s|, mean over {rows[0].trials} anchors "
        f"(ideal term ~ {rows[0].ideal:.4f})",
        f"{'N | M':>7}" + "".join(f"  {f'M={m}':>9}" for m in positives) + f"  {'biased':>9}  {'slope(M)':>8}",
    ]
    for n in negatives:
        cells = [grid.get((n, m)) for m in positives]
        line = f"{n:>7}" + "".join(f"  {c.error:9.5f}" if c else f"  {'-':>9}" for c in cells)
        present = [c for c in cells if c]
        slope = _slope([c.positives for c in present], [c.error for c in present])
        lines.append(line + f"  {present[0].biased_error:9.5f}  {slope:>8}")
    slopes = []
    for m in positives:
        present = [grid[(n, m)] for n in negatives if (n, m) in grid]
        slopes.append(_slope([c.negatives for c in present], [c.error for c in present]))
    lines.append(f"{'slope(N)':>7}" + "".join(f"  {s:>9}" for s in slopes))
    return "\n".join(lines)


def plot_concentration(rows: Sequence[ConcentrationRow], path: str | Path) -> Path:
    """Write a PNG of the error against ``N`` (log-log): one line per ``M``, the biased term and ``N^{-1/2}``.

    Draws on matplotlib's Agg canvas directly, leaving pyplot's global backend alone. Returns the path.
    """
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    if not rows:
        raise ValueError("rows must hold at least one ConcentrationRow to plot")
    figure = Figure(figsize=(5.5, 4.2), layout="constrained")
    FigureCanvasAgg(figure)
    ax = figure.subplots()
    negatives = sorted({row.negatives for row in rows})
    for m in sorted({row.positives for row in rows}):
        line = sorted((row for row in rows if row.positives == m), key=lambda row: row.negatives)
        ax.plot([row.negatives for row in line], [row.error for row in line], "o-", label=f"DCL, M = {m}")
    biased = {row.negatives: row.biased_error for row in rows}
    ax.plot(negatives, [biased[n] for n in negatives], "k--", label="biased (InfoNCE, tau+ = 0)")
    first = min(rows, key=lambda row: (row.negatives, -row.positives))
    reference = [first.error * math.sqrt(first.negatives / n) for n in negatives]
    ax.plot(negatives, reference, ":", color="gray", label=r"$N^{-1/2}$")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xticks(negatives, [str(n) for n in negatives])
    ax.minorticks_off()
    ax.set_xlabel("N (unlabeled samples per anchor)")
    ax.set_ylabel(r"mean $|g - E_{p_x^-} e^{s}|$")
    ax.set_title(f"DCL estimator error (thesis Thm. 3.3), {first.trials} anchors")
    ax.grid(alpha=0.3)
    ax.legend(fontsize="small")
    path = Path(path)
    figure.savefig(path, dpi=120)
    return path


def _slope(sizes: list[int], errors: list[float]) -> str:
    """The log-log slope formatted for the table, or ``-`` with fewer than two sizes."""
    return f"{loglog_slope(sizes, errors):+.3f}" if len(set(sizes)) >= 2 else "-"


def _check_scores(name: str, scores: np.ndarray) -> np.ndarray:
    scores = np.asarray(scores, dtype=np.float64)
    if scores.ndim != 2 or scores.shape[1] == 0:
        raise ValueError(f"{name} must be an (anchors, samples) array with samples >= 1, got shape {scores.shape}")
    if not np.isfinite(scores).all():
        raise ValueError(f"{name} contains non-finite values (NaN or inf)")
    return scores
