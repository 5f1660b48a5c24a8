"""Coupon-collector quantities of Nozawa & Sato 2021 against digest 004-negatives.md (sections 1.6, 6.2 (a)-(c), 8)."""

from __future__ import annotations

import itertools
import math
from fractions import Fraction

import numpy as np
import pytest

from uncurated.theory.coupon import (
    collision_probability,
    coverage_probability,
    expected_draws,
    expected_log_collisions,
)

# Digest 6.2 (b): (C, K+1) -> (v_{K+1} by Eq. 9, tau_K = 1 - (1 - 1/C)^K, E[ln(Col + 1)] binomial).
REFERENCE_GRID = [
    (10, 32, 0.6910, 0.9618, 1.317),
    (10, 64, 0.9882, 0.9987, 1.929),
    (10, 128, 1.0000, 1.0000, 2.585),
    (10, 256, 1.0000, 1.0000, 3.260),
    (10, 512, 1.0000, 1.0000, 3.945),
    (100, 128, 0.0000, 0.7210, 0.697),
    (100, 256, 0.0001, 0.9229, 1.155),
    (100, 384, 0.1080, 0.9787, 1.483),
    (100, 512, 0.5527, 0.9941, 1.734),
    (100, 640, 0.8506, 0.9984, 1.936),
    (100, 768, 0.9564, 0.9996, 2.105),
    (100, 896, 0.9878, 0.9999, 2.249),
    (100, 1024, 0.9966, 1.0000, 2.376),
    (4, 16, 0.9600, 0.9866, 1.487),
    (4, 32, 0.9996, 0.9999, 2.128),
    (4, 64, 1.0000, 1.0000, 2.796),
    (4, 128, 1.0000, 1.0000, 3.478),
    (4, 256, 1.0000, 1.0000, 4.165),
    (4, 512, 1.0000, 1.0000, 4.855),
]

# The paper's tau and v rows (Tables 4, 6), which Eq. 9 and the closed form reproduce to 2 decimals.
# CIFAR-100's v entries are realised values above Eq. 9 (digest 6.2 (b)) and are not compared.
PAPER_TAU_V = [
    (10, 32, 0.96, 0.69),
    (10, 64, 1.00, 0.99),
    (10, 128, 1.00, 1.00),
    (10, 256, 1.00, 1.00),
    (10, 512, 1.00, 1.00),
    (4, 16, 0.99, 0.96),
    (4, 32, 1.00, 1.00),
    (4, 512, 1.00, 1.00),
]
PAPER_TAU_C100 = {128: 0.72, 256: 0.92, 384: 0.98, 512: 0.99, 640: 1.00, 768: 1.00, 896: 1.00, 1024: 1.00}


def eq9_exact(draws: int, classes: int) -> Fraction:
    """Eq. 9 literally, ``sum_{n<=K} sum_m binom(C-1, m) (-1)^m (1 - (m+1)/C)^(n-1)``, in rationals."""
    return sum(
        (
            Fraction(math.comb(classes - 1, m) * (-1) ** m) * Fraction(classes - m - 1, classes) ** (n - 1)
            for n in range(1, draws + 1)
            for m in range(classes)
        ),
        Fraction(0),
    )


def cdf_exact(draws: int, classes: int) -> Fraction:
    """The coupon collector's CDF by inclusion-exclusion, in rationals."""
    return sum(
        (
            Fraction(math.comb(classes, m) * (-1) ** m) * Fraction(classes - m, classes) ** draws
            for m in range(classes + 1)
        ),
        Fraction(0),
    )


def coverage_by_enumeration(draws: int, rho: list[float]) -> float:
    return math.fsum(
        math.prod(rho[c] for c in seq)
        for seq in itertools.product(range(len(rho)), repeat=draws)
        if len(set(seq)) == len(rho)
    )


# --- Table 3 and the expected number of draws (Eq. 26) -------------------------------------------


