"""open_clip's call form of the objectives: ``loss(image_features, text_features, logit_scale[, logit_bias],
output_dict=False)``, checked against open_clip's formulas written here with plain torch (cross-entropy of the
scaled logits, SigLIP's sum of log-sigmoids over the batch), away from the default scale and bias; the aliases
through ``objectives.build``; and the calls of an open_clip loop under torchrun (2 and 3 processes): own pairs,
features the caller gathered, a process group of its own."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from launch import torchrun
from open_clip_ranks import BIAS, CASES, SCALE, global_batch, model_parameters, share

from uncurated import objectives
from uncurated.objectives.call_form import OUTPUT_KEY

ENGINES = {"dense": {"tiling": "never"}, "tiled": {"tiling": "always", "block_size": 4}}


def open_clip_clip(a, b, logit_scale):
    """open_clip's ClipLoss on one process: the mean of the two directions' cross-entropies."""
    a, b = F.normalize(a, dim=-1), F.normalize(b, dim=-1)
    logits = logit_scale * a @ b.T
    labels = torch.arange(a.shape[0])
    return (F.cross_entropy(logits, labels) + F.cross_entropy(logits.T, labels)) / 2


def open_clip_siglip(a, b, logit_scale, logit_bias):
    """open_clip's SigLipLoss on one process: minus the log-sigmoids of every pair, summed, over the batch size."""
    a, b = F.normalize(a, dim=-1), F.normalize(b, dim=-1)
    logits = logit_scale * a @ b.T + logit_bias
    signs = 2 * torch.eye(a.shape[0], dtype=a.dtype) - 1
    return -F.logsigmoid(signs * logits).sum() / a.shape[0]


def reference(name, a, b):
    """open_clip's value and its gradients with respect to the model's log scale (and bias)."""
    log_scale, bias = model_parameters()
    if name == "clip":
        value = open_clip_clip(a, b, log_scale.exp())
        return float(value.detach()), [float(g) for g in torch.autograd.grad(value, log_scale)]
    value = open_clip_siglip(a, b, log_scale.exp(), bias)
    return float(value.detach()), [float(g) for g in torch.autograd.grad(value, (log_scale, bias))]


@pytest.mark.parametrize("engine", ENGINES)
def test_clip_at_the_model_scale_is_open_clips_value_and_scale_gradient(engine):
    a, b = global_batch()
    log_scale, _ = model_parameters()
    loss = objectives.build("clip", **ENGINES[engine])
    value = loss(a, b, log_scale.exp())
    (gradient,) = torch.autograd.grad(value, log_scale)
    want_value, want_gradients = reference("clip", a, b)
    assert float(value.detach()) == pytest.approx(want_value, rel=1e-12)
    assert float(gradient) == pytest.approx(want_gradients[0], rel=1e-10)
    assert abs(want_gradients[0]) > 1e-3  # the gradient the test compares is not trivially zero


@pytest.mark.parametrize("engine", ENGINES)
def test_siglip_at_the_model_scale_and_bias_is_open_clips_value_and_gradients(engine):
    a, b = global_batch()
    log_scale, bias = model_parameters()
    loss = objectives.build("siglip", learnable=False, **ENGINES[engine])
    value = loss(a, b, log_scale.exp(), bias)
    gradients = torch.autograd.grad(value, (log_scale, bias))
    want_value, want_gradients = reference("siglip", a, b)
    assert float(value.detach()) == pytest.approx(want_value, rel=1e-12)
    for got, want in zip(gradients, want_gradients, strict=True):
        assert float(got) == pytest.approx(want, rel=1e-10)
        assert abs(want) > 1e-3


def test_siglip_without_the_model_bias_keeps_its_own():
    a, b = global_batch()
    value = objectives.build("siglip", learnable=False, bias=BIAS)(a, b, SCALE)
    assert float(value) == pytest.approx(reference("siglip", a, b)[0], rel=1e-12)


