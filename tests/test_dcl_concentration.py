"""Concentration of the DCL estimator (Chuang 2023, the thesis's Ch. 3, Thm. 3.3) on a vMF latent-class model."""

import math

import numpy as np
import pytest
import torch
from scipy.stats import vonmises_fisher

from uncurated.objectives.dcl import dcl_rows, debiased_rows
from uncurated.objectives.engine import ScoreMatrix
from uncurated.objectives.infonce import infonce_rows
from uncurated.theory.dcl_concentration import (
    ConcentrationRow,
    LatentClassModel,
    dcl_negative_term,
    format_table,
    loglog_slope,
    plot_concentration,
    run_dcl_concentration,
    theorem_bound,
    vmf_log_mgf,
)


def unit(rows, dim, seed):
    z = np.random.default_rng(seed).standard_normal((rows, dim))
    return z / np.linalg.norm(z, axis=1, keepdims=True)


def library_score_matrix(anchor, positives, negatives, temperature):
    """The library's scores of one anchor: positive ``positives[0]``, views ``positives[1:]``, ``negatives``."""
    extra = positives[1:]
    return ScoreMatrix(
        torch.from_numpy(anchor[None]),
        torch.from_numpy(np.concatenate([positives[:1], negatives])),
        1.0 / temperature,
        torch.tensor([0]),
        extra_positives=torch.from_numpy(extra[None]) if len(extra) else None,
    )


# ---------------------------------------------------------------- the latent-class model


@pytest.mark.parametrize("dim, kappa", [(3, 2.0), (8, 10.0), (16, 30.0)])
def test_vmf_mgf_matches_monte_carlo(dim, kappa):
    rng = np.random.default_rng(dim)
    mean = unit(1, dim, 1)[0]
    a = 0.7 * unit(4, dim, 2) + 0.5 * mean  # arguments both along and across the mean
    z = vonmises_fisher(mean, kappa).rvs(200_000, random_state=rng)
    estimate = np.exp(z @ a.T).mean(axis=0)
    np.testing.assert_allclose(np.exp(vmf_log_mgf(a, mean, kappa)), estimate, rtol=5e-3)


def test_vmf_mgf_is_one_at_zero_and_finite_for_large_arguments():
    mean = unit(1, 6, 0)[0]
    assert vmf_log_mgf(np.zeros((1, 6)), mean, 5.0)[0] == pytest.approx(0.0, abs=1e-12)
    # E e^{a.z} -> e^{a.mean} as kappa grows (the vMF concentrates on its mean).
    assert vmf_log_mgf(2.0 * mean[None], mean, 1e6)[0] == pytest.approx(2.0, rel=1e-4)


def test_ideal_negative_term_is_the_mean_over_the_other_classes():
    rng = np.random.default_rng(0)
    model = LatentClassModel.random(4, 5, 8.0, rng)
    labels = np.array([0, 3, 1])
    anchors = model.sample(labels, rng)
    negative_labels = np.repeat(np.arange(4), 75_000)
    negatives = model.sample(negative_labels, rng)
    for anchor, label, ideal in zip(anchors, labels, model.ideal_negative_term(anchors, labels), strict=True):
        others = negatives[negative_labels != label]
        assert ideal == pytest.approx(np.exp(others @ anchor).mean(), rel=5e-3)


def test_model_samples_lie_on_the_sphere_near_their_class_mean():
    rng = np.random.default_rng(1)
    model = LatentClassModel.random(3, 6, 50.0, rng)
    labels = np.array([[0, 1], [2, 2]])
    z = model.sample(labels, rng)
    assert z.shape == (2, 2, 6)
    np.testing.assert_allclose(np.linalg.norm(z, axis=-1), 1.0, rtol=1e-12)
    assert ((z * model.means[labels]).sum(axis=-1) > 0.7).all()
    assert model.tau_plus == pytest.approx(1 / 3)


# ---------------------------------------------------------------- the estimator against the library