@pytest.mark.parametrize("classes, table3", [(4, 9), (10, 30), (100, 519), (3029, 26030)])
def test_table3_ceiling(classes, table3):
    # Table 3 tabulates E[K + 1] (draws, anchor included); 3029 is App. F.4's Wiki-3029 "26 030".
    assert math.ceil(expected_draws(classes=classes)) == table3


@pytest.mark.parametrize("classes, value", [(4, 8.3333), (10, 29.2897), (100, 518.7378)])
def test_expected_draws_uniform_values(classes, value):
    assert expected_draws(classes=classes) == pytest.approx(value, abs=5e-5)
    # Eq. 26 integrated numerically with explicit uniform frequencies gives C H_C.
    assert expected_draws(frequencies=np.full(classes, 1.0 / classes)) == pytest.approx(
        expected_draws(classes=classes), rel=1e-11
    )


def test_expected_draws_eq26_large_c():
    # digest 6.2 (c): quad to infinity failed at C = 3029; the panelled integral does not.
    exact = 3029 * math.fsum(1 / k for k in range(1, 3030))
    assert expected_draws(frequencies=np.full(3029, 1.0 / 3029)) == pytest.approx(exact, rel=1e-11)


def test_expected_draws_non_uniform_exact():
    rho = [0.5, 0.3, 0.2]
    # Inclusion-exclusion: E[T] = sum_{S nonempty} (-1)^(|S|+1) / rho(S).
    exact = sum(
        (-1) ** (len(s) + 1) / sum(rho[c] for c in s) for r in range(1, 4) for s in itertools.combinations(range(3), r)
    )
    assert expected_draws(frequencies=rho) == pytest.approx(exact, rel=1e-12)
    # And E[T] = sum_{n >= 0} (1 - v_n) with the coverage recursion.
    tail = 1.0 - coverage_probability(np.arange(1, 400), frequencies=rho)
    assert 1.0 + tail.sum() == pytest.approx(exact, rel=1e-10)


def test_expected_draws_single_class():
    assert expected_draws(classes=1) == 1.0
    assert expected_draws(frequencies=[1.0]) == pytest.approx(1.0, rel=1e-12)


# --- Coverage probability v (Eq. 9) --------------------------------------------------------------


@pytest.mark.parametrize(
    "classes, draws, value",
    [(10, 32, 0.6910), (10, 33, 0.7186), (4, 16, 0.9600), (100, 512, 0.5527), (100, 1024, 0.9966)],
)
def test_coverage_reference_values(classes, draws, value):
    assert coverage_probability(draws, classes=classes) == pytest.approx(value, abs=5e-5)


def test_coverage_tiny_value_c100():
    # v_128(100) = 1.5e-22 (digest 6.2 (a)), which float64 inclusion-exclusion cannot resolve.
    value = coverage_probability(128, classes=100)
    assert value == pytest.approx(float(cdf_exact(128, 100)), rel=1e-12)
    assert f"{value:.1e}" == "1.5e-22"


@pytest.mark.parametrize("classes, draws", [(4, 16), (10, 32), (10, 64), (100, 256)])
def test_coverage_matches_eq9_exact(classes, draws):
    exact = eq9_exact(draws, classes)
    assert exact == cdf_exact(draws, classes)  # the double sum of Eq. 9 is the CDF
    assert coverage_probability(draws, classes=classes) == pytest.approx(float(exact), rel=1e-12)


def test_coverage_matches_exact_cdf_c100():
    draws = np.array([384, 512, 640, 768, 896, 1024])
    expected = [float(cdf_exact(int(n), 100)) for n in draws]
    np.testing.assert_allclose(coverage_probability(draws, classes=100), expected, rtol=1e-12)


@pytest.mark.parametrize("c, k1, v_ref, tau_ref, log_col_ref", REFERENCE_GRID)
def test_reference_grid(c, k1, v_ref, tau_ref, log_col_ref):
    assert coverage_probability(k1, classes=c) == pytest.approx(v_ref, abs=5e-5)
    assert collision_probability(k1 - 1, classes=c) == pytest.approx(tau_ref, abs=5e-5)
    assert expected_log_collisions(k1 - 1, classes=c) == pytest.approx(log_col_ref, abs=5e-4)