def test_a_plain_number_scale_is_a_fixed_temperature():
    a, b = global_batch()
    assert float(objectives.build("clip")(a, b, SCALE)) == pytest.approx(
        float(objectives.InfoNCE(1 / SCALE)(a, b)), rel=1e-12
    )


def test_output_dict_is_open_clips_mapping():
    a, b = global_batch()
    out = objectives.build("dcl")(a, b, output_dict=True)
    assert list(out) == [OUTPUT_KEY] == ["contrastive_loss"]
    assert float(out[OUTPUT_KEY]) == pytest.approx(float(objectives.build("dcl")(a, b)), rel=1e-15)


def test_a_learnable_temperature_inside_the_objective_still_learns():
    a, b = global_batch()
    loss = objectives.build("clip", learnable=True, temperature=0.2)
    value = loss(a, b)
    (gradient,) = torch.autograd.grad(value, loss.temperature.log_inverse)
    want_value = open_clip_clip(a, b, torch.tensor(5.0, dtype=torch.float64))
    assert float(value) == pytest.approx(float(want_value), rel=1e-6)
    assert float(gradient) != 0.0


@pytest.mark.parametrize(
    ("name", "params", "arguments", "error", "message"),
    [
        ("clip", {"learnable": True}, (SCALE,), ValueError, "learns its own temperature"),
        ("siglip", {}, (SCALE, BIAS), ValueError, "learns its own temperature"),
        ("clip", {}, (SCALE, BIAS), TypeError, "does not take logit_bias="),
        ("clip", {}, (-2.0,), ValueError, r"logit_scale must be in \(0, inf\)"),
        ("clip", {}, (torch.tensor(-2.0),), ValueError, "logit_scale must be finite and > 0"),
        ("clip", {}, (torch.ones(2),), ValueError, "logit_scale must be one floating-point number"),
        ("clip", {}, (True,), TypeError, "logit_scale must be a number"),
        ("sogclr", {"num_samples": 6}, (SCALE,), ValueError, "sogclr keeps its own temperature"),
    ],
)
def test_a_call_form_that_cannot_be_honoured_is_refused(name, params, arguments, error, message):
    a, b = global_batch()
    with pytest.raises(error, match=message):
        objectives.build(name, **params)(a, b, *arguments, index=torch.arange(6))


def test_switches_take_booleans_and_global_objectives_refuse_gathered():
    a, b = global_batch()
    with pytest.raises(TypeError, match="output_dict must be True or False"):
        objectives.build("clip")(a, b, output_dict="yes")
    with pytest.raises(ValueError, match="nuclr takes no gathered=True"):
        objectives.build("nuclr", num_samples=6)(a, b, index=torch.arange(6), gathered=True)


@pytest.mark.parametrize("name", [*objectives.OBJECTIVES, *objectives.ALIASES])
def test_every_name_builds(name):
    required = (
        {"num_samples": 6}
        if objectives.OBJECTIVES.get(name) in {objectives.SogCLR, objectives.ISogCLR, objectives.NUCLR}
        else {}
    )
    assert isinstance(objectives.build(name, **required), objectives.Objective)


def test_the_aliases_are_infonce_with_their_pairing_and_refuse_another():
    assert objectives.build("clip").pairing == "cross"
    assert objectives.build("simclr").pairing == "two_view"
    with pytest.raises(ValueError, match="simclr is infonce with pairing='two_view'"):
        objectives.build("simclr", pairing="cross")


@pytest.fixture(scope="module", params=[2, 3], ids=["2 processes", "3 processes"])
def per_rank(request, tmp_path_factory) -> list[dict]:
    folder = tmp_path_factory.mktemp("open_clip")
    torchrun(str(Path(__file__).with_name("open_clip_ranks.py")), str(folder), processes=request.param)
    return [torch.load(folder / f"rank{rank}.pt", weights_only=False) for rank in range(request.param)]