@pytest.mark.parametrize("tau_plus, temperature, positives", [(0.1, 1.0, 1), (0.25, 0.5, 3), (0.5, 0.2, 5)])
def test_estimator_matches_the_librarys_dcl(tau_plus, temperature, positives):
    for seed in range(4):
        anchor, views, negatives = unit(1, 8, seed)[0], unit(positives, 8, seed + 10), unit(20, 8, seed + 20)
        g = dcl_negative_term(
            (negatives @ anchor)[None] / temperature, (views @ anchor)[None] / temperature, tau_plus, temperature
        )[0]
        scores = library_score_matrix(anchor, views, negatives, temperature)
        log_negative_mean = scores.negative_logsumexp() - math.log(20)
        log_positive_mean = scores.positive_logsumexp() - math.log(positives)
        positive = float(views[0] @ anchor) / temperature
        loss = math.log(math.exp(positive) + 20 * g) - positive
        rows = debiased_rows(scores, scores.positive_logit(), log_negative_mean, log_positive_mean, tau_plus, "min")
        assert loss == pytest.approx(float(rows), rel=1e-10)
        assert loss == pytest.approx(float(dcl_rows(scores, tau_plus)), rel=1e-10)


def test_estimator_clamps_at_the_theoretical_minimum():
    # Positives far more similar than the negatives: the bracket is negative, g = e^{-1/t}.
    g = dcl_negative_term(np.full((2, 4), -1.0), np.full((2, 1), 1.0), 0.5, temperature=1.0)
    np.testing.assert_array_equal(g, math.exp(-1.0))
    g = dcl_negative_term(np.full((1, 4), -2.0), np.full((1, 1), 2.0), 0.5, temperature=0.5)
    np.testing.assert_array_equal(g, math.exp(-2.0))


def test_with_tau_plus_zero_the_estimator_is_infonces_negative_term():
    temperature = 0.5
    for seed in range(4):
        anchor, views, negatives = unit(1, 8, seed)[0], unit(3, 8, seed + 10), unit(30, 8, seed + 20)
        negative_scores = (negatives @ anchor)[None] / temperature
        g = dcl_negative_term(negative_scores, (views @ anchor)[None] / temperature, 0.0, temperature)[0]
        assert 30 * g == pytest.approx(np.exp(negative_scores).sum(), rel=1e-13)
        scores = library_score_matrix(anchor, views, negatives, temperature)
        assert math.log(30 * g) == pytest.approx(float(scores.negative_logsumexp()), rel=1e-12)
        positive = float(views[0] @ anchor) / temperature
        loss = math.log(math.exp(positive) + 30 * g) - positive
        assert loss == pytest.approx(float(infonce_rows(scores)), rel=1e-12)


# ---------------------------------------------------------------- concentration


def test_estimator_converges_and_the_biased_term_does_not():
    rows = run_dcl_concentration(sizes_N=(16, 1024), sizes_M=(1, 256), trials=200, seed=0)
    cell = {(row.negatives, row.positives): row for row in rows}
    small, large = cell[(16, 1)], cell[(1024, 256)]
    assert large.error < 0.2 * small.error
    # InfoNCE's term converges to E_p e^s, not E_{p_x^-} e^s: its error stays put.
    assert large.biased_error > 0.8 * small.biased_error
    assert large.biased_error > 4.0 * large.error
    assert all(row.clamped == 0.0 for row in rows)


def test_error_decays_like_n_to_the_minus_half_with_many_positives():
    rows = run_dcl_concentration(sizes_N=(16, 64, 256, 1024), sizes_M=(256,), trials=250, seed=1)
    slope = loglog_slope([row.negatives for row in rows], [row.error for row in rows])
    assert -0.7 <= slope <= -0.3, slope


def test_error_decays_like_m_to_the_minus_half_with_many_negatives():
    # Two classes: tau+ = 1/2 weighs the positives' term enough for it to dominate at N = 2048.
    rows = run_dcl_concentration(sizes_N=(2048,), sizes_M=(1, 4, 16, 64), trials=200, seed=2, classes=2)
    slope = loglog_slope([row.positives for row in rows], [row.error for row in rows])
    assert -0.7 <= slope <= -0.3, slope


def test_loss_error_respects_theorem_3_3():
    rows = run_dcl_concentration(sizes_N=(16, 256), sizes_M=(1, 16), trials=100, seed=3)
    for row in rows:
        assert 0.0 < row.loss_error <= row.bound
        assert row.bound == pytest.approx(theorem_bound(row.negatives, row.positives, 0.1))
    # The bound's rate: N = M = 16 -> 256 divides it by 4.
    assert theorem_bound(256, 256, 0.1) == pytest.approx(theorem_bound(16, 16, 0.1) / 4)


