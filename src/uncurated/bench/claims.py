"""The claims table: each paper's central claim, measured as a difference, with a verdict.

**The verdict rule.** A claim is measured as a difference ``d`` that is
positive when the claim holds (e.g. DCL's accuracy minus InfoNCE's at the
same seed), paired by seed. Over ``n`` seeds the 95% Student-t confidence
interval of the mean difference is ``mean ± h`` with half-width
``h = t(0.975, n - 1) s / sqrt(n)`` (4.30 standard errors for 3 seeds, 2.78
for 5). ``h`` is also the smallest difference the preset could have detected.
Then

* fewer than :data:`MIN_SEEDS` (3) seeds: **no verdict** (one or two seeds
  cannot estimate the spread the verdict needs), the difference is shown;
* the interval contains zero: **not significant**;
* the interval lies above zero: **held**; below zero: **reversed**.

A claim whose runs are missing (a suite left out, a metric the evaluation
does not report) is **not measured**. A claim of a training suite whose
default run did not pass its learning gate (:mod:`.gate`) gets **no verdict**
whatever its seeds say: differences between encoders that have not learned
are not evidence about the objectives.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, replace

from ..references import cite
from .gate import Gate
from .results import paired_differences, per_seed, summarize

HELD, NOT_SIGNIFICANT, REVERSED = "held", "not significant", "reversed"
NOT_MEASURED, NO_VERDICT = "not measured", "no verdict"

#: The fewest paired seeds that can give a verdict.
MIN_SEEDS = 3
#: The two-sided confidence level of the interval.
CONFIDENCE = 0.95

#: Chance accuracy of the ten Fashion-MNIST classes.
CHANCE = 0.1

#: Every arm :func:`evaluate_claims` reads, as (suite, role, objective key); with the learning gates' default
#: runs, these are the arms whose seeds the verdicts need.
CLAIM_ARMS = frozenset(
    {
        ("two_view", "small", "dcl"),
        ("two_view", "small", "infonce"),
        ("two_view", "large", "dcl"),
        ("two_view", "large", "hcl-b0.5"),
        ("two_view", "large", "hcl-b1"),
        ("two_view", "large", "infonce"),
        ("two_view", "large", "rince-q0.5"),
        ("two_view", "aug_noise", "infonce"),
        ("two_view", "aug_noise", "rince-q0.5"),
        ("two_view", "label", "infonce"),
        ("two_view", "label", "rince-q0.5"),
        ("two_view", "label_noise", "infonce"),
        ("two_view", "label_noise", "rince-q0.5"),
        ("image_text", "noisy", "nuclr"),
        ("image_text", "noisy", "sogclr"),
        ("image_text", "noisy", "clip"),
        ("image_text", "noisy", "clip-reg"),
        ("image_text", "noisy", "reg-only"),
        ("image_text", "noisy", "wpse"),
    }
)


@dataclass(frozen=True)
class Verdict:
    """The rule's outcome on a list of paired differences.

    ``half_width`` is the 95% interval's half-width (NaN below two seeds);
    ``reason`` says why a row has no verdict, or how the verdict was reached.
    """

    mean: float
    std: float
    count: int
    half_width: float
    verdict: str
    reason: str

    @property
    def interval(self) -> tuple[float, float]:
        return self.mean - self.half_width, self.mean + self.half_width

    @property
    def label(self) -> str:
        """The verdict as the table shows it: ``"no verdict (n = 1)"`` names what is missing."""
        if self.verdict == NO_VERDICT:
            return f"{NO_VERDICT} ({self.reason})"
        return self.verdict


def verdict(differences: Sequence[float]) -> Verdict:
    """Apply the rule of the module's documentation to ``differences`` (positive: the claim holds)."""
    values = [float(d) for d in differences if d is not None and not math.isnan(d)]
    if not all(map(math.isfinite, values)):
        mean = sum(values) / len(values)
        return Verdict(mean, math.nan, len(values), math.nan, NO_VERDICT, "an infinite difference")
    summary = summarize(values)
    if summary is None:
        return Verdict(math.nan, math.nan, 0, math.nan, NOT_MEASURED, "no measurement")
    half_width = student_t_quantile(summary.count - 1) * summary.stderr if summary.count >= 2 else math.nan
    if summary.count < MIN_SEEDS:
        return Verdict(summary.mean, summary.std, summary.count, half_width, NO_VERDICT, f"n = {summary.count}")
    rule = f"95% t interval over {summary.count} seeds"
    if abs(summary.mean) <= half_width:
        result = NOT_SIGNIFICANT
    else:
        result = HELD if summary.mean > 0 else REVERSED
    return Verdict(summary.mean, summary.std, summary.count, half_width, result, rule)


