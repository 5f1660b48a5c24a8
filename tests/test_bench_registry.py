"""The claims registry: what a declaration must state, the arms it fixes before any run, the seeds it declares and
the presets that must give them; the claims preset's regime."""

from __future__ import annotations

import dataclasses
import math

import pytest

from uncurated.bench import PRESETS, plan_runs, run_bench
from uncurated.bench.manipulation import state_updates
from uncurated.bench.presets import IMAGE_TEXT_OBJECTIVES, TWO_VIEW_OBJECTIVES, seed_shortfalls
from uncurated.bench.registry import (
    CLAIM_ARMS,
    REGISTRY,
    STATE_UPDATES_MINIMUM,
    ClaimSpec,
    load_registry,
)
from uncurated.train.config import ConfigError

_DECLARED = next(spec for spec in REGISTRY if spec.key == "nuclr-over-sogclr")


@pytest.mark.parametrize(
    ("change", "named"),
    [
        ({"sesoi": None}, "sesoi"),
        ({"sesoi": 0.0}, "sesoi"),
        ({"sesoi": -0.01}, "sesoi"),
        ({"paper_effect": None}, "paper_effect"),
        ({"paper_effect": math.nan}, "paper_effect"),
        ({"departures": ()}, "departures"),
        ({"departures": (" ",)}, "departures"),
        ({"seeds": 2}, "seeds"),
        ({"second": None}, "second"),
        ({"kind": "best_of"}, "kind"),
    ],
)
def test_a_declaration_without_what_a_verdict_needs_is_refused(change, named):
    with pytest.raises(ValueError, match=named) as raised:
        dataclasses.replace(_DECLARED, **change)
    assert "nuclr-over-sogclr" in str(raised.value)


def test_an_unknown_paper_and_a_repeated_key_are_refused():
    with pytest.raises(KeyError, match="unknown reference"):
        dataclasses.replace(_DECLARED, reference="nobody2099")
    with pytest.raises(ValueError, match="key repeated: nuclr-over-sogclr"):
        load_registry((_DECLARED, dataclasses.replace(_DECLARED, title="another title")))


def test_every_claim_declares_its_paper_its_sesoi_and_its_departures():
    assert len(REGISTRY) == len({spec.key for spec in REGISTRY}) >= 12
    for spec in REGISTRY:
        assert spec.departures and spec.paper_setup and spec.measure, spec.key
        assert spec.sesoi is not None and spec.paper_effect is not None
        if spec.kind == "difference":  # the smallest effect of interest is at most the paper's
            assert 0 < spec.sesoi <= abs(spec.paper_effect), spec.key
        assert spec.source.startswith(
            ("Chuang 2023", "Wang et al. 2025", "Chen et al. 2024", "Uesaka et al. 2025", "Nozawa & Sato 2021")
        ), spec.source


def test_a_preset_running_other_label_noise_than_the_titles_is_a_stated_departure():
    """The label-noise claims' titles name the thesis's eta 0.8; `claims` runs 1.0, which each says it departs from."""
    label_claims = [spec for spec in REGISTRY if spec.key.startswith("rince-label")]
    assert label_claims and all("eta 0.8" in spec.title for spec in label_claims)
    claims_noise = PRESETS["claims"].two_view_conditions["label_noise"][0]
    assert claims_noise.endswith("eta=1")
    for spec in label_claims:
        assert any("0.8" in departure and "1.0" in departure for departure in spec.departures), spec.key


def test_the_arm_settings_are_fixed_in_the_registry_not_chosen_after_the_fact():
    keys = {key for spec in REGISTRY for _, _, key in spec.arms()}
    # One HCL beta, declared; RINCE's q = 1 (the thesis's headline) and q = 0.5, each its own claim.
    assert {key for key in keys if key.startswith("hcl")} == {"hcl-b1"}
    assert ("objective.beta=1.0") in TWO_VIEW_OBJECTIVES["hcl-b1"][1]
    assert {key for key in keys if key.startswith("rince")} == {"rince-q1", "rince-q0.5"}
    rince = {spec.key: spec for spec in REGISTRY if spec.key.startswith("rince")}
    assert set(rince) == {"rince-label-q1", "rince-label-q0.5", "rince-aug-q1", "rince-aug-q0.5"}
    assert rince["rince-label-q1"].paper_effect == pytest.approx(0.049)  # (93.4 - 87.1) - (93.0 - 91.6), Table A.1
    assert rince["rince-aug-q0.5"].paper_effect == pytest.approx(0.008)  # (91.1 - 87.3) - (91.8 - 88.8), Table A.2
    assert CLAIM_ARMS == frozenset(arm for spec in REGISTRY for arm in spec.arms())
    assert all(key in TWO_VIEW_OBJECTIVES or key in IMAGE_TEXT_OBJECTIVES for _, _, key in CLAIM_ARMS)


