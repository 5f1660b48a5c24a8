"""Every objective's gradients agree with finite differences in float64, temperature included."""

import pytest
import torch
from reference import random_batch

from uncurated import objectives
from uncurated.objectives import functional as F

CASES = {
    "infonce": (F.infonce, {}),
    "infonce_sum": (F.infonce, {"direction_reduction": "sum"}),
    "siglip": (F.siglip, {"bias": -1.0}),
    "cyclip": (F.cyclip, {}),
    "dcl": (F.dcl, {"tau_plus": 0.1}),
    "dcl_fallback": (F.dcl, {"tau_plus": 0.1, "clamp": "fallback"}),
    "hcl": (F.hcl, {"beta": 1.0, "tau_plus": 0.1}),
    "rince_small_q": (F.rince, {"q": 0.1, "lam": 0.01}),
    "rince_q_one": (F.rince, {"q": 1.0, "lam": 0.5}),
    "clip_reg": (F.clip_reg, {}),
    "clip_reg_negative": (F.clip_reg, {"variant": "negative"}),
}


@pytest.mark.parametrize("pairing", ["cross", "two_view"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_gradcheck(case, pairing):
    fn, params = CASES[case]
    a, b = random_batch(batch=5, dim=4, requires_grad=True)
    temperature = torch.tensor(0.5, dtype=torch.float64, requires_grad=True)

    def objective(a, b, temperature):
        return fn(a, b, temperature=temperature, pairing=pairing, **params)

    assert torch.autograd.gradcheck(objective, (a, b, temperature), eps=1e-6, atol=1e-6, rtol=1e-5)


def test_gradcheck_supervised_oracle_and_extra_positives():
    a, b = random_batch(batch=6, dim=4, requires_grad=True)
    extra = torch.randn(6, 2, 4, dtype=torch.float64, requires_grad=True)
    labels = torch.tensor([0, 1, 0, 1, 2, 2])

    def objective(a, b, extra):
        return F.hcl(a, b, beta=0.5, tau_plus=0.1, labels=labels, extra_positives=extra)

    assert torch.autograd.gradcheck(objective, (a, b, extra), eps=1e-6, atol=1e-6, rtol=1e-5)


def test_gradcheck_siglip_bias():
    a, b = random_batch(batch=4, dim=3, requires_grad=True)
    bias = torch.tensor(-2.0, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda a, b, bias: F.siglip(a, b, temperature=0.5, bias=bias), (a, b, bias))


@pytest.mark.parametrize("clamp", ["min", "zero", "fallback"])
@pytest.mark.parametrize("name", ["dcl", "hcl"])
def test_gradcheck_with_anchors_at_the_floor(name, clamp):
    """A large tau_plus puts anchors at the floor, where the closed-form backward sends the gradient to the
    floor's temperature (or, with ``"fallback"``, to the biased term): features and temperature agree with
    finite differences there, and the floor was reached."""
    a, b = random_batch(batch=9, dim=5, requires_grad=True)
    temperature = torch.tensor(0.5, dtype=torch.float64, requires_grad=True)
    params = {"tau_plus": 0.8, "clamp": clamp, **({"beta": 1.0} if name == "hcl" else {})}
    module = objectives.build(name, **params)
    module.loss(a, b, temperature=temperature)
    assert module.diagnostics["clamped_fraction"] > 0

    def objective(a, b, temperature):
        return module.loss(a, b, temperature=temperature)

    assert torch.autograd.gradcheck(objective, (a, b, temperature), eps=1e-6, atol=1e-6, rtol=1e-5)
