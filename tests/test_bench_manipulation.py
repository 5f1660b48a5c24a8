"""Manipulation checks: planting a null (no noise in a noise condition, NUCLR's zeta frozen for the whole run, arms
that start apart) turns the claim's row into "no verdict: manipulation failed" with the figure that says why; the
checks read what real runs log."""

from __future__ import annotations

import json
import math

import pytest

from uncurated.bench.claims import HELD, MANIPULATION_FAILED, NO_VERDICT, evaluate_claims
from uncurated.bench.manipulation import READING_FILE, state_updates, zeta_reading

LABEL_Q05 = "rince-label-q0.5"


def _reports(values: dict[tuple[str, str], list[float]], metric: str, extra=None):
    """``lookup`` over fake reports; ``extra(role, key, seed)`` adds fields to a report."""
    section, name = metric.split(".")

    def lookup(suite, role, key):
        return {
            seed: {"evaluation": {section: {name: value}}, **(extra(role, key, seed) if extra else {})}
            for seed, value in enumerate(values.get((role, key), []))
        }

    return lookup


def _rows(lookup):
    return {row.spec.key: row for row in evaluate_claims(lookup, {})}


def _label_noise(noisy_infonce: list[float]):
    return {
        ("label", "infonce"): [0.80, 0.81, 0.79],
        ("label_noise", "infonce"): noisy_infonce,
        ("label", "rince-q0.5"): [0.80, 0.80, 0.80],
        ("label_noise", "rince-q0.5"): [0.78, 0.79, 0.78],
    }


def test_a_noise_condition_without_noise_gets_no_verdict():
    noisy = _rows(_reports(_label_noise([0.60, 0.61, 0.59]), "linear_probe.accuracy"))[LABEL_Q05]
    assert noisy.verdict.verdict == HELD
    # The null planted: noise 0, so InfoNCE loses nothing and there is nothing for RINCE to lose less of.
    row = _rows(_reports(_label_noise([0.80, 0.81, 0.79]), "linear_probe.accuracy"))[LABEL_Q05]
    assert row.verdict.verdict == NO_VERDICT and row.verdict.label == f"no verdict: {MANIPULATION_FAILED}"
    (cost,) = [check for check in row.checks if check.kind == "noise_cost"]
    assert cost.passed is False and cost.value == pytest.approx(0.0)
    assert "the noise costs infonce +0.00 points" in cost.figure and "minimum +1.45 points" in cost.figure
    assert row.verdict.mean == pytest.approx(-0.0167, abs=1e-3)  # the difference is still shown


def test_arms_that_start_apart_on_clean_data_get_no_verdict_on_their_drops():
    values = _label_noise([0.60, 0.61, 0.59])
    values[("label", "rince-q0.5")] = [0.75, 0.75, 0.75]  # 5 points below InfoNCE before any noise
    values[("label_noise", "rince-q0.5")] = [0.73, 0.74, 0.73]
    row = _rows(_reports(values, "linear_probe.accuracy"))[LABEL_Q05]
    assert row.verdict.label == f"no verdict: {MANIPULATION_FAILED}"
    (agreement,) = [check for check in row.checks if check.kind == "clean_agreement"]
    assert agreement.passed is False and agreement.value == pytest.approx(0.05)


def _image_text(tmp_path, spread: float, learn_zeta: bool, steps: int):
    """NUCLR, SogCLR and CLIP runs on noisy and clean captions whose NUCLR has ``spread`` logits of zeta."""
    values = {
        ("noisy", "nuclr"): [0.81, 0.82, 0.815],
        ("noisy", "sogclr"): [0.78, 0.785, 0.78],
        ("noisy", "clip"): [0.78, 0.78, 0.785],
        ("clean", "clip"): [0.83, 0.835, 0.83],
    }

    def extra(role, key, seed):
        folder = tmp_path / f"{role}-{key}-{seed}"
        folder.mkdir(parents=True, exist_ok=True)
        if key == "nuclr":
            (folder / READING_FILE).write_text(json.dumps({"spread_logits": spread, "spearman": 0.5}))
        params = {"learn_zeta": learn_zeta, "freeze_epochs": 2, "epochs": 12} if key == "nuclr" else {}
        config = {"batch_size": 64, "epochs": 12, "objective_params": params}
        return {"run": str(folder), "steps": steps, "train_samples": 5760, "config": config}

    return _rows(_reports(values, "zero_shot.top1", extra))