def student_t_quantile(degrees_of_freedom: int, level: float = 0.5 + CONFIDENCE / 2) -> float:
    """The ``level`` quantile of Student's t distribution (12.71 for one degree of freedom, 4.30 for two)."""
    from scipy.stats import t

    return float(t.ppf(level, degrees_of_freedom))


@dataclass
class ClaimResult:
    """One row of the claims table; ``suite`` is the suite whose runs measure it."""

    claim: str
    source: str
    measure: str
    unit: str  # "points" (accuracy, shown x100) or "decades"
    differences: list[float]
    verdict: Verdict
    suite: str
    detail: str = ""
    seeds: list[int] = field(default_factory=list)

    def as_dict(self) -> dict:
        return {**asdict(self), "verdict": {**asdict(self.verdict), "label": self.verdict.label}}


#: ``lookup(suite, role, objective_key)`` -> ``{seed: report}`` of that arm (empty when it did not run).
Lookup = Callable[[str, str, str], dict]


def _accuracy_claim(
    claim: str,
    source: str,
    measure: str,
    suite: str,
    first: dict[int, float],
    second: dict[int, float],
    detail: str = "",
) -> ClaimResult:
    differences = paired_differences(first, second)
    seeds = [seed for seed in sorted(first) if seed in second]
    return ClaimResult(claim, source, measure, "points", differences, verdict(differences), suite, detail, seeds)


def _values(lookup: Lookup, suite: str, role: str, key: str, name: str) -> dict[int, float]:
    return per_seed(lookup(suite, role, key), name)


def _pct(values: dict[int, float]) -> str:
    summary = summarize(values.values())
    return "—" if summary is None else f"{100 * summary.mean:.2f}%"


def evaluate_claims(
    lookup: Lookup, bounds: dict[int, dict] | None, gates: dict[str, Gate] | None = None
) -> list[ClaimResult]:
    """Every claim of the table, measured on the bench's runs (``bounds``: seed -> the bound report dict).

    A claim of a suite whose gate in ``gates`` did not pass gets no verdict (the module's documentation).
    """
    claims = [*_two_view_claims(lookup), *_image_text_claims(lookup), bound_claim(bounds or {})]
    return [_gated(claim, (gates or {}).get(claim.suite)) for claim in claims]


_PROBE = "linear_probe.accuracy"
_ZERO_SHOT = "zero_shot.top1"


