"""The bench's verdict rule against independent computations: scipy's t tests and intervals, a hand-worked Holm
example, the noncentral t's power at the minimum detectable effect; and the four verdicts on declared claims."""

from __future__ import annotations

import dataclasses
import math

import pytest
from scipy import stats

from uncurated.bench import verdicts
from uncurated.bench.claims import ABSENT, HELD, INCONCLUSIVE, NO_VERDICT, REVERSED, evaluate_claims
from uncurated.bench.registry import REGISTRY

SAMPLES = [
    [0.012, 0.019, 0.031, 0.007],
    [-0.004, 0.003, 0.001, -0.002, 0.0035],
    [0.05, -0.04, 0.01],
]


@pytest.mark.parametrize("differences", SAMPLES)
@pytest.mark.parametrize("sesoi", [0.004, 0.02])
def test_the_tests_match_scipys_one_sample_t_tests(differences, sesoi):
    result = verdicts.tests(differences, sesoi)
    assert result.p_difference == pytest.approx(stats.ttest_1samp(differences, 0.0).pvalue, rel=1e-9)
    # TOST: the larger p of the two one-sided tests against -sesoi (greater) and +sesoi (less).
    lower = stats.ttest_1samp(differences, -sesoi, alternative="greater").pvalue
    upper = stats.ttest_1samp(differences, sesoi, alternative="less").pvalue
    assert result.p_equivalence == pytest.approx(max(lower, upper), rel=1e-9)


@pytest.mark.parametrize("differences", SAMPLES)
def test_the_interval_is_scipys_student_t_interval(differences):
    n = len(differences)
    mean = sum(differences) / n
    std = stats.tstd(differences)
    low, high = verdicts.interval(mean, std, n)
    expected = stats.t.interval(0.95, n - 1, loc=mean, scale=stats.sem(differences))
    assert (low, high) == pytest.approx(expected, rel=1e-9)
    assert all(math.isnan(bound) for bound in verdicts.interval(mean, std, 1))


def test_holm_on_a_hand_worked_example():
    # p = 0.01, 0.04, 0.03, 0.005 (m = 4). Sorted: 0.005 x 4 = 0.02; 0.01 x 3 = 0.03; 0.03 x 2 = 0.06;
    # 0.04 x 1 = 0.04, raised to 0.06 to keep the order. At 0.05 the first two are rejected, the last two not.
    assert verdicts.holm([0.01, 0.04, 0.03, 0.005]) == pytest.approx([0.03, 0.06, 0.06, 0.02])
    assert verdicts.holm([0.3, 0.6]) == pytest.approx([0.6, 0.6])
    assert verdicts.holm([0.9, 0.8]) == pytest.approx([1.0, 1.0])  # 0.8 x 2 capped at 1; 0.9 raised to it
    assert verdicts.holm([0.02]) == pytest.approx([0.02])


@pytest.mark.parametrize("count", [3, 5, 10])
def test_the_mde_has_80_percent_power_and_is_not_the_half_width(count):
    std = 0.01
    effect = verdicts.mde(std, count)
    df = count - 1
    critical = stats.t.ppf(0.975, df)
    shift = effect / (std / math.sqrt(count))
    power = stats.nct.sf(critical, df, shift) + stats.nct.cdf(-critical, df, shift)
    assert power == pytest.approx(0.8, abs=1e-6)
    half_width = critical * std / math.sqrt(count)
    assert effect > half_width
    if count == 3:  # the figure: at n = 3 the 80%-power MDE is 1.31 times the interval's half-width
        assert effect / half_width == pytest.approx(1.31, abs=0.01)


def test_the_seeds_needed_reach_80_percent_power_and_one_fewer_does_not():
    mean, std, sesoi = 0.006, 0.01, 0.003
    needed = verdicts.seeds_needed(mean, std, sesoi)
    assert needed is not None and needed > 3
    assert verdicts.difference_power(mean, std, needed) >= 0.8 > verdicts.difference_power(mean, std, needed - 1)
    # A zero effect well inside the SESOI is reached by the equivalence test.
    equivalent = verdicts.seeds_needed(0.0, 0.01, 0.02)
    assert equivalent is not None and verdicts.equivalence_power(0.0, 0.01, equivalent, 0.02) >= 0.8
    assert verdicts.seeds_needed(0.0001, 0.05, 0.00001) is None  # beyond 200 seeds


