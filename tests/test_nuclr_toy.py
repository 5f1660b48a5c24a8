"""NUCLR's toy (Wang et al. 2025, Sec. 3.3, App. G.1) and the popularity problem of Eq. 8 (Theorem 2)."""

import json

import numpy as np
import pytest

from uncurated.cli import main
from uncurated.theory import (
    average_over_seeds,
    format_table,
    log_partition,
    mis_risk,
    mle_risk,
    nuclr_popularity,
    partition_function,
    plot_errors,
    popularity_gradient,
    popularity_objective,
    popularity_weights,
    run_toy,
    sample_anchors,
    sample_contrasts,
    solve_popularity,
    true_popularity,
)

#: Anchors with coordinates positive, zero and negative (the toy's anchors have x_1 < 0 half the time).
ANCHORS = np.array([[0.0, 0.0], [0.9, 0.3], [-0.6, 0.0], [-0.5, 0.5], [0.0, 0.8], [-1.0, 0.0], [0.3, -0.4]])

#: Midpoints of a 1000 x 1000 grid on the unit square, for quadrature over Y.
GRID_SIDE = (np.arange(1000) + 0.5) / 1000
GRID = np.stack(np.meshgrid(GRID_SIDE, GRID_SIDE, indexing="ij"), axis=-1).reshape(-1, 2)


def quadrature_weights(x, tau):
    """exp(x . y / tau) at every grid point: the unnormalized density of Eq. 1 on Y."""
    return np.exp(GRID @ x / tau)


# ---------------------------------------------------------------- the toy model


@pytest.mark.parametrize("tau", [0.1, 0.2, 1.0])
def test_partition_function_matches_quadrature(tau):
    for x in ANCHORS:
        exact = partition_function(x[None], tau)[0]
        assert exact == pytest.approx(quadrature_weights(x, tau).mean(), rel=1e-4), x


def test_log_partition_is_stable_near_zero_and_far_from_it():
    tiny = np.array([[1e-12, -1e-12], [0.0, 1e-300]])
    np.testing.assert_allclose(log_partition(tiny, 0.2), 0.0, atol=1e-11)
    # t = x / tau = 1000 overflows exp, not its logarithm: log h = t + log((1 - e^-t) / t).
    assert log_partition(np.array([[1.0, 0.0]]), 1e-3)[0] == pytest.approx(1000.0 - np.log(1000.0), rel=1e-14)
    assert log_partition(np.array([[-1.0, 0.0]]), 1e-3)[0] == pytest.approx(-np.log(1000.0), rel=1e-14)


def test_anchors_are_uniform_on_the_upper_half_disk():
    x = sample_anchors(100_000, np.random.default_rng(0))
    assert x.shape == (100_000, 2)
    assert (x[:, 1] >= 0).all() and ((x**2).sum(axis=1) <= 1).all()
    # Uniform on the half disk: E[x_1] = 0, E[x_2] = 4 / (3 pi), E[|x|^2] = 1/2.
    assert abs(x[:, 0].mean()) < 4 * x[:, 0].std() / np.sqrt(len(x))
    assert x[:, 1].mean() == pytest.approx(4 / (3 * np.pi), abs=4 * x[:, 1].std() / np.sqrt(len(x)))
    assert (x**2).sum(axis=1).mean() == pytest.approx(0.5, abs=0.003)


@pytest.mark.parametrize("tau", [0.2, 1.0])
@pytest.mark.parametrize("x", [[0.9, 0.3], [-0.6, 0.2], [0.0, 0.0]])
def test_rejection_sampling_matches_the_density(tau, x):
    x = np.array(x)
    draws = 20_000
    y = sample_contrasts(np.tile(x, (draws, 1)), tau, np.random.default_rng(1))
    assert ((y >= 0) & (y <= 1)).all()
    weights = quadrature_weights(x, tau)
    exact_mean = weights @ GRID / weights.sum()
    standard_error = y.std(axis=0) / np.sqrt(draws)
    assert (np.abs(y.mean(axis=0) - exact_mean) < 4 * standard_error).all(), (y.mean(axis=0), exact_mean)


def test_mle_risk_uses_the_exact_partition_function():
    tau = 0.2
    x = ANCHORS[:5]
    y = np.random.default_rng(2).random((5, 2))
    log_p = [x_i @ y_i / tau - np.log(quadrature_weights(x_i, tau).mean()) for x_i, y_i in zip(x, y, strict=True)]
    assert mle_risk(x, y, tau) == pytest.approx(-tau * np.mean(log_p), rel=1e-5)


