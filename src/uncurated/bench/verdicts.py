"""The verdict rule: held, reversed, absent or inconclusive, from paired differences over seeds.

A claim is measured as a difference ``d`` paired by seed, positive when the
claim holds, with a smallest effect of interest (SESOI) ``D`` declared in
the claims registry before any run. Over ``n`` seeds with mean ``m`` and
standard deviation ``s`` (the seed spread of the paired differences), the
standard error is ``se = s / sqrt(n)`` and two families of tests run at the
report's level :data:`ALPHA`:

* the **difference test**, two-sided Student t on ``m / se`` (H0: no effect);
* the **equivalence test**, TOST (Schuirmann 1987): two one-sided t tests of
  H0 ``d <= -D`` and H0 ``d >= D``; its p-value is the larger of the two.

Holm's step-down correction (Holm 1979) adjusts each family across the
claims of one report, so that the chance of any false *held*, *reversed*
or *absent* in the report stays below ``ALPHA``. Then a claim is

* **held** (**reversed**) when its adjusted difference p-value is below
  ``ALPHA`` and ``m > 0`` (``m < 0``);
* **absent** when it is not, and its adjusted TOST p-value is below
  ``ALPHA``: the effect is within ``±D``, the paper's effect is not here;
* **inconclusive** otherwise: the seeds cannot tell.

Beside each verdict: the minimum detectable effect at 80% power (MDE, the
true difference the two-sided test finds four times in five at this
spread and ``n``, from the noncentral t distribution: 1.31 times the 95%
interval's half-width at ``n = 3``), and the seeds that would reach a verdict
at the observed spread and mean (the smallest ``n`` at which the difference
test or the TOST has 80% power).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

#: The report's level: the family-wise error rate of each family of tests across one report's claims.
ALPHA = 0.05
#: The power the minimum detectable effect and the seeds needed are computed for.
POWER = 0.8
#: The most seeds :func:`seeds_needed` looks for.
MAX_SEEDS = 200

HELD, REVERSED, ABSENT, INCONCLUSIVE = "held", "reversed", "absent", "inconclusive"


@dataclass(frozen=True)
class Tests:
    """One claim's raw statistics: ``p_difference`` (two-sided t) and ``p_equivalence`` (TOST at ``±sesoi``)."""

    mean: float
    std: float
    count: int
    sesoi: float
    p_difference: float
    p_equivalence: float

    @property
    def stderr(self) -> float:
        return self.std / math.sqrt(self.count)


def tests(differences: Sequence[float], sesoi: float) -> Tests:
    """The difference test and the TOST on ``differences`` (at least two, finite) against ``±sesoi``."""
    from scipy.stats import t

    n = len(differences)
    if n < 2:
        raise ValueError(f"the tests need at least 2 paired differences, got {n}")
    if not sesoi > 0:
        raise ValueError(f"sesoi must be > 0, got {sesoi}")
    mean = sum(differences) / n
    std = math.sqrt(sum((d - mean) ** 2 for d in differences) / (n - 1))
    df = n - 1
    if std == 0.0:  # every seed agrees: the tests' statistics are infinite
        p_difference = 0.0 if mean != 0 else 1.0
        p_equivalence = 0.0 if abs(mean) < sesoi else 1.0
        return Tests(mean, std, n, sesoi, p_difference, p_equivalence)
    se = std / math.sqrt(n)
    p_difference = float(2 * t.sf(abs(mean) / se, df))
    p_lower = float(t.sf((mean + sesoi) / se, df))  # H0: d <= -sesoi
    p_upper = float(t.cdf((mean - sesoi) / se, df))  # H0: d >= +sesoi
    return Tests(mean, std, n, sesoi, p_difference, max(p_lower, p_upper))


def holm(p_values: Sequence[float]) -> list[float]:
    """Holm's step-down adjusted p-values (Holm 1979), in the input's order: the ``i``-th smallest p is multiplied
    by ``m - i + 1`` (``i`` from 1), made non-decreasing in that order, and capped at 1."""
    m = len(p_values)
    order = sorted(range(m), key=lambda i: p_values[i])
    adjusted = [1.0] * m
    running = 0.0
    for rank, index in enumerate(order):
        running = max(running, min(1.0, (m - rank) * p_values[index]))
        adjusted[index] = running
    return adjusted


def decide(mean: float, p_difference: float, p_equivalence: float, alpha: float = ALPHA) -> str:
    """The verdict from the (adjusted) p-values, as the module's documentation states it."""
    if p_difference < alpha:
        return HELD if mean > 0 else REVERSED
    if p_equivalence < alpha:
        return ABSENT
    return INCONCLUSIVE