def test_zeta_frozen_for_the_whole_run_gets_no_verdict(tmp_path):
    engaged = _image_text(tmp_path / "a", spread=1.2, learn_zeta=True, steps=1080)["nuclr-over-sogclr"]
    assert engaged.verdict.verdict == HELD and not [c for c in engaged.checks if c.passed is False]
    # The null planted: zeta never moves, so NUCLR is SogCLR with a constant offset.
    frozen = _image_text(tmp_path / "b", spread=0.0, learn_zeta=False, steps=1080)["nuclr-over-sogclr"]
    assert frozen.verdict.label == f"no verdict: {MANIPULATION_FAILED}"
    figures = {check.kind: check for check in frozen.checks if check.passed is False}
    assert set(figures) == {"zeta_spread", "state_updates"}
    assert "zeta spread 0.000 logits" in figures["zeta_spread"].figure
    assert "nuclr's zeta updated 0.0 times per sample (minimum 10)" in figures["state_updates"].figure


def test_too_few_updates_of_u_get_no_verdict(tmp_path):
    row = _image_text(tmp_path, spread=1.2, learn_zeta=True, steps=135)["nuclr-over-sogclr"]  # 1.5 epochs
    assert row.verdict.label == f"no verdict: {MANIPULATION_FAILED}"
    failed = [check.figure for check in row.checks if check.passed is False]
    assert "sogclr's u updated 1.5 times per sample (minimum 10)" in failed


def test_the_updates_are_counted_from_the_runs_steps_batch_and_samples():
    config = {"batch_size": 64, "epochs": 3, "objective_params": {"freeze_epochs": 1, "epochs": 3}}
    report = {"steps": 300, "train_samples": 6400, "config": config}
    assert state_updates(report, "u") == pytest.approx(3.0)
    assert state_updates(report, "zeta") == pytest.approx(2.0)
    assert state_updates({**report, "config": {**config, "objective_params": {"learn_zeta": False}}}, "zeta") == 0.0
    assert state_updates({"config": config}, "u") is None  # no steps: not measured, not a failure


def test_a_run_that_recorded_no_freeze_counts_zeta_after_nuclrs_share_of_its_epochs():
    """Without ``freeze_epochs`` in the run's parameters, zeta's freeze is NUCLR's: ``freeze_fraction`` of the
    epochs (the paper's 5 of 30 unless the run set another)."""
    config = {"batch_size": 64, "epochs": 12, "objective_params": {}}
    report = {"steps": 1200, "train_samples": 6400, "config": config}  # 12 visits, 1 per epoch
    assert state_updates(report, "zeta") == pytest.approx(10.0)  # frozen for 2 of 12 epochs
    quarter = {**config, "objective_params": {"freeze_fraction": 0.25}}
    assert state_updates({**report, "config": quarter}, "zeta") == pytest.approx(9.0)  # frozen for 3 of 12
    assert state_updates({**report, "config": {**config, "epochs": None}}, "zeta") is None  # length unknown
    unreadable = {**config, "objective_params": {"freeze_fraction": "a sixth"}}
    assert state_updates({**report, "config": unreadable}, "zeta") is None  # no freeze: not measured, not 0
    # NUCLR's schedule over 24 epochs froze zeta for 4 of them, in a run that trained 12.
    longer_schedule = {**config, "objective_params": {"epochs": 24}}
    assert state_updates({**report, "config": longer_schedule}, "zeta") == pytest.approx(8.0)


@pytest.mark.slow  # two tiny image-text runs: 30 s to 100 s on 2 loaded cores
@pytest.mark.parametrize(("learn", "spread_is_zero"), [("false", True), ("true", False)])
def test_the_zeta_reading_comes_from_the_trained_runs_state(tmp_path, fast_probe, one_thread, learn, spread_is_zero):
    """A tiny NUCLR run, its zeta frozen for the whole run or learned from the first step: the reading from its
    checkpoint is exactly zero spread, or not."""
    import dataclasses

    from uncurated.bench import PRESETS, plan_runs
    from uncurated.bench.runner import execute_run
    from uncurated.train import train

    spec = next(run for run in plan_runs(PRESETS["tiny"]) if run.name == "it-noisy-nuclr-seed0")
    arm = dataclasses.replace(
        spec.arm, overrides=spec.arm.overrides + (f"objective.learn_zeta={learn}", "objective.freeze_epochs=0")
    )
    outcome = execute_run(dataclasses.replace(spec, arm=arm), tmp_path, None, "cpu", train)
    reading = zeta_reading(outcome.report)
    assert reading is not None and (reading["spread_logits"] == 0.0) == spread_is_zero
    assert (outcome.folder / READING_FILE).is_file() and zeta_reading(outcome.report) == reading
    assert outcome.report["train_samples"] > 0 and math.isfinite(reading["temperature"])