def test_true_popularity_makes_the_mis_estimate_of_eq_4_unbiased():
    """Proposition 1 (i): with the true q, sum_j exp(E(x_i, y_j) / tau) / q_j is unbiased for Z(x_i)."""
    tau, n, repeats = 0.5, 6, 3000
    x = sample_anchors(n, np.random.default_rng(3))
    y = sample_contrasts(np.tile(x, (repeats, 1)), tau, np.random.default_rng(4)).reshape(repeats, n, 2)
    estimates = np.array([np.exp(x @ y_r.T / tau) @ (1 / true_popularity(x, y_r, tau)) for y_r in y])
    standard_error = estimates.std(axis=0) / np.sqrt(repeats)
    assert (np.abs(estimates.mean(axis=0) - partition_function(x, tau)) < 4 * standard_error).all()


# ---------------------------------------------------------------- Eq. 5 and Eq. 8 on random scores


def random_scores(n, seed=0):
    return np.random.default_rng(seed).uniform(-1, 1, (n, n))


def test_mis_risk_with_uniform_popularities_is_gcl():
    """Remark 3: q_tilde = n c 1 gives the full-dataset InfoNCE minus tau log(n c)."""
    tau, n, c = 0.3, 40, 2.5
    scores = random_scores(n)
    logits = scores / tau
    log_softmax = logits - np.log(np.exp(logits).sum(axis=1, keepdims=True))
    infonce = -tau * np.mean(np.diag(log_softmax))
    assert mis_risk(scores, np.full(n, n * c), tau) == pytest.approx(infonce - tau * np.log(n * c), rel=1e-12)


def test_mis_risk_scale_and_zeta_correspondence():
    tau, n = 0.3, 40
    scores = random_scores(n)
    zeta = np.random.default_rng(1).normal(size=n)
    q_tilde = np.exp(zeta / tau)
    # Remark 5: L_hat(Z q_tilde) = L_hat(q_tilde) + tau log(1 / Z).
    assert mis_risk(scores, 7.0 * q_tilde, tau) == pytest.approx(mis_risk(scores, q_tilde, tau) - tau * np.log(7.0))
    # Eq. 8 is Eq. 5 at q_tilde = exp(zeta / tau), plus the mean of zeta.
    assert popularity_objective(scores, zeta, tau) == pytest.approx(mis_risk(scores, q_tilde, tau) + zeta.mean())


def test_popularity_gradient_matches_finite_differences():
    tau, n, h = 0.4, 12, 1e-6
    scores = random_scores(n)
    zeta = np.random.default_rng(1).normal(size=n)
    steps = h * np.eye(n)
    numeric = [
        (popularity_objective(scores, zeta + e, tau) - popularity_objective(scores, zeta - e, tau)) / (2 * h)
        for e in steps
    ]
    np.testing.assert_allclose(popularity_gradient(scores, zeta, tau), numeric, atol=1e-9)


@pytest.mark.parametrize("tau", [0.1, 0.5, 1.0])
@pytest.mark.parametrize("n", [20, 200])
def test_theorem_2_on_random_scores(tau, n):
    scores = random_scores(n, seed=n)
    rng = np.random.default_rng(1)
    start = rng.normal(size=n)
    zeta = solve_popularity(scores, tau)
    other = solve_popularity(scores, tau, zeta0=start)

    # (a) q = exp(zeta* / tau) is a fixed point of (9), here in log space.
    log_q = zeta / tau
    log_denominators = np.log(np.exp(scores / tau - log_q).sum(axis=1))
    log_fixed_point = np.log(np.exp(scores / tau - log_denominators[:, None]).sum(axis=0))
    np.testing.assert_allclose(log_fixed_point, log_q, rtol=0, atol=1e-9)
    # (b) Phi is constant along ones(n).
    assert popularity_objective(scores, start + 3.7, tau) == pytest.approx(
        popularity_objective(scores, start, tau), rel=1e-12, abs=1e-12
    )
    # (c) two initialisations reach solutions that differ by a constant vector.
    difference = other - zeta
    np.testing.assert_allclose(difference, difference.mean(), rtol=0, atol=1e-8)
    # (d) at the solution the row softmax P is doubly stochastic.
    np.testing.assert_allclose(popularity_weights(scores, zeta, tau).sum(axis=0), 1.0, rtol=0, atol=1e-9)
    # (e) the gradient sums to zero anywhere, so gradient descent keeps mean(zeta).
    assert popularity_gradient(scores, start, tau).sum() == pytest.approx(0.0, abs=1e-15)
    assert zeta.mean() == pytest.approx(0.0, abs=1e-12)
    assert other.mean() == pytest.approx(start.mean(), abs=1e-12)