def _two_view_claims(lookup: Lookup) -> list[ClaimResult]:
    """The thesis's two-view claims (Chuang 2023, ch. 3 to 5), on the two-view suite's runs."""
    probe, claims = _PROBE, []
    # Thesis ch. 3: DCL corrects the false negatives that hurt most with few negatives.
    dcl = _values(lookup, "two_view", "small", "dcl", probe)
    infonce = _values(lookup, "two_view", "small", "infonce", probe)
    knn = paired_differences(
        _values(lookup, "two_view", "small", "dcl", "knn.accuracy"),
        _values(lookup, "two_view", "small", "infonce", "knn.accuracy"),
    )
    claims.append(
        _accuracy_claim(
            "DCL beats InfoNCE at small batch",
            cite("chuang2023thesis", "Fig. 3-3"),
            "linear probe, DCL - InfoNCE, small batch",
            "two_view",
            dcl,
            infonce,
            f"DCL {_pct(dcl)} vs InfoNCE {_pct(infonce)}"
            + (f"; kNN difference {100 * sum(knn) / len(knn):+.2f} points" if knn else ""),
        )
    )

    # Thesis ch. 4: hard negatives on top of debiasing; the better beta by mean probe accuracy is compared.
    dcl_large = _values(lookup, "two_view", "large", "dcl", probe)
    candidates = {key: _values(lookup, "two_view", "large", key, probe) for key in ("hcl-b0.5", "hcl-b1")}
    candidates = {key: values for key, values in candidates.items() if values}
    if candidates:
        best = max(candidates, key=lambda key: sum(candidates[key].values()) / len(candidates[key]))
        hcl = candidates[best]
        note = f"HCL ({best.removeprefix('hcl-')}, the better beta by mean) {_pct(hcl)} vs DCL {_pct(dcl_large)}"
    else:
        hcl, note = {}, "HCL did not run"
    claims.append(
        _accuracy_claim(
            "HCL beats DCL",
            cite("chuang2023thesis", "Fig. 4-2"),
            "linear probe, HCL (best beta) - DCL, large batch",
            "two_view",
            hcl,
            dcl_large,
            note,
        )
    )

    # Thesis ch. 5: RINCE loses less than InfoNCE when the positives are noisy.
    for clean_role, noisy_role, what in (
        ("label", "label_noise", "label noise eta=0.8, label-defined positives"),
        ("large", "aug_noise", "augmentation noise eta=0.4"),
    ):
        drops = {}
        for key in ("infonce", "rince-q0.5"):
            clean = _values(lookup, "two_view", clean_role, key, probe)
            noisy = _values(lookup, "two_view", noisy_role, key, probe)
            drops[key] = {seed: clean[seed] - noisy[seed] for seed in clean if seed in noisy}
        claims.append(
            _accuracy_claim(
                f"RINCE degrades less under noise ({what})",
                cite("chuang2023thesis", "Fig. 5-3"),
                "linear probe drop clean -> noisy, InfoNCE's drop - RINCE's (q=0.5)",
                "two_view",
                drops["infonce"],
                drops["rince-q0.5"],
                f"drop: InfoNCE {_points(drops['infonce'])}, RINCE {_points(drops['rince-q0.5'])}",
            )
        )

    return claims


def _image_text_claims(lookup: Lookup) -> list[ClaimResult]:
    """The image-text claims (Wang et al. 2025, Chen et al. 2024, Uesaka et al. 2025), on the noisy condition."""
    zero_shot, claims = _ZERO_SHOT, []
    # Wang et al. 2025: learned popularities beat SogCLR's uniform ones and CLIP on noisy, long-tailed data.
    nuclr = _values(lookup, "image_text", "noisy", "nuclr", zero_shot)
    for other, label in (("sogclr", "SogCLR"), ("clip", "CLIP")):
        values = _values(lookup, "image_text", "noisy", other, zero_shot)
        claims.append(
            _accuracy_claim(
                f"NUCLR beats {label}",
                cite("wang2025nuclr", "Table 1"),
                f"zero-shot top-1, NUCLR - {label}, noisy data",
                "image_text",
                nuclr,
                values,
                f"NUCLR {_pct(nuclr)} vs {label} {_pct(values)}",
            )
        )

    clip = _values(lookup, "image_text", "noisy", "clip", zero_shot)
    regularized = _values(lookup, "image_text", "noisy", "clip-reg", zero_shot)
    claims.append(
        _accuracy_claim(
            "the regularizer improves zero-shot",
            cite("chen2024clip", "Table 1"),
            "zero-shot top-1, CLIP+Reg - CLIP, noisy data",
            "image_text",
            regularized,
            clip,
            f"CLIP+Reg {_pct(regularized)} vs CLIP {_pct(clip)}",
        )
    )
    alone = _values(lookup, "image_text", "noisy", "reg-only", zero_shot)
    claims.append(
        _accuracy_claim(
            "the regularizer alone collapses",
            cite("chen2024clip", "Sec. 6"),
            "zero-shot top-1, CLIP - regularizer alone",
            "image_text",
            clip,
            alone,
            f"regularizer alone {_pct(alone)} (chance {100 * CHANCE:.0f}%) vs CLIP {_pct(clip)}",
        )
    )
    # WPSE on the same frozen MiniLM tower as CLIP: its token states are the caption's points.
    wpse = _values(lookup, "image_text", "noisy", "wpse", zero_shot)
    claims.append(
        _accuracy_claim(
            "WPSE beats CLIP",
            cite("uesaka2025wpse", "Table 1"),
            "zero-shot top-1, WPSE - CLIP, noisy data, both on the frozen MiniLM text tower",
            "image_text",
            wpse,
            clip,
            f"WPSE {_pct(wpse)} vs CLIP {_pct(clip)}",
        )
    )
    return claims