# The four verdicts on declared claims -------------------------------------------------------------------------

_CLAIM = next(spec for spec in REGISTRY if spec.key == "dcl-small-batch")


def _spec(key: str, sesoi: float):
    return dataclasses.replace(_CLAIM, key=key, title=key, sesoi=sesoi, checks=())


def _lookup(per_claim: dict[str, list[float]]):
    """DCL and InfoNCE runs at the small batch whose per-seed differences are ``per_claim``'s, one arm per claim."""

    def lookup(suite, role, key):
        name, _, side = key.partition(":")
        differences = per_claim.get(name, [])
        accuracy = (lambda d: 0.5 + d) if side == "dcl" else (lambda d: 0.5)
        return {seed: {"evaluation": {"linear_probe": {"accuracy": accuracy(d)}}} for seed, d in enumerate(differences)}

    return lookup


def _judge(claims: dict[str, tuple[list[float], float]]):
    registry = tuple(
        dataclasses.replace(_spec(name, sesoi), first=("small", f"{name}:dcl"), second=("small", f"{name}:infonce"))
        for name, (_, sesoi) in claims.items()
    )
    rows = evaluate_claims(_lookup({name: values for name, (values, _) in claims.items()}), {}, None, registry)
    return {row.spec.key: row.verdict for row in rows}


@pytest.mark.parametrize(
    ("differences", "sesoi", "expected"),
    [
        ([0.050, 0.051, 0.049], 0.01, HELD),
        ([-0.020, -0.025, -0.018], 0.01, REVERSED),
        ([0.001, -0.001, 0.0005, 0.0, 0.0002], 0.01, ABSENT),  # within +-1 point, tightly: the effect is not here
        ([0.05, -0.04, 0.01], 0.01, INCONCLUSIVE),  # neither: three seeds cannot tell
        ([0.020, 0.021], 0.01, NO_VERDICT),  # two seeds never give a verdict
    ],
)
def test_each_verdict(differences, sesoi, expected):
    verdict = _judge({"c": (differences, sesoi)})["c"]
    assert verdict.verdict == expected
    if expected != NO_VERDICT:
        assert verdict.fraction == pytest.approx(verdict.mean / _CLAIM.paper_effect)
        assert verdict.mde > 0
        # Beside an inconclusive row: the seeds it would need, here more than 200 at its spread; else a count.
        assert (verdict.seeds_needed is None) == (expected == INCONCLUSIVE)


def test_holm_turns_a_lone_held_into_inconclusive_beside_another_claim():
    near = [0.01, 0.02, 0.03, 0.012]  # p = 0.029 alone
    assert _judge({"a": (near, 0.005)})["a"].verdict == HELD
    together = _judge({"a": (near, 0.005), "b": ([0.02, -0.01, 0.005], 0.005)})  # b: p = 0.62
    assert together["a"].verdict == INCONCLUSIVE
    assert together["a"].p_difference == pytest.approx(2 * stats.ttest_1samp(near, 0.0).pvalue)


def test_the_one_sided_power_is_the_tests_size_at_its_null_and_drives_the_near_chance_seeds():
    assert verdicts.one_sided_power(0.0, 0.01, 5) == pytest.approx(0.05)
    # A near-chance claim refuted by an accuracy 1 point beyond its SESOI: the one-sided test decides, not a
    # two-sided test against zero (which 4 seeds of a 3-point mean would pass).
    needed = verdicts.seeds_needed(0.03, 0.01, 0.02, above=0.02)
    assert needed is not None and needed > 3
    assert verdicts.one_sided_power(0.01, 0.01, needed) >= 0.8 > verdicts.one_sided_power(0.01, 0.01, needed - 1)
    assert verdicts.seeds_needed(0.03, 0.01, 0.02) == 4 < needed
