"""The objectives' registry, modules, temperature and schedules."""

import math

import pytest
import torch
from reference import random_batch

from uncurated import objectives
from uncurated.objectives import functional as F
from uncurated.objectives.schedules import anneal_beta, warmup_q
from uncurated.objectives.temperature import Temperature

FUNCTIONAL = {
    "infonce": F.infonce,
    "siglip": F.siglip,
    "cyclip": F.cyclip,
    "dcl": F.dcl,
    "hcl": F.hcl,
    "rince": F.rince,
    "clip_reg": F.clip_reg,
}


def test_every_objective_is_available_with_its_paper_defaults():
    specs = {spec.name: spec for spec in objectives.available()}
    assert set(specs) == set(FUNCTIONAL) | {"sogclr", "isogclr", "nuclr"}
    assert {name for name, spec in specs.items() if spec.stateful} == {"sogclr", "isogclr", "nuclr"}
    assert repr(specs["nuclr"].defaults["num_samples"]) == "<required>"
    assert specs["infonce"].defaults["temperature"] == 0.07
    assert specs["dcl"].defaults == {
        "temperature": 0.5,
        "learnable": False,
        "temperature_parametrization": "log",
        "pairing": "two_view",
        "direction_reduction": "mean",
        "normalize": True,
        "group": None,
        "tiling": "auto",
        "block_size": None,
        "memory_budget": None,
        "distributed": None,
        "tile_policy": "auto",
        "compile": None,
        "tau_plus": 0.1,
        "clamp": "min",
    }
    assert specs["siglip"].defaults["bias"] == -10.0 and specs["siglip"].defaults["learnable"] is True
    assert "direction_reduction" not in specs["siglip"].defaults
    assert specs["clip_reg"].defaults["direction_reduction"] == "sum"
    assert specs["cyclip"].defaults["lam1"] == specs["cyclip"].defaults["lam2"] == 0.25
    assert specs["rince"].defaults["lam"] == 0.01
    assert all(spec.summary for spec in specs.values())


def test_build_asks_for_the_dataset_size_of_a_global_objective():
    with pytest.raises(ValueError, match=r"nuclr needs parameter\(s\) num_samples"):
        objectives.build("nuclr")
    assert objectives.build("nuclr", num_samples=10).state.sizes == {"a": 10, "b": 10}


@pytest.mark.parametrize("name", sorted(FUNCTIONAL))
def test_module_equals_its_functional_twin_with_the_same_defaults(name):
    a, b = random_batch(dtype=torch.float32)
    module = objectives.build(name, learnable=False)
    torch.testing.assert_close(module(a, b), FUNCTIONAL[name](a, b))


@pytest.mark.parametrize("name", sorted(FUNCTIONAL))
def test_learnable_temperature_receives_a_gradient(name):
    loss = objectives.build(name, learnable=True)
    a, b = random_batch(dtype=torch.float32)
    loss(a, b).backward()
    parameter = loss.temperature.log_inverse
    assert isinstance(parameter, torch.nn.Parameter)
    assert parameter.grad is not None and bool(parameter.grad != 0)


def test_clip_logit_scale_starts_at_log_one_over_0_07_and_is_clamped_at_100():
    temperature = Temperature(0.07, learnable=True)
    assert math.isclose(temperature.log_inverse.item(), math.log(1 / 0.07), rel_tol=1e-6)
    with torch.no_grad():
        temperature.log_inverse.fill_(7.0)
    assert math.isclose(temperature().item(), 0.01, rel_tol=1e-6)
    assert math.isclose(temperature.log_inverse.item(), math.log(100.0), rel_tol=1e-6)


def test_identity_parametrized_inverse_temperature_is_kept_in_one_to_a_hundred():
    temperature = Temperature(0.07, learnable=True, parametrization="identity")
    assert temperature.inverse.item() == pytest.approx(1 / 0.07)
    with torch.no_grad():
        temperature.inverse.fill_(250.0)
    assert temperature().item() == pytest.approx(0.01)
    with torch.no_grad():
        temperature.inverse.fill_(0.2)
    assert temperature().item() == pytest.approx(1.0)
    loss = objectives.build("infonce", learnable=True, temperature_parametrization="identity", normalize=False)
    a, b = random_batch(dtype=torch.float32)
    loss(a, b).backward()
    assert loss.temperature.inverse.grad is not None
    with pytest.raises(ValueError, match="applies to a learnable temperature"):
        Temperature(0.07, parametrization="identity")
    with pytest.raises(ValueError, match=r"temperature must be in \[0.01, 1\]"):
        Temperature(2.0, learnable=True, parametrization="identity")