def test_runs_are_seeded():
    first = run_dcl_concentration(sizes_N=(8, 32), sizes_M=(2,), trials=20, seed=7)
    assert run_dcl_concentration(sizes_N=(8, 32), sizes_M=(2,), trials=20, seed=7) == first
    assert run_dcl_concentration(sizes_N=(8, 32), sizes_M=(2,), trials=20, seed=8) != first
    assert [(row.negatives, row.positives) for row in first] == [(8, 2), (32, 2)]


def test_loglog_slope_recovers_known_rates():
    sizes = [10, 100, 1000]
    assert loglog_slope(sizes, [3.0 * n**-0.5 for n in sizes]) == pytest.approx(-0.5)
    assert loglog_slope(sizes, [2.0, 2.0, 2.0]) == pytest.approx(0.0, abs=1e-12)


def test_format_table_and_plot(tmp_path):
    rows = run_dcl_concentration(sizes_N=(8, 32, 128), sizes_M=(1, 8), trials=30, seed=0)
    table = format_table(rows)
    lines = table.splitlines()
    assert "mean over 30 anchors" in lines[0]
    assert lines[1].split() == ["N", "|", "M", "M=1", "M=8", "biased", "slope(M)"]
    assert lines[2].split()[:3] == ["8", f"{rows[0].error:.5f}", f"{rows[1].error:.5f}"]
    slopes = [loglog_slope([8, 32, 128], [row.error for row in rows if row.positives == m]) for m in (1, 8)]
    assert lines[-1].split() == ["slope(N)"] + [f"{slope:+.3f}" for slope in slopes]
    assert lines[2].split()[-1] == f"{loglog_slope([1, 8], [rows[0].error, rows[1].error]):+.3f}"
    path = plot_concentration(rows, tmp_path / "dcl.png")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


# ---------------------------------------------------------------- bad input


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"sizes_N": ()}, "^sizes_N must be a non-empty sequence"),
        ({"sizes_N": (16, 0)}, "^sizes_N must be a non-empty sequence of integers >= 1"),
        ({"sizes_M": (1.5,)}, "^sizes_M must be"),
        ({"trials": 0}, "^trials must be an integer >= 1"),
        ({"seed": -1}, "^seed must be an integer >= 0"),
        ({"classes": 1}, "^classes must be an integer >= 2"),
        ({"dim": 1}, "^dim must be an integer >= 2"),
        ({"kappa": 0.0}, r"^kappa must be in \(0, inf\]"),
    ],
)
def test_run_rejects_bad_arguments(kwargs, match):
    arguments = {"sizes_N": (4,), "sizes_M": (1,), "trials": 2} | kwargs
    with pytest.raises(ValueError, match=match):
        run_dcl_concentration(**arguments)


def test_estimator_and_helpers_reject_bad_arguments():
    scores = np.zeros((2, 3))
    with pytest.raises(ValueError, match=r"^tau_plus must be in \[0, 1\)"):
        dcl_negative_term(scores, scores, 1.0)
    with pytest.raises(ValueError, match=r"^temperature must be in \(0, inf\]"):
        dcl_negative_term(scores, scores, 0.1, temperature=0.0)
    with pytest.raises(ValueError, match="^negative_scores and positive_scores must have one row per anchor"):
        dcl_negative_term(scores, np.zeros((3, 1)), 0.1)
    with pytest.raises(ValueError, match="^positive_scores must be an"):
        dcl_negative_term(scores, np.zeros((2, 0)), 0.1)
    with pytest.raises(ValueError, match="^negative_scores contains non-finite"):
        dcl_negative_term(np.full((2, 3), np.nan), scores, 0.1)
    with pytest.raises(ValueError, match="^sizes and errors must be vectors of the same length"):
        loglog_slope([1, 2], [1.0])
    with pytest.raises(ValueError, match="^sizes and errors must be positive"):
        loglog_slope([1, 2], [1.0, 0.0])
    with pytest.raises(ValueError, match="^sizes must hold at least two distinct"):
        loglog_slope([4, 4], [1.0, 2.0])
    with pytest.raises(ValueError, match="^means must be unit vectors"):
        LatentClassModel(np.ones((3, 4)), 1.0)
    with pytest.raises(ValueError, match="^rows must hold at least one"):
        format_table([])
    assert isinstance(run_dcl_concentration((4,), (1,), 2)[0], ConcentrationRow)