def test_solver_raises_when_it_runs_out_of_iterations():
    with pytest.raises(RuntimeError, match=r"did not converge: gradient norm .* after max_iter = 3 iterations"):
        solve_popularity(random_scores(20), 0.1, max_iter=3)


def test_learned_popularity_recovers_the_true_one_up_to_scale():
    tau, n = 0.2, 200
    rng = np.random.default_rng(5)
    x = sample_anchors(n, rng)
    y = sample_contrasts(x, tau, rng)
    q = true_popularity(x, y, tau)
    q_tilde = nuclr_popularity(solve_popularity(x @ y.T, tau), q, tau)
    assert q_tilde.max() == pytest.approx(q.max())
    assert np.corrcoef(q, q_tilde)[0, 1] > 0.99


# ---------------------------------------------------------------- the experiment


def test_gcl_error_exceeds_nuclr_error_at_low_temperature():
    """Sec. 3.3: at tau = 0.2, GCL's error plateaus while NUCLR's approaches MLE's.

    NUCLR's and MLE's errors are mostly the sampling noise of the n = 800
    pairs, so the ratio is taken on errors averaged over four seeds (over 80
    seeds, groups of four gave ratios from 5 to 27; single seeds from 3 up).
    """
    rows = [run_toy(0.2, sizes=(800,), seed=seed, fresh_pairs=10_000)[0] for seed in range(4)]
    gcl = np.array([row.gcl_error for row in rows])
    nuclr = np.array([row.nuclr_error for row in rows])
    mle = np.array([row.mle_error for row in rows])
    assert (gcl > nuclr).all() and (gcl > mle).all()
    assert gcl.mean() > 0.04
    assert gcl.mean() > 3 * nuclr.mean()
    assert gcl.mean() > 3 * mle.mean()
    assert min(row.popularity_corr for row in rows) > 0.99


def test_rows_depend_only_on_their_own_size_and_seed():
    alone = run_toy(0.5, sizes=(30,), seed=7, fresh_pairs=500)
    together = run_toy(0.5, sizes=(60, 30), seed=7, fresh_pairs=500)
    assert together[1] == alone[0]
    assert [row.n for row in together] == [60, 30]


def test_format_table_has_a_block_per_temperature():
    rows = run_toy(0.5, sizes=(20, 40), fresh_pairs=500) + run_toy(2.0, sizes=(20, 40), fresh_pairs=500)
    text = format_table(rows)
    blocks = text.split("\n\n")
    assert len(blocks) == 2
    assert blocks[0].startswith("tau = 0.5 (true risk L = ") and blocks[1].startswith("tau = 2 (true risk L = ")
    assert blocks[0].splitlines()[1].split() == ["n", "MLE", "GCL", "NUCLR", "corr(q,", "q~)"]
    assert [line.split()[0] for line in blocks[1].splitlines()[2:]] == ["20", "40"]


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: run_toy(0.0), r"tau must be in \(0, inf\], got 0"),
        (lambda: run_toy(0.2, sizes=(50, 1)), r"sizes\[1\] must be in \[2, inf\], got 1"),
        (lambda: run_toy(0.2, seed=-1), r"seed must be in \[0, inf\], got -1"),
        (lambda: run_toy(0.2, fresh_pairs=0), r"pairs must be in \[1, inf\], got 0"),
        (lambda: sample_anchors(2.5, np.random.default_rng()), r"n must be an integer >= 1, got 2.5"),
        (lambda: log_partition(np.zeros(2), 0.2), r"x must be an \(m, 2\) array of points, got shape \(2,\)"),
        (lambda: mle_risk(np.zeros((3, 2)), np.zeros((2, 2)), 0.2), "x and y must have the same shape"),
        (lambda: solve_popularity(np.zeros((3, 2)), 0.2), r"scores must be a square \(n, n\) matrix"),
        (lambda: solve_popularity(np.zeros((3, 3)), 0.2, tol=0), r"tol must be in \(0, inf\], got 0"),
        (lambda: mis_risk(np.zeros((3, 3)), np.array([1.0, 0.0, 1.0]), 0.2), r"q_tilde must be in \(0, inf\)"),
        (lambda: popularity_gradient(np.zeros((3, 3)), np.zeros(2), 0.2), r"zeta must have shape \(3,\)"),
        (lambda: popularity_objective(np.full((3, 3), np.nan), np.zeros(3), 0.2), "scores contains non-finite"),
        (lambda: nuclr_popularity(np.zeros(3), np.ones(2), 0.2), "zeta and q must be vectors of the same length"),
        (lambda: nuclr_popularity(np.zeros(2), np.array([1.0, 0.0]), 0.2), "q finite and positive"),
        (lambda: plot_errors([], "unused.png"), "rows must hold at least one ToyRow"),
    ],
)
def test_bad_arguments_raise_value_errors_naming_them(call, message):
    with pytest.raises(ValueError, match=message):
        call()