def test_fixed_temperature_is_a_buffer_not_a_parameter():
    loss = objectives.build("infonce", temperature=0.2)
    assert list(loss.parameters()) == []
    assert "temperature.log_inverse" in loss.state_dict()


def test_siglip_learns_its_bias_and_scale():
    loss = objectives.build("siglip")
    names = {name for name, _ in loss.named_parameters()}
    assert names == {"bias", "temperature.log_inverse"}
    assert math.isclose(loss.temperature().item(), 0.1, rel_tol=1e-6)


def test_normalize_false_uses_raw_dot_products():
    a, b = random_batch()
    unnormalized = F.infonce(a, b, temperature=1.0, normalize=False)
    logits = a @ b.T
    expected = (
        torch.nn.functional.cross_entropy(logits, torch.arange(6))
        + torch.nn.functional.cross_entropy(logits.T, torch.arange(6))
    ) / 2
    torch.testing.assert_close(unnormalized, expected)
    assert not torch.allclose(unnormalized, F.infonce(a, b, temperature=1.0))


def test_anneal_beta_follows_the_thesis_schedule():
    values = [anneal_beta(1.0, epoch, epochs=100, changes=4) for epoch in range(100)]
    assert values[0] == values[24] == 1.0
    assert values[25] == values[49] == 0.75
    assert values[50] == 0.5 and values[75] == values[99] == 0.25
    with pytest.raises(ValueError, match="epoch must be in"):
        anneal_beta(1.0, 100, epochs=100, changes=4)


def test_warmup_q_is_linear_then_held():
    assert warmup_q(0, 100) == pytest.approx(0.01)
    assert warmup_q(50, 100) == pytest.approx(0.205)
    assert warmup_q(100, 100) == warmup_q(500, 100) == pytest.approx(0.4)
    with pytest.raises(ValueError, match="total_steps"):
        warmup_q(0, 0)


def test_hcl_anneals_beta_as_its_epochs_pass():
    loss = objectives.build("hcl", beta=1.0, beta_changes=4, epochs=100)
    assert loss.beta == 1.0
    loss.set_epoch(30.5)
    assert loss.beta == anneal_beta(1.0, 30, epochs=100, changes=4) == 0.75
    loss.set_epoch(180.0)  # past the planned epochs: the last step holds
    assert loss.beta == 0.25
    assert objectives.build("hcl", beta=0.5).beta == 0.5  # no annealing without beta_changes
    with pytest.raises(ValueError, match="beta_changes needs epochs"):
        objectives.build("hcl", beta_changes=4)


def test_rince_warms_q_up_as_its_epochs_pass():
    loss = objectives.build("rince", q=0.4, q_warmup_epochs=10, q_start=0.01)
    loss.set_epoch(0.0)
    assert loss.q == pytest.approx(0.01)
    loss.set_epoch(5.0)
    assert loss.q == pytest.approx(warmup_q(5, 10, 0.01, 0.4))
    loss.set_epoch(12.0)
    assert loss.q == pytest.approx(0.4)
    a, b = random_batch(dtype=torch.float32)
    torch.testing.assert_close(loss(a, b), F.rince(a, b, q=0.4))


def test_the_schedules_are_reached_from_the_configuration():
    from uncurated.train.builders import build_objective
    from uncurated.train.config import load_config

    config = load_config(["objective=hcl", "objective.beta_changes=4", "objective.epochs=8"])
    loss = build_objective(config, train_set=None)
    loss.set_epoch(2.0)
    assert loss.beta == anneal_beta(1.0, 2, epochs=8, changes=4)


@pytest.mark.parametrize("name", sorted(objectives.OBJECTIVES))
def test_every_objective_has_a_tensor_temperature_and_takes_index(name):
    spec = {spec.name: spec for spec in objectives.available()}[name]
    loss = objectives.build(name, **({"num_samples": 6} if spec.stateful else {}))
    assert isinstance(loss, objectives.Objective)
    assert float(loss.temperature().detach()) == pytest.approx(spec.defaults["temperature"], rel=1e-6)
    loss.set_epoch(0.0)
    loss.begin_step()
    a, b = random_batch(dtype=torch.float32)
    assert torch.isfinite(loss(a, b, index=torch.arange(6)))


def test_a_global_objective_saved_before_its_temperature_was_a_module_still_loads():
    saved = objectives.build("nuclr", num_samples=6).state_dict()
    del saved["temperature.log_inverse"]
    loss = objectives.build("nuclr", num_samples=6, temperature=0.2)
    loss.load_state_dict(saved)
    assert float(loss.temperature()) == pytest.approx(0.2)
    with pytest.raises(RuntimeError, match="log_inverse"):
        objectives.build("infonce", learnable=True).load_state_dict({})