def test_a_preset_short_of_a_claims_seeds_says_so_and_the_claims_preset_has_none():
    quick = seed_shortfalls(PRESETS["quick"])
    assert any("'NUCLR beats SogCLR' declares 5 seeds, its arms run on 3" in line for line in quick), quick
    assert not any("DCL" in line for line in quick)  # quick does not run the two-view claims: not short, absent
    assert seed_shortfalls(PRESETS["claims"]) == []
    for spec in plan_runs(PRESETS["claims"]):
        arm = (spec.suite, spec.arm.role, spec.arm.objective_key)
        if arm in CLAIM_ARMS and spec.suite == "image_text":
            assert spec.seed in range(5)


def test_the_claims_preset_refuses_to_start_short_of_seeds(tmp_path):
    def no_training(config):
        raise AssertionError("trained before checking the seeds")

    short = dataclasses.replace(PRESETS["claims"], seeds=(0, 1, 2))
    with pytest.raises(ConfigError, match="declares 5 seeds, its arms run on 3"):
        run_bench(short, tmp_path / "bench", device="cpu", train_fn=no_training, stream=(tmp_path / "log").open("w"))
    assert not (tmp_path / "bench").exists()
    # The quick preset only says so, before its first run.
    log = tmp_path / "quick.log"
    with log.open("w") as stream:
        run_bench(
            PRESETS["quick"],
            tmp_path / "q",
            device="cpu",
            report_only=True,
            stream=stream,
            data_dir=tmp_path / "missing",
        )
    assert "declares 5 seeds, its arms run on 3" in log.read_text().splitlines()[0]


def test_the_claims_preset_updates_each_samples_u_and_zeta_ten_times(tmp_path):
    from uncurated.bench.runner import run_config

    preset = PRESETS["claims"]
    for spec in plan_runs(preset, ("image_text",)):
        config = run_config(spec, tmp_path, None, "cpu")
        assert config.objective_params["temperature"] == 0.07
        assert config.objective_params.get("learnable", False) is False
        if spec.arm.objective_key not in ("nuclr", "sogclr"):
            continue
        steps = config.train_subset // config.batch_size * int(config.epochs)
        report = {"steps": steps, "train_samples": config.train_subset, "config": config.to_dict()}
        assert state_updates(report, "u") >= STATE_UPDATES_MINIMUM
        if spec.arm.objective_key == "nuclr":
            assert config.objective_params["freeze_epochs"] == pytest.approx(config.epochs / 6)
            assert state_updates(report, "zeta") >= STATE_UPDATES_MINIMUM
    quick = next(s for s in plan_runs(PRESETS["quick"]) if s.arm.objective_key == "nuclr")
    config = run_config(quick, tmp_path, None, "cpu")
    report = {"steps": int(24000 / 64 * 1.5), "train_samples": 24000, "config": config.to_dict()}
    assert state_updates(report, "zeta") == pytest.approx(1.0, abs=0.01)  # quick: each zeta updated once


def test_claims_are_declared_in_one_registry_only():
    assert isinstance(REGISTRY[0], ClaimSpec)
    from uncurated.bench import claims

    assert not hasattr(claims, "CLAIM_ARMS")


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_every_arm_of_every_preset_builds_its_objective(tmp_path, name):
    """An override an objective does not take would fail only when its run starts, minutes into a bench."""
    from uncurated.bench.runner import run_config
    from uncurated.train.builders.objective import build_objective

    built = set()
    for spec in plan_runs(PRESETS[name]):
        if spec.arm.key in built:
            continue
        built.add(spec.arm.key)
        config = run_config(spec, tmp_path, None, "cpu")
        objective = build_objective(config, list(range(100)))  # the size of the per-sample state
        if name == "claims" and spec.suite == "image_text":
            assert float(objective.temperature()) == pytest.approx(0.07), spec.arm.key
