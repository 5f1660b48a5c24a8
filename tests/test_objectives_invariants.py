"""Exact invariants from the papers (thesis ch. 3-5, Chen et al. 2024)."""

import math

import pytest
import reference as ref
import torch
from reference import random_batch

from uncurated.objectives import functional as F
from uncurated.objectives.base import score_matrices

PAIRINGS = ["cross", "two_view"]


@pytest.mark.parametrize("pairing", PAIRINGS)
@pytest.mark.parametrize("temperature", [0.07, 0.5])
def test_dcl_with_tau_plus_zero_is_infonce(pairing, temperature):
    a, b = random_batch(batch=8, dim=6)
    kwargs = dict(temperature=temperature, pairing=pairing)
    torch.testing.assert_close(F.dcl(a, b, tau_plus=0.0, **kwargs), F.infonce(a, b, **kwargs), rtol=1e-13, atol=1e-13)


@pytest.mark.parametrize("pairing", PAIRINGS)
@pytest.mark.parametrize("tau_plus", [0.0, 0.1, 0.4])
def test_hcl_with_beta_zero_is_dcl(pairing, tau_plus):
    a, b = random_batch(batch=8, dim=6)
    kwargs = dict(temperature=0.5, pairing=pairing, tau_plus=tau_plus)
    torch.testing.assert_close(F.hcl(a, b, beta=0.0, **kwargs), F.dcl(a, b, **kwargs), rtol=1e-13, atol=1e-13)


def test_hcl_negative_term_rises_monotonically_to_the_hardest_negative():
    a, b = random_batch(batch=8, dim=6)
    (scores,) = score_matrices(ref.unit(a), ref.unit(b), temperature=0.5, pairing="two_view")
    betas = [0.0, 0.5, 1.0, 2.0, 5.0, 10.0, 50.0, 200.0]
    terms = torch.stack([scores.negative_logsumexp(beta + 1) - scores.negative_logsumexp(beta) for beta in betas])
    assert bool((terms[1:] >= terms[:-1] - 1e-12).all()), "the weighted negative term must not fall with beta"
    assert bool((terms[1:5] > terms[:4]).all()), "below saturation it must rise strictly"
    hardest = scores._logits.masked_fill(~scores._negative_mask, -math.inf).max(dim=1).values
    torch.testing.assert_close(terms[-1], hardest, rtol=0, atol=2e-2)
    assert bool((terms <= hardest + 1e-12).all()), "a weighted mean never exceeds the maximum"


@pytest.mark.parametrize("pairing", PAIRINGS)
def test_rince_tends_to_infonce_plus_log_lambda_in_value_and_gradient(pairing):
    a, b = random_batch(requires_grad=True)
    lam = 0.3
    target = F.infonce(a, b, temperature=0.5, pairing=pairing)
    target_grads = torch.autograd.grad(target, (a, b))
    errors = []
    for q in (1e-2, 1e-4, 1e-6):
        value = F.rince(a, b, q=q, lam=lam, temperature=0.5, pairing=pairing)
        grads = torch.autograd.grad(value, (a, b))
        errors.append(abs(value.item() - target.item() - math.log(lam)))
        for grad, expected in zip(grads, target_grads, strict=True):
            torch.testing.assert_close(grad, expected, rtol=0, atol=20 * q)
    assert errors[0] > errors[1] > errors[2] and errors[2] < 1e-5


@pytest.mark.parametrize("pairing", PAIRINGS)
def test_rince_at_q_one_is_the_linear_symmetric_loss(pairing):
    a, b = random_batch()
    lam, t = 0.2, 0.5
    got = F.rince(a, b, q=1.0, lam=lam, temperature=t, pairing=pairing)
    per_direction = []
    for rows in ref.anchors_positives_negatives(ref.unit(a), ref.unit(b), pairing):
        values = [-(1 - lam) * torch.exp(x @ p / t) + lam * torch.exp(n @ x / t).sum() for x, p, n, _ in rows]
        per_direction.append(torch.stack(values).mean())
    torch.testing.assert_close(got, sum(per_direction) / len(per_direction), rtol=1e-12, atol=1e-12)


