"""The claims table: each claim of the registry measured on the bench's runs, checked, and judged.

For each claim of :data:`~uncurated.bench.registry.REGISTRY`, in order:

1. its paired differences over seeds, as its declaration's ``kind`` says;
   none: **not measured**;
2. its manipulation checks (:mod:`.manipulation`); one failed: **no verdict:
   manipulation failed**, with the failed check's figure; one that could
   not be measured (a run that logged nothing to check it with): **no
   verdict: manipulation not checked**;
3. its suite's learning gate (:mod:`.gate`); not passed: **no verdict (its
   suite did not learn)**;
4. fewer than :data:`~uncurated.bench.registry.MIN_SEEDS` seeds: **no
   verdict (n = k)**;
5. every claim left is tested together (:mod:`.verdicts`: the difference
   test and the TOST at the claim's SESOI, Holm-adjusted across these claims)
   and is **held**, **reversed**, **absent** or **inconclusive**.

A ``near_chance`` claim ("collapses") is an equivalence claim: *held* when the
TOST puts its accuracy within ``±SESOI`` of chance, *reversed* when a one-sided
test puts it more than the SESOI above chance, else inconclusive.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace

from . import verdicts
from .gate import Gate
from .manipulation import CheckResult, failed, run_checks, unmeasured
from .registry import CHANCE, MIN_SEEDS, REGISTRY, ClaimSpec
from .results import paired_differences, per_seed, summarize

NOT_MEASURED, NO_VERDICT = "not measured", "no verdict"
HELD, REVERSED, ABSENT, INCONCLUSIVE = verdicts.HELD, verdicts.REVERSED, verdicts.ABSENT, verdicts.INCONCLUSIVE
MANIPULATION_FAILED = "manipulation failed"
MANIPULATION_UNCHECKED = "manipulation not checked"
#: The status of a row that passed its checks, gate and seed count, until the tests judge it.
_PENDING = "pending"

#: ``lookup(suite, role, objective_key)`` -> ``{seed: report}`` of that arm (empty when it did not run).
Lookup = Callable[[str, str, str], dict]


@dataclass(frozen=True)
class Verdict:
    """A claim's statistics and verdict. ``low``/``high``: the 95% t interval; ``mde``: the 80%-power minimum
    detectable effect and ``seeds_needed`` the seeds for a verdict at the observed spread, both at the level of
    Holm's first step (the report's level over the claims tested) for a tested claim, at the report's level for
    a row without a verdict; ``p_*`` are Holm-adjusted (NaN for a row without a verdict)."""

    mean: float
    std: float
    count: int
    verdict: str
    reason: str = ""
    low: float = math.nan
    high: float = math.nan
    mde: float = math.nan
    seeds_needed: int | None = None
    fraction: float = math.nan
    p_difference: float = math.nan
    p_equivalence: float = math.nan

    @property
    def label(self) -> str:
        """The verdict as the table shows it: ``"no verdict (n = 1)"`` names what is missing."""
        if self.verdict == NO_VERDICT:
            manipulation = self.reason in (MANIPULATION_FAILED, MANIPULATION_UNCHECKED)
            return f"{NO_VERDICT}: {self.reason}" if manipulation else f"{NO_VERDICT} ({self.reason})"
        return self.verdict


@dataclass
class ClaimResult:
    """One row of the claims table."""

    spec: ClaimSpec
    differences: list[float]
    verdict: Verdict
    seeds: list[int] = field(default_factory=list)
    checks: list[CheckResult] = field(default_factory=list)
    detail: str = ""

    @property
    def claim(self) -> str:
        return self.spec.title

    @property
    def suite(self) -> str:
        return self.spec.suite

    def as_dict(self) -> dict:
        spec = asdict(self.spec)
        return {
            "claim": self.spec.title,
            "key": self.spec.key,
            "source": self.spec.source,
            "measure": self.spec.measure,
            "unit": self.spec.unit,
            "suite": self.spec.suite,
            "paper_effect": self.spec.paper_effect,
            "sesoi": self.spec.sesoi,
            "declaration": spec,
            "differences": self.differences,
            "seeds": self.seeds,
            "detail": self.detail,
            "checks": [asdict(check) for check in self.checks],
            "verdict": {**asdict(self.verdict), "label": self.verdict.label},
        }


def evaluate_claims(
    lookup: Lookup,
    bounds: dict[int, dict] | None,
    gates: dict[str, Gate] | None = None,
    registry: tuple[ClaimSpec, ...] = REGISTRY,
) -> list[ClaimResult]:
    """Every claim of ``registry`` on the bench's runs (``bounds``: seed -> the bound report dict), judged
    together as the module's documentation says."""
    rows = [_measured(spec, lookup, bounds or {}, (gates or {}).get(spec.suite)) for spec in registry]
    tested = [row for row in rows if row.verdict.verdict == _PENDING]
    if not tested:
        return rows
    level = verdicts.ALPHA / len(tested)  # Holm's first step: the level each claim's power is computed at
    raw = [_tests(row) for row in tested]
    p_difference = verdicts.holm([test.p_difference for test in raw])
    p_equivalence = verdicts.holm([test.p_equivalence for test in raw])
    for row, test, p_diff, p_eq in zip(tested, raw, p_difference, p_equivalence, strict=True):
        row.verdict = _judged(row.spec, test, p_diff, p_eq, level)
    return rows