def interval(mean: float, std: float, count: int, level: float = 1 - ALPHA) -> tuple[float, float]:
    """The two-sided ``level`` Student-t interval of the mean difference (NaN bounds below two seeds)."""
    if count < 2:
        return math.nan, math.nan
    half = student_t_quantile(count - 1, 0.5 + level / 2) * std / math.sqrt(count)
    return mean - half, mean + half


def student_t_quantile(degrees_of_freedom: int, level: float) -> float:
    """The ``level`` quantile of Student's t distribution (4.30 at 0.975 for two degrees of freedom)."""
    from scipy.stats import t

    return float(t.ppf(level, degrees_of_freedom))


def mde(std: float, count: int, alpha: float = ALPHA, power: float = POWER) -> float:
    """The minimum detectable effect: the true mean difference that the two-sided level-``alpha`` t test on
    ``count`` paired seeds with spread ``std`` rejects with probability ``power`` (noncentral t)."""
    if count < 2 or not math.isfinite(std):
        return math.nan
    if std == 0.0:
        return 0.0
    return _noncentrality(count, alpha, power) * std / math.sqrt(count)


def _noncentrality(count: int, alpha: float, power: float) -> float:
    from scipy.optimize import brentq
    from scipy.stats import t

    df = count - 1
    critical = float(t.ppf(1 - alpha / 2, df))
    high = critical + 1.0
    while _two_sided_power(critical, df, high) < power:
        high *= 1.5
    return float(brentq(lambda delta: _two_sided_power(critical, df, delta) - power, 0.0, high))


def _two_sided_power(critical: float, df: int, delta: float) -> float:
    """P(|T| > critical) for a noncentral t with ``df`` degrees of freedom and noncentrality ``delta`` >= 0 (a
    far tail scipy cannot evaluate counts as 0, the upper one as 1)."""
    from scipy.stats import nct

    upper, lower = float(nct.sf(critical, df, delta)), float(nct.cdf(-critical, df, delta))
    return (upper if math.isfinite(upper) else 1.0) + (lower if math.isfinite(lower) else 0.0)


def difference_power(mean: float, std: float, count: int, alpha: float = ALPHA) -> float:
    """The power of the two-sided t test on ``count`` seeds when the true difference is ``mean``."""
    from scipy.stats import t

    critical = float(t.ppf(1 - alpha / 2, count - 1))
    return _two_sided_power(critical, count - 1, abs(mean) / (std / math.sqrt(count)))


def equivalence_power(mean: float, std: float, count: int, sesoi: float, alpha: float = ALPHA) -> float:
    """The power of the TOST at ``±sesoi`` on ``count`` seeds when the true difference is ``mean`` (the usual
    approximation: both one-sided tests reject, each from its noncentral t, less the overlap; 0 when negative)."""
    from scipy.stats import nct, t

    df = count - 1
    critical = float(t.ppf(1 - alpha, df))
    se = std / math.sqrt(count)
    upper = float(nct.sf(critical, df, (mean + sesoi) / se))
    lower = float(nct.cdf(-critical, df, (mean - sesoi) / se))
    return max(0.0, upper + lower - 1.0)


def one_sided_power(shift: float, std: float, count: int, alpha: float = ALPHA) -> float:
    """The power of the one-sided t test of "the mean exceeds its null" when the true mean exceeds it by ``shift``."""
    from scipy.stats import nct, t

    df = count - 1
    value = float(nct.sf(float(t.ppf(1 - alpha, df)), df, shift / (std / math.sqrt(count))))
    return value if math.isfinite(value) else float(shift > 0)


def seeds_needed(
    mean: float,
    std: float,
    sesoi: float,
    alpha: float = ALPHA,
    power: float = POWER,
    *,
    above: float | None = None,
) -> int | None:
    """The fewest seeds (2 to :data:`MAX_SEEDS`) at which the difference test or the TOST would reach its verdict
    with probability ``power`` if the true difference were ``mean`` with spread ``std``; ``None`` beyond.
    ``above``: the difference test is one-sided, of ``mean > above`` (a claim of equivalence with chance, refuted
    by an accuracy more than the SESOI above it)."""
    if not (math.isfinite(mean) and math.isfinite(std)):
        return None
    if std == 0.0:
        return 2
    for count in range(2, MAX_SEEDS + 1):
        if above is None:
            difference = difference_power(mean, std, count, alpha)
        else:
            difference = one_sided_power(mean - above, std, count, alpha)
        if difference >= power:
            return count
        if abs(mean) < sesoi and equivalence_power(mean, std, count, sesoi, alpha) >= power:
            return count
    return None