def test_clip_gradient_with_respect_to_the_cosines():
    """d L / d S = ((P_row - I) + (P_col - I)) / (B t) for the summed CLIP loss (Chen et al. 2024, Sec. 7b item 3)."""
    batch, t = 6, 0.2
    a, b = (ref.unit(x) for x in random_batch(batch=batch, dim=4))
    cosines = (a @ b.T).requires_grad_(True)

    # Autograd through the objective, chained to S = a b^T by hand: dL/da = G b, dL/db = G^T a.
    a_leaf, b_leaf = a.clone().requires_grad_(True), b.clone().requires_grad_(True)
    loss = F.infonce(a_leaf, b_leaf, temperature=t, direction_reduction="sum", normalize=False)
    grad_a, grad_b = torch.autograd.grad(loss, (a_leaf, b_leaf))

    p_row = torch.softmax(cosines.detach() / t, dim=1)
    p_col = torch.softmax(cosines.detach() / t, dim=0)
    eye = torch.eye(batch, dtype=a.dtype)
    expected = ((p_row - eye) + (p_col - eye)) / (batch * t)
    torch.testing.assert_close(grad_a, expected @ b, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(grad_b, expected.T @ a, rtol=1e-12, atol=1e-12)


def test_positive_pair_regularizer_identity_for_unit_vectors():
    a, b = (ref.unit(x) for x in random_batch(batch=9, dim=7))
    half_squared_distance = 0.5 * (a - b).square().sum(dim=1).mean() - 1
    torch.testing.assert_close(F.positive_pair_regularizer(a, b), half_squared_distance, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("reduction", ["sum", "mean"])
def test_clip_loss_is_above_zero_and_the_false_negative_floor(reduction):
    """With exact duplicates, L >= (1/B) sum_i 2 log c_i (summed directions; Chen et al. 2024, Sec. 7b item 5)."""
    groups = torch.tensor([0, 0, 0, 1, 1, 2, 3, 3])
    centers_a, centers_b = random_batch(batch=4, dim=5)
    a, b = centers_a[groups], centers_b[groups]
    counts = torch.bincount(groups)[groups].to(a.dtype)
    floor = 2 * torch.log(counts).mean()
    if reduction == "mean":
        floor = floor / 2
    for t in (0.01, 0.07, 1.0):
        value = F.infonce(a, b, temperature=t, direction_reduction=reduction)
        assert float(value) >= float(floor) - 1e-12 >= 0.0
    # At a low temperature with aligned duplicates, the floor is attained.
    aligned = F.infonce(centers_a[groups], centers_a[groups] * 3.0, temperature=0.001, direction_reduction=reduction)
    torch.testing.assert_close(aligned, floor, rtol=0, atol=1e-6)


@pytest.mark.parametrize("name", ["dcl", "hcl"])
def test_extra_positive_views_equal_to_the_positive_change_nothing(name):
    # Two views that coincide, so every anchor's positive is its sample's one vector.
    a, _ = random_batch()
    fn = getattr(F, name)
    copies = torch.stack([a, a * 2.0], dim=1)
    torch.testing.assert_close(fn(a, a, extra_positives=copies), fn(a, a))


def test_dcl_extra_positives_enter_the_positive_mean():
    a, b = random_batch(batch=4, dim=3)
    extra = torch.randn(4, 2, 3, dtype=a.dtype)
    t, tau_plus = 0.5, 0.2
    got = F.dcl(a, b, tau_plus=tau_plus, temperature=t, extra_positives=extra)
    views = ref.unit(torch.cat([a, b]))
    extra_views = ref.unit(torch.cat([extra, extra]))
    losses = []
    (rows,) = ref.anchors_positives_negatives(ref.unit(a), ref.unit(b), "two_view")
    for i, (x, positive, negatives, n_slots) in enumerate(rows):
        positive_views = torch.cat([positive[None], extra_views[i]])
        positive_mean = torch.exp(positive_views @ x / t).mean()
        g = (torch.exp(negatives @ x / t).mean() - tau_plus * positive_mean) / (1 - tau_plus)
        g = torch.clamp(g, min=math.exp(-1 / t))
        losses.append(-torch.log(torch.exp(x @ positive / t) / (torch.exp(x @ positive / t) + n_slots * g)))
    assert views.shape[0] == len(losses)
    torch.testing.assert_close(got, torch.stack(losses).mean(), rtol=1e-12, atol=1e-12)


def test_dcl_clamp_modes_differ_only_where_the_estimate_is_below_the_floor():
    # tau_plus close to 1 with an easy positive drives the bracket negative for some anchors.
    a, b = random_batch(batch=6, dim=4)
    b = a + 0.05 * b
    t, tau_plus = 0.5, 0.9
    kwargs = dict(tau_plus=tau_plus, temperature=t, pairing="cross")
    clamped = F.dcl(a, b, clamp="min", **kwargs)
    fallback = F.dcl(a, b, clamp="fallback", **kwargs)
    zero = F.dcl(a, b, clamp="zero", **kwargs)
    torch.testing.assert_close(clamped, ref.dcl(a, b, t, "cross", tau_plus), rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(fallback, ref.dcl(a, b, t, "cross", tau_plus, clamp="fallback"), rtol=1e-12, atol=1e-12)
    assert float(zero) < float(clamped) < float(fallback)