def _measured(spec: ClaimSpec, lookup: Lookup, bounds: dict[int, dict], gate: Gate | None) -> ClaimResult:
    """The claim's differences, checks and status before the tests (``_PENDING`` marks a row they will judge)."""
    by_seed, detail = _differences(spec, lookup, bounds)
    seeds = sorted(by_seed)
    values = [by_seed[seed] for seed in seeds]
    checks = run_checks(spec, lookup)
    summary = summarize(values)
    if summary is None or not all(map(math.isfinite, values)):
        reason = "no measurement" if summary is None else "an infinite difference"
        state = NOT_MEASURED if summary is None else NO_VERDICT
        mean = math.nan if summary is None else summary.mean
        return ClaimResult(spec, values, Verdict(mean, math.nan, len(values), state, reason), seeds, checks, detail)
    low, high = verdicts.interval(summary.mean, summary.std, summary.count)
    assert spec.sesoi is not None
    base = Verdict(
        summary.mean,
        summary.std,
        summary.count,
        NO_VERDICT,
        low=low,
        high=high,
        mde=verdicts.mde(summary.std, summary.count),
        seeds_needed=_seeds_needed(spec, summary.mean, summary.std, verdicts.ALPHA) if summary.count > 1 else None,
        fraction=_fraction(spec, summary.mean),
    )
    if failed(checks):
        verdict = replace(base, reason=MANIPULATION_FAILED)
    elif unmeasured(checks):
        verdict = replace(base, reason=MANIPULATION_UNCHECKED)
    elif gate is not None and gate.passed is False:
        verdict = replace(base, reason="its suite did not learn")
    elif summary.count < MIN_SEEDS:
        verdict = replace(base, reason=f"n = {summary.count}")
    else:
        verdict = replace(base, verdict=_PENDING)
    return ClaimResult(spec, values, verdict, seeds, checks, detail)


def _fraction(spec: ClaimSpec, mean: float) -> float:
    if spec.kind == "near_chance" or not spec.paper_effect:
        return math.nan
    return mean / spec.paper_effect


def _tests(row: ClaimResult) -> verdicts.Tests:
    spec = row.spec
    assert spec.sesoi is not None
    test = verdicts.tests(row.differences, spec.sesoi)
    if spec.kind != "near_chance":
        return test
    # "Collapses" is refuted by an accuracy more than the SESOI above chance: a one-sided test of d > SESOI.
    from scipy.stats import t

    if test.std == 0:
        above = 0.0 if test.mean > spec.sesoi else 1.0
    else:
        above = float(t.sf((test.mean - spec.sesoi) / test.stderr, test.count - 1))
    return replace(test, p_difference=above)


def _judged(spec: ClaimSpec, test: verdicts.Tests, p_difference: float, p_equivalence: float, level: float):
    assert spec.sesoi is not None
    if spec.kind == "near_chance":
        if p_equivalence < verdicts.ALPHA:
            result = HELD
        elif p_difference < verdicts.ALPHA:
            result = REVERSED
        else:
            result = INCONCLUSIVE
    else:
        result = verdicts.decide(test.mean, p_difference, p_equivalence)
    mde = verdicts.mde(test.std, test.count, level)
    needed = _seeds_needed(spec, test.mean, test.std, level)
    low, high = verdicts.interval(test.mean, test.std, test.count)
    reason = f"paired t over {test.count} seeds, TOST at +-{_scaled(spec, spec.sesoi)}, Holm across the report"
    fraction = _fraction(spec, test.mean)
    return Verdict(
        test.mean, test.std, test.count, result, reason, low, high, mde, needed, fraction, p_difference, p_equivalence
    )


def _seeds_needed(spec: ClaimSpec, mean: float, std: float, level: float) -> int | None:
    assert spec.sesoi is not None
    above = spec.sesoi if spec.kind == "near_chance" else None
    return verdicts.seeds_needed(mean, std, spec.sesoi, level, above=above)


