"""k-variance normalized margins (Chuang 2023, the thesis's Ch. 8): W1, k-variance, margins, kV-(GN-)Margin."""

import itertools

import numpy as np
import pytest
import torch

from uncurated.theory.kvariance import (
    GN_EPSILON,
    gradient_normalized_margin,
    k_variance,
    kv_gn_margin,
    kv_margin,
    margin,
    wasserstein1,
)


def cloud(n, d, seed):
    return torch.randn(n, d, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


def brute_force_w1(a, b):
    """The smallest mean distance over all n! matchings of the two clouds."""
    distances = torch.cdist(a, b)
    n = len(a)
    return min(float(distances[torch.arange(n), list(sigma)].mean()) for sigma in itertools.permutations(range(n)))


def linear_head(weight, bias):
    return lambda z: z @ weight.T + bias


def labelled_sample(seed, per_class=(12, 20, 16), dim=5, spread=2.0):
    """Class-shifted Gaussian features, labels 0..C-1 in blocks, and a random linear head."""
    generator = torch.Generator().manual_seed(seed)
    classes = len(per_class)
    centers = spread * torch.randn(classes, dim, generator=generator, dtype=torch.float64)
    labels = torch.cat([torch.full((m,), c) for c, m in enumerate(per_class)])
    features = centers[labels] + torch.randn(len(labels), dim, generator=generator, dtype=torch.float64)
    weight = torch.randn(classes, dim, generator=generator, dtype=torch.float64)
    bias = torch.randn(classes, generator=generator, dtype=torch.float64)
    return features, labels, weight, bias


# ---------------------------------------------------------------- W1


@pytest.mark.parametrize("n, d, seed", [(1, 3, 0), (2, 2, 1), (4, 3, 2), (5, 1, 3), (6, 2, 4), (6, 4, 5)])
def test_w1_matches_brute_force_over_all_permutations(n, d, seed):
    a, b = cloud(n, d, seed), cloud(n, d, seed + 100)
    assert wasserstein1(a, b) == pytest.approx(brute_force_w1(a, b), rel=1e-12, abs=1e-12)


def test_w1_is_symmetric_and_zero_on_identical_clouds():
    a, b = cloud(30, 4, 0), cloud(30, 4, 1)
    assert wasserstein1(a, b) == pytest.approx(wasserstein1(b, a), rel=1e-12)
    assert wasserstein1(a, b) > 0.5
    assert wasserstein1(a, a) == 0.0
    # The same points in another order are the same measure.
    assert wasserstein1(a, a[torch.randperm(30)]) == 0.0


@pytest.mark.parametrize("shift", [[3.0, -4.0], [0.1, 0.0], [-0.02, 0.05]])
def test_w1_of_a_translated_cloud_is_the_length_of_the_translation(shift):
    # For the L2 ground metric, no matching beats the identity: mean ||a_i - a_s(i) - v|| >= ||v||.
    a = cloud(25, 2, 3)
    v = torch.tensor(shift, dtype=torch.float64)
    assert wasserstein1(a, a + v) == pytest.approx(float(v.norm()), rel=1e-10)


def test_w1_accepts_float32_and_arrays():
    a, b = cloud(8, 3, 0), cloud(8, 3, 1)
    expected = wasserstein1(a, b)
    assert wasserstein1(a.float(), b.float()) == pytest.approx(expected, rel=1e-6)
    assert wasserstein1(a.numpy(), b.numpy()) == pytest.approx(expected, rel=1e-12)


@pytest.mark.parametrize(
    "a, b, match",
    [
        (torch.zeros(3, 2), torch.zeros(4, 2), "same shape"),
        (torch.zeros(3, 2), torch.zeros(3, 3), "same shape"),
        (torch.zeros(0, 2), torch.zeros(0, 2), "^a must be a non-empty"),
        (torch.zeros(3), torch.zeros(3), "^a must be a non-empty"),
        (torch.zeros(3, 2), torch.full((3, 2), float("nan")), "^b contains non-finite"),
    ],
)
def test_w1_rejects_bad_clouds(a, b, match):
    with pytest.raises(ValueError, match=match):
        wasserstein1(a, b)


# ---------------------------------------------------------------- k-variance


def test_one_variance_is_the_mean_distance_between_two_distinct_points():
    # Var_1 = E ||X - X'|| (digest Sec. 15 item 11); with disjoint draws X' != X, the mean over i != j.
    points = cloud(12, 3, 0)
    distances = torch.cdist(points, points)
    exact = float(distances.sum() / (12 * 11))
    estimate = k_variance(points, 1, draws=4000, seed=0)
    assert estimate == pytest.approx(exact, rel=0.03)


def test_k_variance_decreases_with_k():
    points = cloud(64, 2, 1)
    sizes = [1, 2, 4, 8, 16, 32]
    variances = [k_variance(points, k, draws=100, seed=k) for k in sizes]
    # Monte-Carlo error is a few percent of each value; successive drops are 10-25 %.
    assert all(later < 0.95 * earlier for earlier, later in itertools.pairwise(variances)), variances


def test_k_variance_defaults_to_half_the_cloud_and_is_seeded():
    points = cloud(21, 3, 2)
    assert k_variance(points, seed=5) == k_variance(points, 10, seed=5)
    assert k_variance(points, 3, draws=7, seed=5) == k_variance(points, 3, draws=7, seed=5)
    assert k_variance(points, 3, draws=7, seed=5) != k_variance(points, 3, draws=7, seed=6)
    # A generator is drawn from, so two calls on one generator see different splits.
    generator = np.random.default_rng(5)
    assert k_variance(points, 3, seed=generator) != k_variance(points, 3, seed=generator)


def test_k_variance_of_a_point_mass_is_zero_and_scales_with_the_cloud():
    assert k_variance(torch.ones(10, 4), draws=3) == 0.0
    points = cloud(16, 3, 3)
    scaled = k_variance(3.0 * points, 4, draws=5, seed=1)
    assert scaled == pytest.approx(3.0 * k_variance(points, 4, draws=5, seed=1))


@pytest.mark.parametrize(
    "features, k, draws, match",
    [
        (torch.zeros(8, 2), 0, 1, "^k must be an integer >= 1"),
        (torch.zeros(8, 2), 5, 1, r"^k must be in \[1, 4\]"),
        (torch.zeros(9, 2), 5, 1, r"^k must be in \[1, 4\]"),
        (torch.zeros(8, 2), 2.0, 1, "^k must be an integer"),
        (torch.zeros(8, 2), 2, 0, "^draws must be an integer >= 1"),
        (torch.zeros(8, 2), 2, 1.5, "^draws must be an integer >= 1"),
        (torch.zeros(0, 2), None, 1, "^features must be a non-empty"),
        (torch.zeros(1, 2), None, 1, "^features must hold at least 2 points"),
    ],
)
def test_k_variance_rejects_bad_arguments(features, k, draws, match):
    with pytest.raises(ValueError, match=match):
        k_variance(features, k, draws=draws)


def test_k_variance_rejects_a_negative_seed():
    with pytest.raises(ValueError, match="^seed must be an integer >= 0"):
        k_variance(torch.zeros(8, 2), seed=-1)


# ---------------------------------------------------------------- margins


def test_margin_on_hand_made_logits():
    logits = torch.tensor([[3.0, 1.0, 2.0], [3.0, 1.0, 2.0], [0.0, 5.0, 5.0], [-1.0, -2.0, -4.0]])
    labels = torch.tensor([0, 1, 2, 2])
    assert margin(logits, labels).tolist() == [1.0, -2.0, 0.0, -3.0]
    assert margin(logits, labels.int()).tolist() == [1.0, -2.0, 0.0, -3.0]


def test_gradient_normalized_margin_of_a_linear_head_is_analytic():
    # logits = W z + b: grad_z (f_y - f_j*) = w_y - w_j*, with j* the runner-up class.
    features, labels, weight, bias = labelled_sample(0)
    logits = features @ weight.T + bias
    runner_up = logits.scatter(1, labels[:, None], -torch.inf).argmax(dim=1)
    rho = logits[torch.arange(len(labels)), labels] - logits[torch.arange(len(labels)), runner_up]
    expected = rho / ((weight[labels] - weight[runner_up]).norm(dim=1) + GN_EPSILON)
    actual = gradient_normalized_margin(features, linear_head(weight, bias), labels)
    torch.testing.assert_close(actual, expected, rtol=1e-12, atol=1e-12)


def test_gradient_normalized_margin_matches_autograd_per_sample_on_a_nonlinear_head():
    features, labels, _, _ = labelled_sample(1)
    head = torch.nn.Sequential(torch.nn.Linear(5, 7), torch.nn.Tanh(), torch.nn.Linear(7, 3)).double()
    actual = gradient_normalized_margin(features, head, labels, eps=0.0)
    for i in range(len(labels)):
        z = features[i : i + 1].clone().requires_grad_(True)
        rho = margin(head(z), labels[i : i + 1])[0]
        (gradient,) = torch.autograd.grad(rho, z)
        assert float(actual[i]) == pytest.approx(float(rho.detach() / gradient.norm()), rel=1e-10)


def test_gradient_normalized_margin_leaves_the_features_alone():
    features, labels, weight, bias = labelled_sample(2)
    before = features.clone()
    gradient_normalized_margin(features, linear_head(weight, bias), labels)
    assert not features.requires_grad and features.grad is None
    torch.testing.assert_close(features, before, rtol=0, atol=0)


# ---------------------------------------------------------------- kV-Margin and kV-GN-Margin


def test_kv_margin_divides_the_margins_by_the_weighted_variance_times_lipschitz():
    features, labels, weight, bias = labelled_sample(3)
    result = kv_margin(features, linear_head(weight, bias), labels, draws=3, seed=4)
    logits = features @ weight.T + bias
    rho = margin(logits, labels)
    runner_up = logits.scatter(1, labels[:, None], -torch.inf).argmax(dim=1)
    norms = (weight[labels] - weight[runner_up]).norm(dim=1)
    assert result.classes == (0, 1, 2)
    assert result.weights == pytest.approx((12 / 48, 20 / 48, 16 / 48))
    for c in result.classes:
        members = labels == c
        assert result.lipschitz[c] == pytest.approx(float(norms[members].max()), rel=1e-12)
        expected = k_variance(features[members], draws=3, seed=np.random.default_rng([4, c]))
        assert result.variances[c] == pytest.approx(expected, rel=1e-12)
    normalizer = sum(p * v * lip for p, v, lip in zip(result.weights, result.variances, result.lipschitz, strict=True))
    assert result.normalizer == pytest.approx(normalizer, rel=1e-12)
    torch.testing.assert_close(result.margins, rho / normalizer, rtol=1e-12, atol=1e-12)
    assert result.median == pytest.approx(float(np.median((rho / normalizer).numpy())), rel=1e-12)
    assert result.quantile(0.9) > result.median > result.quantile(0.1)


def test_kv_gn_margin_uses_the_gn_margin_and_unit_lipschitz():
    features, labels, weight, bias = labelled_sample(4)
    head = linear_head(weight, bias)
    result = kv_gn_margin(features, head, labels, seed=1)
    assert result.lipschitz == (1.0, 1.0, 1.0)
    normalizer = sum(p * v for p, v in zip(result.weights, result.variances, strict=True))
    assert result.normalizer == pytest.approx(normalizer, rel=1e-12)
    expected = gradient_normalized_margin(features, head, labels) / normalizer
    torch.testing.assert_close(result.margins, expected, rtol=1e-12, atol=1e-12)
    # Same seed, same splits: the variances agree with kV-Margin's.
    assert kv_margin(features, head, labels, seed=1).variances == result.variances


def test_kv_margins_are_invariant_to_the_scale_of_the_features():
    # With a linear head without bias, scaling phi by s scales the margin, the GN margin and every
    # Var_c by s (same seed, same splits) and leaves Lip_c alone: the normalized margins are unchanged.
    features, labels, weight, _ = labelled_sample(5)
    head = linear_head(weight, torch.zeros(3, dtype=torch.float64))
    for measure in (kv_margin, kv_gn_margin):
        base = measure(features, head, labels, seed=2).median
        assert measure(10.0 * features, head, labels, seed=2).median == pytest.approx(base, rel=1e-6)


def test_kv_margin_prefers_concentrated_classes():
    # The nearest-class-mean head on the same centres, with tighter clusters: larger normalized margins.
    features, labels, _, _ = labelled_sample(6, spread=4.0)
    means = torch.stack([features[labels == c].mean(dim=0) for c in range(3)])
    head = linear_head(means, -0.5 * (means**2).sum(dim=1))
    tight = means[labels] + 0.3 * (features - means[labels])
    for measure in (kv_margin, kv_gn_margin):
        loose = measure(features, head, labels).median
        assert loose > 0.0
        assert measure(tight, head, labels).median > 2.5 * loose


def test_kv_margin_accepts_unflattened_features():
    # Conv-layer features (n, C, H, W): W1 sees them flattened, logit_fn the original shape.
    features, labels, weight, bias = labelled_sample(7, dim=12)
    head = linear_head(weight, bias)
    flat = kv_margin(features, head, labels)
    shaped = kv_margin(features.reshape(-1, 3, 2, 2), lambda z: head(z.flatten(1)), labels)
    torch.testing.assert_close(shaped.margins, flat.margins, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("measure", [kv_margin, kv_gn_margin])
def test_kv_margins_reject_bad_input(measure):
    features, labels, weight, bias = labelled_sample(8)
    head = linear_head(weight, bias)
    with pytest.raises(ValueError, match=r"^labels must have shape \(48,\)"):
        measure(features, head, labels[:-1])
    with pytest.raises(ValueError, match=r"^logit_fn must return \(n, K\)"):
        measure(features, lambda z: head(z)[:-1], labels)
    with pytest.raises(ValueError, match=r"^labels must lie in \[0, 2\]"):
        measure(features, head, labels + 1)
    with pytest.raises(ValueError, match="^labels must be an integer tensor"):
        measure(features, head, labels.double())
    with pytest.raises(ValueError, match="^features must be a floating-point tensor"):
        measure(features.numpy(), head, labels)
    with pytest.raises(ValueError, match="^k must be an integer >= 1"):
        measure(features, head, labels, k=0)
    with pytest.raises(ValueError, match="^labels: class 0 has 12 sample"):
        measure(features, head, labels, k=7)
    with pytest.raises(ValueError, match="^draws must be an integer >= 1"):
        measure(features, head, labels, draws=0)
    with pytest.raises(ValueError, match="^seed must be an integer >= 0"):
        measure(features, head, labels, seed=-1)
    lonely = labels.clone()
    lonely[1:12] = 1  # class 0 keeps one sample
    with pytest.raises(ValueError, match="^labels: class 0 has 1 sample"):
        measure(features, head, lonely)
    with pytest.raises(ValueError, match="^features: every class's k-variance"):
        measure(torch.zeros_like(features), head, labels)


def test_classes_absent_from_the_sample_get_no_weight():
    features, labels, weight, bias = labelled_sample(9)
    head = linear_head(torch.cat([weight, weight[:1] - 5.0]), torch.cat([bias, bias[:1]]))  # a 4th, unused class
    result = kv_gn_margin(features, head, labels)
    assert result.classes == (0, 1, 2)
    assert sum(result.weights) == pytest.approx(1.0)