@pytest.mark.parametrize("c, k1, tau_paper, v_paper", PAPER_TAU_V)
def test_paper_tau_and_v_rows(c, k1, tau_paper, v_paper):
    assert round(collision_probability(k1 - 1, classes=c), 2) == tau_paper
    assert round(coverage_probability(k1, classes=c), 2) == v_paper


def test_paper_tau_rows_c100():
    k1 = np.array(sorted(PAPER_TAU_C100))
    tau = collision_probability(k1 - 1, classes=100)
    assert np.round(tau, 2).tolist() == [PAPER_TAU_C100[k] for k in k1.tolist()]


def test_misprinted_indices():
    # Sec. 4.1 "v_{K=32} ~ 0.719" is v_{K+1} = v_33; Sec. 3.3 "tau_{K=32} ~ 0.967" is K = 32 negatives: 0.9657.
    assert coverage_probability(33, classes=10) == pytest.approx(0.7186, abs=5e-5)
    assert collision_probability(32, classes=10) == pytest.approx(1 - 0.9**32, rel=1e-14)
    assert round(collision_probability(32, classes=10), 4) == 0.9657


@pytest.mark.parametrize("rho", [[0.5, 0.5], [0.7, 0.3], [0.5, 0.3, 0.2], [0.1, 0.2, 0.3, 0.4]])
def test_coverage_brute_force(rho):
    draws = np.arange(1, 8)
    expected = [coverage_by_enumeration(int(n), rho) for n in draws]
    np.testing.assert_allclose(coverage_probability(draws, frequencies=rho), expected, rtol=1e-12, atol=1e-15)
    if len(set(rho)) == 1:
        np.testing.assert_allclose(coverage_probability(draws, classes=len(rho)), expected, rtol=1e-12, atol=1e-15)


def test_coverage_monte_carlo_non_uniform():
    rho = np.array([0.4, 0.3, 0.2, 0.1])
    draws, trials = 12, 200_000
    samples = np.random.default_rng(0).choice(len(rho), size=(trials, draws), p=rho)
    covered = np.ones(trials, dtype=bool)
    for c in range(len(rho)):
        covered &= (samples == c).any(axis=1)
    v = coverage_probability(draws, frequencies=rho)
    assert abs(covered.mean() - v) < 4 * math.sqrt(v * (1 - v) / trials)


def test_coverage_monotone_and_bounded():
    draws = np.arange(1, 1201)
    rho = np.linspace(1, 3, 20) / np.linspace(1, 3, 20).sum()
    for v in (coverage_probability(draws, classes=100), coverage_probability(draws[:300], frequencies=rho)):
        assert np.isfinite(v).all() and (v >= 0).all() and (v <= 1).all()
        assert (np.diff(v) >= 0).all()
    v = coverage_probability(draws, classes=100)
    assert v[98] == 0.0 and v[99] > 0  # fewer than C draws cannot cover
    assert v[-1] == pytest.approx(1.0, abs=1e-3)


def test_explicit_uniform_frequencies_match_uniform_path():
    draws = np.arange(1, 129)
    for c in (1, 3, 10):
        np.testing.assert_allclose(
            coverage_probability(draws, frequencies=np.full(c, 1.0 / c)),
            coverage_probability(draws, classes=c),
            rtol=1e-12,
            atol=1e-300,
        )
        negatives = np.arange(0, 100)
        np.testing.assert_allclose(
            collision_probability(negatives, frequencies=np.full(c, 1.0 / c)),
            collision_probability(negatives, classes=c),
            rtol=1e-13,
        )
        np.testing.assert_allclose(
            expected_log_collisions(negatives, frequencies=np.full(c, 1.0 / c)),
            expected_log_collisions(negatives, classes=c),
            rtol=1e-12,
        )