# ---------------------------------------------------------------- the command line


def run_exiting(argv, capsys):
    with pytest.raises(SystemExit) as stop:
        main(argv)
    captured = capsys.readouterr()
    return stop.value.code, captured.out, captured.err


def test_toy_nuclr_prints_the_table_and_writes_the_figures(tmp_path, capsys):
    out_dir = tmp_path / "run"
    argv = ["toy", "nuclr", "--tau", "0.5", "--sizes", "20", "40", "--fresh-pairs", "2000", "--seeds", "2"]
    argv += ["--out", str(out_dir)]
    assert main(argv) == 0
    captured = capsys.readouterr()
    assert "tau = 0.5 (true risk L = " in captured.out
    assert "n       MLE       GCL     NUCLR  corr(q, q~)" in captured.out
    table_sizes = [line.split()[0] for line in captured.out.splitlines() if line.strip()[:2] in ("20", "40")]
    assert table_sizes == ["20", "40"]
    assert f"wrote {out_dir / 'nuclr_toy.png'} and {out_dir / 'nuclr_toy.json'}" in captured.out
    assert len([line for line in captured.err.splitlines() if line.startswith("toy nuclr: tau = 0.5, n = ")]) == 4

    assert (out_dir / "nuclr_toy.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    figures = json.loads((out_dir / "nuclr_toy.json").read_text())
    assert figures["seed"] == 0 and figures["seeds"] == 2
    assert figures["fresh_pairs"] == 2000 and figures["sizes"] == [20, 40]
    assert [(row["tau"], row["n"]) for row in figures["rows"]] == [(0.5, 20), (0.5, 40)]
    assert set(figures["rows"][0]) == {
        "tau",
        "n",
        "true_risk",
        "mle_error",
        "gcl_error",
        "nuclr_error",
        "popularity_corr",
    }


def test_toy_help_lists_the_toys_and_each_has_help(capsys):
    status, out, _ = run_exiting(["toy", "--help"], capsys)
    assert status == 0 and "nuclr" in out and "NUCLR's toy" in out
    status, out, _ = run_exiting(["toy", "nuclr", "--help"], capsys)
    assert status == 0
    for option in ["--tau", "--sizes", "--seed", "--fresh-pairs", "--out", "runs/toy-nuclr"]:
        assert option in out
    status, _, err = run_exiting(["toy"], capsys)
    assert status == 2 and "required" in err


@pytest.mark.parametrize(
    ("option", "value", "message"),
    [
        ("--tau", "0", "argument --tau: must be a number > 0, got '0'"),
        ("--sizes", "1", "argument --sizes: must be an integer >= 2, got 1"),
        ("--seed", "-1", "argument --seed: must be an integer >= 0, got -1"),
        ("--fresh-pairs", "0", "argument --fresh-pairs: must be an integer >= 1, got 0"),
    ],
)
def test_toy_nuclr_rejects_bad_options(tmp_path, capsys, option, value, message):
    status, _, err = run_exiting(["toy", "nuclr", "--out", str(tmp_path), option, value], capsys)
    assert status == 2 and message in err


def test_average_over_seeds_is_the_fieldwise_mean():
    runs = [run_toy(0.5, sizes=(20, 40), seed=seed, fresh_pairs=2000) for seed in (0, 1)]
    averaged = average_over_seeds(runs)
    assert [(row.tau, row.n) for row in averaged] == [(0.5, 20), (0.5, 40)]
    for row, first, second in zip(averaged, *runs, strict=True):
        assert row.gcl_error == pytest.approx((first.gcl_error + second.gcl_error) / 2)
        assert row.nuclr_error == pytest.approx((first.nuclr_error + second.nuclr_error) / 2)
    with pytest.raises(ValueError, match="share their temperatures and sizes"):
        average_over_seeds([runs[0], run_toy(0.5, sizes=(40, 20), seed=0, fresh_pairs=2000)])
