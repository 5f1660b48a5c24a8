"""Property tests: finite values and gradients across temperatures, batch sizes and degenerate batches."""

import math

import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from reference import batch_objective_names

from uncurated import objectives

KINDS = ("random", "duplicated", "antipodal")


def make_batch(kind, batch, dim, seed, dtype):
    generator = torch.Generator().manual_seed(seed)
    base = torch.randn(batch, dim, generator=generator, dtype=dtype)
    if kind == "random":
        return base, torch.randn(batch, dim, generator=generator, dtype=dtype)
    if kind == "duplicated":
        repeated = base[:1].expand(batch, dim).clone()
        return repeated, repeated.clone()
    return base, -base


@st.composite
def objective_params(draw):
    name = draw(st.sampled_from(batch_objective_names()))
    params = {}
    if name in ("dcl", "hcl"):
        params["tau_plus"] = draw(st.floats(0.0, 0.99))
        params["clamp"] = draw(st.sampled_from(["min", "zero", "fallback"]))
    if name == "hcl":
        params["beta"] = draw(st.floats(0.0, 20.0))
    if name == "rince":
        params["q"] = draw(st.floats(1e-4, 1.0))
        params["lam"] = draw(st.floats(1e-3, 1.0))
    if name == "clip_reg":
        params["variant"] = draw(st.sampled_from(["positive", "negative", "only"]))
    return name, params


@settings(max_examples=150, deadline=None)
@given(
    spec=objective_params(),
    pairing=st.sampled_from(["cross", "two_view"]),
    batch=st.integers(2, 64),
    dim=st.integers(2, 16),
    temperature=st.floats(0.01, 1.0),
    kind=st.sampled_from(KINDS),
    seed=st.integers(0, 2**16),
)
def test_values_and_gradients_are_finite(spec, pairing, batch, dim, temperature, kind, seed):
    name, params = spec
    dtype = torch.float32
    if name == "rince":
        # RINCE's value is of order exp(q (1/t + log 2B)); float32 holds up to exp(88) (see its docstring).
        if params["q"] * (1.0 / temperature + math.log(2 * batch)) > 80:
            dtype = torch.float64
    a, b = make_batch(kind, batch, dim, seed, dtype)
    a.requires_grad_(True)
    b.requires_grad_(True)
    loss = objectives.build(name, temperature=temperature, pairing=pairing, learnable=False, **params)
    value = loss(a, b)
    grad_a, grad_b = torch.autograd.grad(value, (a, b))
    assert bool(torch.isfinite(value)), f"{name} value {value}"
    assert bool(torch.isfinite(grad_a).all() and torch.isfinite(grad_b).all()), f"{name} gradient"
