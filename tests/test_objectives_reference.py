"""Every objective agrees with an independent per-anchor implementation of its paper's formula."""

import pytest
import reference as ref
import torch
from reference import random_batch

from uncurated.objectives import functional as F
from uncurated.objectives.cyclip import consistency_regularizer, consistency_terms

PAIRINGS = ["cross", "two_view"]


@pytest.mark.parametrize("pairing", PAIRINGS)
@pytest.mark.parametrize("reduction", ["mean", "sum"])
def test_infonce_matches_reference(pairing, reduction):
    a, b = random_batch()
    got = F.infonce(a, b, temperature=0.3, pairing=pairing, direction_reduction=reduction)
    torch.testing.assert_close(got, ref.infonce(a, b, 0.3, pairing, reduction), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("pairing", PAIRINGS)
@pytest.mark.parametrize("tau_plus", [0.05, 0.3])
def test_dcl_matches_reference(pairing, tau_plus):
    a, b = random_batch()
    got = F.dcl(a, b, tau_plus=tau_plus, temperature=0.5, pairing=pairing)
    torch.testing.assert_close(got, ref.dcl(a, b, 0.5, pairing, tau_plus), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("pairing", PAIRINGS)
@pytest.mark.parametrize(("beta", "tau_plus"), [(0.5, 0.1), (2.0, 0.0), (1.0, 0.2)])
def test_hcl_matches_reference(pairing, beta, tau_plus):
    a, b = random_batch()
    got = F.hcl(a, b, beta=beta, tau_plus=tau_plus, temperature=0.5, pairing=pairing)
    torch.testing.assert_close(got, ref.hcl(a, b, 0.5, pairing, beta, tau_plus), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("pairing", PAIRINGS)
@pytest.mark.parametrize(("q", "lam"), [(0.1, 0.01), (0.5, 0.5), (1.0, 0.01)])
def test_rince_matches_reference(pairing, q, lam):
    a, b = random_batch()
    got = F.rince(a, b, q=q, lam=lam, temperature=0.5, pairing=pairing)
    torch.testing.assert_close(got, ref.rince(a, b, 0.5, pairing, q, lam), rtol=1e-12, atol=1e-12)


def test_siglip_matches_the_pairwise_sigmoid_formula():
    a, b = random_batch()
    got = F.siglip(a, b, temperature=0.1, bias=-10.0)
    torch.testing.assert_close(got, ref.siglip_cross(a, b, 0.1, -10.0), rtol=1e-12, atol=1e-12)


def test_siglip_two_view_scores_each_ordered_pair_of_distinct_views():
    a, b = random_batch(batch=4)
    views = ref.unit(torch.cat([a, b]))
    logits = views @ views.T / 0.2 + 1.5
    positive = torch.roll(torch.eye(8, dtype=a.dtype), 4, dims=1)
    signs = 2 * positive - 1
    off_self = ~torch.eye(8, dtype=torch.bool)
    expected = -(torch.nn.functional.logsigmoid(signs * logits) * off_self).sum() / 8
    got = F.siglip(a, b, temperature=0.2, bias=1.5, pairing="two_view")
    torch.testing.assert_close(got, expected, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("pairing", PAIRINGS)
def test_cyclip_is_clip_plus_dense_consistency_terms(pairing):
    a, b = random_batch(batch=7, dim=3)
    inmodal, crossmodal = ref.cyclip_terms_dense(a, b)
    clip = F.infonce(a, b, temperature=0.07, pairing=pairing)
    got = F.cyclip(a, b, lam1=0.3, lam2=0.7, temperature=0.07, pairing=pairing)
    torch.testing.assert_close(got, clip + 0.3 * inmodal + 0.7 * crossmodal, rtol=1e-12, atol=1e-12)


def test_cyclip_closed_form_gradient_is_autograds():
    """The regularizer's hand-written backward against autograd through the Gram form, and finite differences."""
    a, b = random_batch(batch=9, dim=4, requires_grad=True)
    inmodal, crossmodal = consistency_terms(a, b)
    expected = torch.autograd.grad(0.3 * inmodal + 0.7 * crossmodal, (a, b))
    got = torch.autograd.grad(consistency_regularizer(a, b, 0.3, 0.7), (a, b))
    for want, have in zip(expected, got, strict=True):
        torch.testing.assert_close(have, want, rtol=1e-12, atol=1e-12)
    assert torch.autograd.gradcheck(lambda x, y: consistency_regularizer(x, y, 0.25, 0.5), (a, b))


def test_cyclip_gram_form_in_float32_is_close_to_dense():
    a, b = random_batch(batch=256, dim=64, dtype=torch.float32)
    inmodal, crossmodal = ref.cyclip_terms_dense(a.double(), b.double())
    na, nb = ref.unit(a), ref.unit(b)
    torch.testing.assert_close(F.inmodal_consistency(na, nb).double(), inmodal, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(F.crossmodal_consistency(na, nb).double(), crossmodal, rtol=1e-4, atol=1e-4)


def test_negative_pair_regularizer_is_the_mean_off_diagonal_cosine():
    a, b = random_batch(batch=5)
    cosines = ref.unit(a) @ ref.unit(b).T
    expected = cosines[~torch.eye(5, dtype=torch.bool)].mean()
    clip = F.infonce(a, b, temperature=0.07, direction_reduction="sum")
    got = F.clip_reg(a, b, lam=0.1, variant="negative")
    torch.testing.assert_close(got, clip + 0.1 * expected, rtol=1e-12, atol=1e-12)


def test_positive_pair_regularizer_is_minus_the_mean_diagonal_cosine():
    a, b = random_batch(batch=5)
    expected_reg = -torch.diagonal(ref.unit(a) @ ref.unit(b).T).mean()
    clip = F.infonce(a, b, temperature=0.07, direction_reduction="sum")
    torch.testing.assert_close(F.clip_reg(a, b, lam=0.1), clip + 0.1 * expected_reg, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(F.clip_reg(a, b, lam=0.1, variant="only"), 0.1 * expected_reg)


@pytest.mark.parametrize("pairing", PAIRINGS)
def test_supervised_oracle_matches_reference(pairing):
    a, b = random_batch(batch=8)
    labels = torch.tensor([0, 1, 0, 2, 1, 3, 0, 2])
    got = F.infonce(a, b, temperature=0.5, pairing=pairing, labels=labels)
    torch.testing.assert_close(got, ref.infonce(a, b, 0.5, pairing, labels=labels), rtol=1e-12, atol=1e-12)
    got = F.dcl(a, b, tau_plus=0.1, temperature=0.5, pairing=pairing, labels=labels)
    torch.testing.assert_close(got, ref.dcl(a, b, 0.5, pairing, 0.1, labels=labels), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("pairing", PAIRINGS)
def test_supervised_oracle_with_distinct_labels_changes_nothing(pairing):
    a, b = random_batch()
    labels = torch.arange(a.shape[0])
    for name in ("infonce", "dcl", "hcl", "rince"):
        fn = getattr(F, name)
        torch.testing.assert_close(fn(a, b, pairing=pairing, labels=labels), fn(a, b, pairing=pairing))
