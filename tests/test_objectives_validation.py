"""Bad input raises ValueError naming the argument and the accepted range."""

import math

import pytest
import torch
from reference import batch_objective_names, random_batch

from uncurated import objectives
from uncurated.objectives import functional as F


@pytest.mark.parametrize("name", batch_objective_names())
def test_feature_checks(name):
    loss = objectives.build(name)
    a, b = random_batch(batch=4, dim=3, dtype=torch.float32)
    with pytest.raises(ValueError, match=r"same shape"):
        loss(a, b[:3])
    with pytest.raises(ValueError, match=r"same shape"):
        loss(a, torch.randn(4, 5))
    with pytest.raises(ValueError, match=r"shape \(batch, dim\)"):
        loss(a[0], b[0])
    with pytest.raises(ValueError, match=r"at least 2"):
        loss(a[:1], b[:1])
    bad = a.clone()
    bad[1, 2] = math.nan
    with pytest.raises(ValueError, match=r"a contains non-finite"):
        loss(bad, b)
    bad[1, 2] = math.inf
    with pytest.raises(ValueError, match=r"b contains non-finite"):
        loss(a, bad)
    with pytest.raises(ValueError, match=r"floating-point"):
        loss(a.long(), b.long())
    narrow = torch.float8_e4m3fn
    with pytest.raises(ValueError, match=r"a must be of type float64, float32, bfloat16, float16 .* got float8_e4m3fn"):
        loss(a.to(narrow), b.to(narrow))


@pytest.mark.parametrize("name", batch_objective_names())
@pytest.mark.parametrize("temperature", [0.0, -0.5, math.nan])
def test_temperature_must_be_positive(name, temperature):
    with pytest.raises(ValueError, match=r"temperature must be in \(0, inf\]"):
        objectives.build(name, temperature=temperature, learnable=False)


def test_learnable_temperature_must_be_within_the_logit_scale_bound():
    with pytest.raises(ValueError, match=r"temperature must be in \[0.01, inf\]"):
        objectives.build("infonce", temperature=0.005, learnable=True)


@pytest.mark.parametrize(
    ("name", "params", "message"),
    [
        ("dcl", {"tau_plus": 1.0}, r"tau_plus must be in \[0, 1\), got 1"),
        ("dcl", {"tau_plus": -0.1}, r"tau_plus must be in \[0, 1\)"),
        ("hcl", {"tau_plus": 1.5}, r"tau_plus must be in \[0, 1\)"),
        ("hcl", {"beta": -1.0}, r"beta must be in \[0, inf\]"),
        ("dcl", {"clamp": "max"}, r"clamp must be one of 'min', 'zero', 'fallback'"),
        ("rince", {"q": 0.0}, r"q must be in \(0, 1\]"),
        ("rince", {"q": 1.5}, r"q must be in \(0, 1\]"),
        ("rince", {"lam": 0.0}, r"lam must be in \(0, 1\]"),
        ("rince", {"lam": 2.0}, r"lam must be in \(0, 1\]"),
        ("clip_reg", {"lam": 0.0}, r"lam must be in \(0, inf\]"),
        ("clip_reg", {"variant": "both"}, r"variant must be one of"),
        ("cyclip", {"lam1": -1.0}, r"lam1 must be in \[0, inf\]"),
        ("infonce", {"pairing": "diagonal"}, r"pairing must be one of 'cross', 'two_view'"),
        ("infonce", {"direction_reduction": "max"}, r"direction_reduction must be one of 'mean', 'sum'"),
        ("siglip", {"direction_reduction": "sum"}, r"siglip does not take parameter\(s\) direction_reduction"),
    ],
)
def test_parameter_ranges(name, params, message):
    with pytest.raises(ValueError, match=message):
        objectives.build(name, **params)


def test_functional_twins_check_their_parameters_too():
    a, b = random_batch()
    with pytest.raises(ValueError, match=r"tau_plus"):
        F.dcl(a, b, tau_plus=1.0)
    with pytest.raises(ValueError, match=r"q must be"):
        F.rince(a, b, q=0.0)
    with pytest.raises(ValueError, match=r"temperature must be"):
        F.infonce(a, b, temperature=torch.tensor(-1.0))


@pytest.mark.parametrize("name", ["infonce", "dcl", "hcl", "rince"])
def test_label_checks(name):
    a, b = random_batch(batch=4)
    loss = objectives.build(name)
    with pytest.raises(ValueError, match=r"labels must have shape \(4,\)"):
        loss(a, b, labels=torch.tensor([0, 1, 2]))
    with pytest.raises(ValueError, match=r"labels must be an integer tensor"):
        loss(a, b, labels=torch.zeros(4))
    with pytest.raises(ValueError, match=r"no negative with another label"):
        loss(a, b, labels=torch.zeros(4, dtype=torch.long))


@pytest.mark.parametrize("name", ["siglip", "cyclip", "clip_reg"])
def test_objectives_without_an_oracle_reject_labels(name):
    a, b = random_batch(batch=4)
    with pytest.raises(TypeError):
        objectives.build(name)(a, b, labels=torch.arange(4))


def test_extra_positives_checks():
    a, b = random_batch(batch=4, dim=3)
    with pytest.raises(ValueError, match=r"extra_positives must have shape \(4, M - 1, 3\)"):
        F.dcl(a, b, extra_positives=torch.randn(4, 3, dtype=a.dtype))
    with pytest.raises(ValueError, match=r"pairing='two_view' only"):
        F.dcl(a, b, pairing="cross", extra_positives=torch.randn(4, 1, 3, dtype=a.dtype))


def test_siglip_class_rejects_a_direction_reduction():
    with pytest.raises(ValueError, match=r"direction_reduction does not apply to siglip"):
        objectives.SigLIP(direction_reduction="sum")


def test_build_rejects_unknown_names_and_parameters():
    with pytest.raises(ValueError, match=r"unknown objective 'clop'; available: infonce, siglip, .*, clip, simclr"):
        objectives.build("clop")
    with pytest.raises(ValueError, match=r"dcl does not take parameter\(s\) beta; it takes: .*tau_plus"):
        objectives.build("dcl", beta=1.0)