def test_shapes_and_scalars():
    assert isinstance(coverage_probability(5, classes=3), float)
    assert coverage_probability(np.array([[3, 4], [5, 6]]), classes=3).shape == (2, 2)
    assert isinstance(collision_probability(5, classes=3), float)
    assert expected_log_collisions(np.array([1, 2, 2]), classes=3).shape == (3,)


# --- Collisions (Eq. 8, Eq. 10) ------------------------------------------------------------------


def test_collision_non_uniform_closed_form_and_edges():
    rho = np.array([0.6, 0.3, 0.1])
    for k in (0, 1, 5, 40):
        closed_form = 1 - float(rho @ (1 - rho) ** k)
        assert collision_probability(k, frequencies=rho) == pytest.approx(closed_form, rel=1e-13, abs=1e-15)
    assert collision_probability(0, classes=10) == 0.0
    assert expected_log_collisions(0, classes=10) == 0.0
    assert collision_probability(3, classes=1) == 1.0
    assert expected_log_collisions(3, classes=1) == pytest.approx(math.log(4))
    # Small K / large C keeps relative precision (no 1 - (1 - x) cancellation).
    assert collision_probability(1, classes=10**9) == pytest.approx(1e-9, rel=1e-12)


def test_expected_log_collisions_brute_force():
    rho = [0.5, 0.3, 0.2]
    for k in range(0, 6):
        expected = math.fsum(
            rho[c] * math.prod(rho[d] for d in negs) * math.log(1 + sum(d == c for d in negs))
            for c in range(3)
            for negs in itertools.product(range(3), repeat=k)
        )
        assert expected_log_collisions(k, frequencies=rho) == pytest.approx(expected, rel=1e-12, abs=1e-15)


def test_log_collisions_equal_tau_times_conditional():
    # tau_K E[ln(Col+1) | Col != 0] = E[ln(Col+1)]: the conditional mean lies in [ln 2, ln(K+1)].
    for k in (1, 31, 511):
        tau, value = collision_probability(k, classes=10), expected_log_collisions(k, classes=10)
        assert math.log(2) - 1e-12 <= value / tau <= math.log(k + 1) + 1e-12


# --- Input validation ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "call, match",
    [
        (lambda: coverage_probability(0, classes=3), "draws"),
        (lambda: coverage_probability(2.5, classes=3), "draws"),
        (lambda: coverage_probability(np.array([1, 0]), classes=3), "draws"),
        (lambda: coverage_probability(np.array([1.0, 2.0]), classes=3), "draws"),
        (lambda: coverage_probability(True, classes=3), "draws"),
        (lambda: coverage_probability(3, classes=0), "classes"),
        (lambda: coverage_probability(3, classes=2.0), "classes"),
        (lambda: coverage_probability(3), "exactly one"),
        (lambda: coverage_probability(3, classes=2, frequencies=[0.5, 0.5]), "exactly one"),
        (lambda: coverage_probability(3, frequencies=[0.5, 0.6]), "sum to 1"),
        (lambda: coverage_probability(3, frequencies=[1.0, 0.0]), "frequencies"),
        (lambda: coverage_probability(3, frequencies=[1.2, -0.2]), "frequencies"),
        (lambda: coverage_probability(3, frequencies=[[0.5, 0.5]]), "frequencies"),
        (lambda: coverage_probability(3, frequencies=[]), "frequencies"),
        (lambda: coverage_probability(3, frequencies=[np.nan, 1.0]), "frequencies"),
        (lambda: expected_draws(classes=-1), "classes"),
        (lambda: expected_draws(frequencies=[0.2, 0.2]), "sum to 1"),
        (lambda: collision_probability(-1, classes=3), "negatives"),
        (lambda: expected_log_collisions(np.array([-1]), classes=3), "negatives"),
        (lambda: expected_log_collisions(3, classes=None), "exactly one"),
    ],
)
def test_bad_input_raises(call, match):
    with pytest.raises(ValueError, match=match):
        call()