def one_process(name, a, b):
    """The loss of ``name`` on one process and its gradients (with respect to the model's scale and bias)."""
    if name in ("clip", "siglip"):
        return reference(name, a, b)
    log_scale, _ = model_parameters()
    value = objectives.build(name, **CASES[name])(a, b, log_scale.exp())
    return float(value.detach()), [float(torch.autograd.grad(value, log_scale)[0])]


@pytest.mark.parametrize("name", CASES)
def test_each_process_on_its_own_pairs_averages_to_one_process_on_the_batch(per_rank, name):
    want_value, want_gradients = one_process(name, *global_batch())
    values = [results[name, "own pairs"] for results in per_rank]
    assert sum(value for value, _ in values) / len(values) == pytest.approx(want_value, rel=1e-12)
    for k, want in enumerate(want_gradients):  # DDP's average of the processes' gradients
        assert sum(gradients[k] for _, gradients in values) / len(values) == pytest.approx(want, rel=1e-10)


@pytest.mark.parametrize("name", CASES)
def test_features_the_caller_gathered_are_one_process_value_with_the_flag_and_refused_without(per_rank, name):
    want_value, want_gradients = one_process(name, *global_batch())
    for results in per_rank:
        value, gradients = results[name, "gathered"]
        assert value == pytest.approx(want_value, rel=1e-12)
        assert gradients == pytest.approx(want_gradients, rel=1e-10)
        assert "every process passed the same features" in results[name, "gathered, no flag"]
        assert "gathered=True" in results[name, "gathered, no flag"]


def test_a_process_group_of_its_own_shares_the_batch_of_its_processes_only(per_rank):
    world = len(per_rank)
    a, b = global_batch()
    rows = torch.cat([torch.arange(6)[share(rank, world)] for rank in (0, world - 1)])
    want_value, want_gradients = reference("clip", a[rows], b[rows])
    members = [per_rank[0]["clip", "group"], per_rank[-1]["clip", "group"]]
    assert sum(value for value, _ in members) / 2 == pytest.approx(want_value, rel=1e-12)
    assert sum(gradients[0] for _, gradients in members) / 2 == pytest.approx(want_gradients[0], rel=1e-10)
    assert all(("clip", "group") not in results for results in per_rank[1:-1])


@pytest.mark.parametrize("name", ["clip", "siglip"])
def test_the_fused_kernels_take_the_model_scale_and_bias_with_their_gradients(name):
    """tiling="triton" (Triton's interpreter without CUDA, tests/conftest.py): float32, to float32's rounding."""
    pytest.importorskip("triton")
    if not torch.cuda.is_available() and os.environ.get("TRITON_INTERPRET") != "1":
        pytest.skip("the kernels need CUDA or Triton's interpreter")
    a, b = (x.float() for x in global_batch())
    log_scale, bias = (p.detach().float().requires_grad_(True) for p in model_parameters())
    params = {"learnable": False} if name == "siglip" else {}
    loss = objectives.build(name, tiling="triton", block_size=16, **params)
    extra = (bias,) if name == "siglip" else ()
    value = loss(a, b, log_scale.exp(), *extra)
    gradients = torch.autograd.grad(value, (log_scale, *extra))
    want_value, want_gradients = reference(name, a.double(), b.double())
    assert float(value.detach()) == pytest.approx(want_value, rel=1e-5)
    assert [float(g) for g in gradients] == pytest.approx(want_gradients, rel=1e-4)


def test_open_clips_model_output_passes_as_keywords():
    """open_clip's loop calls ``loss(**model_out, output_dict=True)``: the model's outputs by their names."""
    a, b = global_batch()
    log_scale, bias = model_parameters()
    model_out = {"image_features": a, "text_features": b, "logit_scale": log_scale.exp(), "logit_bias": bias}
    losses = objectives.build("siglip", learnable=False)(**model_out, output_dict=True)
    assert float(losses["contrastive_loss"].detach()) == pytest.approx(reference("siglip", a, b)[0], rel=1e-12)