def _scaled(spec: ClaimSpec, value: float) -> str:
    return f"{100 * value:.2f} pts" if spec.unit == "points" else f"{value:.2f} dec"


# The measures -------------------------------------------------------------------------------------------------


def _differences(spec: ClaimSpec, lookup: Lookup, bounds: dict[int, dict]) -> tuple[dict[int, float], str]:
    """``{seed: paired difference}`` of the claim and a sentence with the arms' means."""
    if spec.kind == "bound":
        return bound_differences(bounds)
    assert spec.first is not None

    def values(role: str, key: str) -> dict[int, float]:
        return per_seed(lookup(spec.suite, role, key), spec.metric)

    first = values(*spec.first)
    if spec.kind == "near_chance":
        detail = f"{spec.first[1]} {_pct(first)} (chance {100 * CHANCE:.0f}%)"
        return {seed: value - CHANCE for seed, value in first.items()}, detail
    assert spec.second is not None
    second = values(*spec.second)
    if spec.kind == "difference":
        detail = f"{spec.first[1]} {_pct(first)} vs {spec.second[1]} {_pct(second)}"
        return _paired(first, second), detail
    drops = {}
    for key, clean in ((spec.first[1], first), (spec.second[1], second)):
        noisy = values(spec.noisy_role, key)
        drops[key] = _paired(clean, noisy)
    detail = f"drop: {spec.second[1]} {_points(drops[spec.second[1]])}, {spec.first[1]} {_points(drops[spec.first[1]])}"
    return _paired(drops[spec.second[1]], drops[spec.first[1]]), detail


def _paired(first: dict[int, float], second: dict[int, float]) -> dict[int, float]:
    seeds = [seed for seed in sorted(first) if seed in second]
    return dict(zip(seeds, paired_differences(first, second), strict=True))


def _pct(values: dict[int, float]) -> str:
    summary = summarize(values.values())
    return "—" if summary is None else f"{100 * summary.mean:.2f}%"


def _points(values: dict[int, float]) -> str:
    summary = summarize(values.values())
    return "—" if summary is None else f"{100 * summary.mean:+.2f} points"


def bound_differences(bounds: dict[int, dict]) -> tuple[dict[int, float], str]:
    """Nozawa & Sato 2021, Fig. 1: per seed, the CURL bound's growth over K (Eq. 8) in decades minus the proposed
    bound's (Eq. 10), from the first K whose proposed bound is finite (with K + 1 below the number of classes no
    group can cover every class, and both bounds are infinite)."""
    differences, growths = {}, []
    for seed in sorted(bounds):
        rows = bounds[seed].get("rows", [])
        finite = [i for i, row in enumerate(rows) if _finite_positive(row["upper"])]
        if not finite or len(rows) - finite[0] < 2:
            continue
        first, last = rows[finite[0]], rows[-1]
        curl = _decades(last["upper_curl"]) - _decades(first["upper_curl"])
        proposed = _decades(last["upper"]) - _decades(first["upper"])
        differences[seed] = curl - proposed
        growths.append((curl, proposed, first["negatives"], last["negatives"]))
    detail = "; ".join(
        f"K {k0} -> {k1}: CURL bound x10^{_growth(curl)}, proposed x10^{_growth(proposed)}"
        for curl, proposed, k0, k1 in growths
    )
    return differences, detail or "the bound was not measured"


def _finite_positive(value) -> bool:
    try:
        value = float(value)
    except (TypeError, ValueError):
        return False
    return math.isfinite(value) and value > 0


def _growth(decades: float) -> str:
    return f"{decades:.2f}" if abs(decades) < 300 else "(overflow to infinity)"


def _decades(value) -> float:
    try:
        value = float(value)  # a cached report holds infinities as strings
    except (TypeError, ValueError):
        return math.nan
    if math.isnan(value) or value <= 0:
        return math.nan
    return 308.0 if math.isinf(value) else math.log10(value)


def format_difference(result: ClaimResult) -> tuple[str, str, str]:
    """Our effect, its 95% interval with n, and the 80%-power MDE (``"—"`` where not measured)."""
    v = result.verdict
    if v.count == 0:
        return "—", "—", "—"
    scale, unit = (100.0, " pts") if result.spec.unit == "points" else (1.0, " dec")
    mean = f"{scale * v.mean:+.2f}{unit}"
    if not math.isfinite(v.low):
        return mean, f"— (n = {v.count})", "—"
    mde = f"{scale * v.mde:.2f}{unit}" if math.isfinite(v.mde) else "—"
    return mean, f"[{scale * v.low:+.2f}, {scale * v.high:+.2f}] (n = {v.count})", mde