def _gated(claim: ClaimResult, gate: Gate | None) -> ClaimResult:
    """``claim`` without its verdict when its suite's default run did not learn."""
    if gate is None or gate.passed is not False or claim.verdict.verdict == NOT_MEASURED:
        return claim
    return replace(claim, verdict=replace(claim.verdict, verdict=NO_VERDICT, reason="its suite did not learn"))


def bound_claim(bounds: dict[int, dict]) -> ClaimResult:
    """Nozawa & Sato 2021, Fig. 1: the CURL bound's growth over K (Eq. 8) in decades, minus the proposed bound's."""
    differences, growths = [], []
    for seed in sorted(bounds):
        # From the first K whose proposed bound is finite (with K + 1 below the number of classes no group can
        # cover every class, and both bounds are infinite).
        rows = bounds[seed].get("rows", [])
        finite = [i for i, row in enumerate(rows) if _finite_positive(row["upper"])]
        if not finite or len(rows) - finite[0] < 2:
            continue
        first, last = rows[finite[0]], rows[-1]
        curl = _decades(last["upper_curl"]) - _decades(first["upper_curl"])
        proposed = _decades(last["upper"]) - _decades(first["upper"])
        differences.append(curl - proposed)
        growths.append((curl, proposed, first["negatives"], last["negatives"]))
    detail = (
        "; ".join(
            f"K {k0} -> {k1}: CURL bound x10^{_growth(curl)}, proposed x10^{_growth(proposed)}"
            for curl, proposed, k0, k1 in growths
        )
        or "the bound was not measured"
    )
    return ClaimResult(
        "the existing bound explodes with K and the proposed one does not",
        cite("nozawa2021negatives", "Fig. 1"),
        "decades of growth over K: CURL upper bound (Eq. 8) - proposed (Eq. 10)",
        "decades",
        differences,
        verdict(differences),
        "theory",
        detail,
        sorted(bounds),
    )


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


def _points(values: dict[int, float]) -> str:
    summary = summarize(values.values())
    return "—" if summary is None else f"{100 * summary.mean:+.2f} points"


def format_difference(result: ClaimResult) -> tuple[str, str, str]:
    """The mean difference, its 95% interval with n, and the smallest detectable difference (the half-width)."""
    v = result.verdict
    if v.count == 0:
        return "—", "—", "—"
    scale, unit = (100.0, " pts") if result.unit == "points" else (1.0, " dec")
    mean = f"{scale * v.mean:+.2f}{unit}"
    if not math.isfinite(v.half_width):
        return mean, f"— (n = {v.count})", "—"
    low, high = v.interval
    return mean, f"[{scale * low:+.2f}, {scale * high:+.2f}] (n = {v.count})", f"{scale * v.half_width:.2f}{unit}"
