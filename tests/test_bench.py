"""``uncurated bench``: the verdict rule, the claims on synthetic results, and the tiny preset end to end."""

from __future__ import annotations

import json
import math
import re

import pytest
import torch
from fakedata import write_fake_fashion_mnist

from uncurated.bench import PRESETS, evaluate_claims, metric, plan_runs, run_bench, write_report
from uncurated.bench.claims import (
    ABSENT,
    HELD,
    INCONCLUSIVE,
    NO_VERDICT,
    NOT_MEASURED,
    REVERSED,
    Verdict,
    format_difference,
)
from uncurated.bench.gate import TWO_VIEW_MARGIN, ZERO_SHOT_FLOOR, learning_gates
from uncurated.bench.presets import IMAGE_TEXT_OBJECTIVES, TWO_VIEW_OBJECTIVES
from uncurated.bench.registry import CLAIM_ARMS, REGISTRY

# The table's cells ---------------------------------------------------------------------------------------------


def test_one_seed_is_labelled_no_verdict_with_its_count():
    result = evaluate_claims(lambda suite, role, key: {}, {0: {"rows": _BOUND_ROWS}})[-1]
    assert result.verdict.label == "no verdict (n = 1)" and result.verdict.mean == pytest.approx(
        8 - math.log10(3.5 / 3)
    )
    assert format_difference(result) == (f"{result.verdict.mean:+.2f} dec", "— (n = 1)", "—")


def test_the_cells_show_the_interval_and_the_mde_in_points():
    spec = next(spec for spec in REGISTRY if spec.key == "dcl-small-batch")
    from uncurated.bench.claims import ClaimResult

    verdict = Verdict(0.01, 0.002, 3, HELD, low=0.005, high=0.015, mde=0.0066)
    assert format_difference(ClaimResult(spec, [], verdict)) == ("+1.00 pts", "[+0.50, +1.50] (n = 3)", "0.66 pts")


def test_metric_reads_the_old_and_the_new_evaluation_layouts():
    old = {
        "evaluation": {
            "linear_probe": {"accuracy": 0.8},
            "zero_shot_accuracy": 0.5,
            "retrieval": {"image_to_text_r1": 0.1},
        }
    }
    new = {"evaluation": {"zero_shot": {"top1": 0.6, "top5": 0.9}, "knn": {"accuracy": 0.7}}}
    assert metric(old, "zero_shot.top1") == 0.5 and metric(new, "zero_shot.top1") == 0.6
    assert metric(old, "linear_probe.accuracy") == 0.8 and metric(new, "knn.accuracy") == 0.7
    assert metric(old, "retrieval.image_to_text_r1") == 0.1
    assert metric(old, "knn.accuracy") is None and metric(None, "knn.accuracy") is None


# The claims on synthetic results ------------------------------------------------------------------------------


def _synthetic_lookup(values: dict[tuple[str, str, str], list[float]]):
    """``lookup`` over fake reports: (suite, role, objective) -> one accuracy per seed."""

    def lookup(suite, role, key):
        accuracies = values.get((suite, role, key), [])
        field = "linear_probe" if suite == "two_view" else "zero_shot"
        name = "accuracy" if suite == "two_view" else "top1"
        return {seed: {"evaluation": {field: {name: value}}} for seed, value in enumerate(accuracies)}

    return lookup


_BOUND_ROWS = [
    {"negatives": 4, "upper_curl": math.inf, "upper": math.inf},  # K + 1 < classes: skipped
    {"negatives": 16, "upper_curl": 10.0, "upper": 3.0},
    {"negatives": 256, "upper_curl": 1e9, "upper": 3.5},
]


def test_claims_on_synthetic_results_give_each_verdict():
    values = {
        ("two_view", "small", "dcl"): [0.80, 0.81, 0.82],
        ("two_view", "small", "infonce"): [0.75, 0.76, 0.77],  # DCL +5 points every seed: held
        ("two_view", "small", "hcl-b1"): [0.70, 0.71, 0.72],  # HCL worse every seed: reversed
        ("two_view", "label", "infonce"): [0.80, 0.80, 0.80],
        ("two_view", "label_noise", "infonce"): [0.60, 0.61, 0.59],  # the noise costs InfoNCE 20 points
        ("two_view", "label", "rince-q0.5"): [0.80, 0.80, 0.80],  # and both start from the same place
        ("two_view", "label_noise", "rince-q0.5"): [0.70, 0.70, 0.71],  # RINCE drops 10 points less: held
        ("image_text", "noisy", "nuclr"): [0.50, 0.40, 0.60],
        ("image_text", "noisy", "sogclr"): [0.45, 0.50, 0.52],  # runs with no state to read: not checked
        ("image_text", "noisy", "clip"): [0.50, 0.50, 0.50],
        ("image_text", "clean", "clip"): [0.55, 0.55, 0.56],  # the noise costs CLIP 5 points
        ("image_text", "noisy", "wpse"): [0.45, 0.55, 0.51],  # noisy: inconclusive
        ("image_text", "noisy", "clip-reg"): [0.5000, 0.5005, 0.4998],  # within +-1.03 points of CLIP: absent
        ("image_text", "noisy", "reg-only"): [0.100, 0.101, 0.099],  # at chance: collapsed, held
    }
    claims = {
        claim.claim: claim
        for claim in evaluate_claims(_synthetic_lookup(values), {s: {"rows": _BOUND_ROWS} for s in range(3)})
    }
    assert claims["DCL beats InfoNCE at small batch"].verdict.verdict == HELD
    assert claims["DCL beats InfoNCE at small batch"].verdict.mean == pytest.approx(0.05)
    assert claims["HCL (beta=1) beats DCL at small batch"].verdict.verdict == REVERSED
    label_noise = "RINCE (q=0.5) degrades less than InfoNCE under label noise eta 0.8, label-defined positives"
    assert claims[label_noise].verdict.verdict == HELD
    assert claims[label_noise].verdict.mean == pytest.approx(0.10, abs=0.01)
    assert claims["RINCE (q=1) degrades less than InfoNCE under augmentation noise eta 0.4"].verdict.verdict == (
        NOT_MEASURED
    )
    assert claims["NUCLR beats SogCLR"].verdict.label == "no verdict: manipulation not checked"
    assert claims["WPSE beats CLIP"].verdict.verdict == INCONCLUSIVE
    assert claims["the positive-pair regularizer improves zero-shot"].verdict.verdict == ABSENT
    assert claims["the regularizer alone collapses to chance"].verdict.verdict == HELD
    bound = claims["the existing bound explodes with K and the proposed one does not"]
    assert bound.verdict.verdict == HELD
    assert bound.verdict.mean == pytest.approx(8 - math.log10(3.5 / 3.0))
    assert bound.verdict.fraction == pytest.approx(bound.verdict.mean / 13.8)


def test_the_regularizer_alone_well_above_chance_is_reversed_not_held():
    values = {("image_text", "noisy", "reg-only"): [0.55, 0.54, 0.56], ("image_text", "noisy", "clip"): [0.8] * 3}
    claims = {claim.claim: claim for claim in evaluate_claims(_synthetic_lookup(values), {})}
    # 45 points above chance: not a collapse, whatever CLIP scores.
    assert claims["the regularizer alone collapses to chance"].verdict.verdict == REVERSED


def test_the_regularizer_alone_just_under_chance_plus_sesoi_is_inconclusive():
    from scipy.stats import ttest_1samp

    accuracies = [0.117, 0.119, 0.121]  # 1.9 points above chance, the SESOI 2: neither collapsed nor clearly not
    values = {("image_text", "noisy", "reg-only"): accuracies}
    (row,) = [c for c in evaluate_claims(_synthetic_lookup(values), {}) if c.spec.key == "regularizer-alone-collapses"]
    assert row.verdict.verdict == INCONCLUSIVE
    above_chance = [accuracy - 0.1 for accuracy in accuracies]
    # The one test in the report: its p is scipy's one-sided test of "more than the SESOI above chance".
    expected = ttest_1samp(above_chance, 0.02, alternative="greater").pvalue
    assert row.verdict.p_difference == pytest.approx(expected, rel=1e-9)


def test_bound_claim_is_reversed_when_the_proposed_bound_grows_faster():
    rows = [{"negatives": 16, "upper_curl": 10.0, "upper": 1.0}, {"negatives": 64, "upper_curl": 20.0, "upper": 1e4}]
    lookup = _synthetic_lookup({})
    assert evaluate_claims(lookup, {seed: {"rows": rows} for seed in range(3)})[-1].verdict.verdict == REVERSED
    assert evaluate_claims(lookup, {0: {"rows": rows}})[-1].verdict.label == "no verdict (n = 1)"
    assert evaluate_claims(lookup, {})[-1].verdict.verdict == NOT_MEASURED


def _gate_lookup(two_view: tuple[float, float, float], image_text: tuple[float, float, float]):
    """The default runs only: two-view (probe, pixels, untrained), image-text (zero-shot, probe, untrained)."""
    probe, pixels, untrained = two_view
    zero_shot, text_probe, text_untrained = image_text
    reports = {
        ("two_view", "large", "infonce"): {
            "linear_probe": {"accuracy": probe, "raw_pixels_accuracy": pixels, "untrained_accuracy": untrained}
        },
        ("image_text", "clean", "clip"): {
            "zero_shot": {"top1": zero_shot},
            "linear_probe": {"accuracy": text_probe, "raw_pixels_accuracy": 0.8, "untrained_accuracy": text_untrained},
        },
    }
    return lambda suite, role, key: (
        {0: {"evaluation": reports[(suite, role, key)]}} if (suite, role, key) in reports else {}
    )


def test_learning_gate_passes_only_runs_that_beat_their_baselines():
    margin = TWO_VIEW_MARGIN
    gates = learning_gates(_gate_lookup((0.85, 0.85 - margin, 0.82), (ZERO_SHOT_FLOOR, 0.86, 0.86)))
    assert gates["two_view"].passed and gates["image_text"].passed
    failing = learning_gates(_gate_lookup((0.85, 0.84, 0.80), (ZERO_SHOT_FLOOR - 0.001, 0.90, 0.80)))
    assert failing["two_view"].passed is False and "NOT passed" in failing["two_view"].explanation
    assert failing["image_text"].passed is False
    assert learning_gates(_gate_lookup((0.80, 0.70, 0.79), (0.9, 0.85, 0.86)))["two_view"].passed is False
    assert learning_gates(_gate_lookup((0.85, 0.70, 0.70), (0.9, 0.85, 0.86)))["image_text"].passed is False
    assert learning_gates(lambda suite, role, key: {})["two_view"].passed is None


def test_the_two_view_gate_gives_the_per_seed_margins_and_their_interval():
    # Seeds 0-2: probe, pixels, untrained; the better baseline changes between seeds.
    rows = {0: (0.42, 0.28, 0.35), 1: (0.40, 0.33, 0.30), 2: (0.41, 0.30, 0.34)}
    keys = ("accuracy", "raw_pixels_accuracy", "untrained_accuracy")
    reports = {seed: {"evaluation": {"linear_probe": dict(zip(keys, r, strict=True))}} for seed, r in rows.items()}
    gate = learning_gates(lambda suite, role, key: reports if (role, key) == ("large", "infonce") else {})["two_view"]
    assert gate.passed
    # Margins +7, +7, +7: the interval is the point; per seed against the better baseline, not the means'.
    assert "per seed +7.00, +7.00, +7.00" in gate.explanation
    assert "[+7.00, +7.00]" in gate.explanation
    one = learning_gates(lambda suite, role, key: {0: reports[0]} if key == "infonce" else {})["two_view"]
    assert "interval" not in one.explanation


def test_learning_gate_withholds_the_verdicts_of_a_suite_that_did_not_learn():
    values = {("two_view", "small", "dcl"): [0.80, 0.81, 0.82], ("two_view", "small", "infonce"): [0.75, 0.76, 0.77]}
    lookup = _synthetic_lookup(values)
    dcl_claim = "DCL beats InfoNCE at small batch"
    passed = learning_gates(_gate_lookup((0.9, 0.8, 0.8), (0.9, 0.9, 0.8)))
    failed = learning_gates(_gate_lookup((0.8, 0.8, 0.8), (0.9, 0.9, 0.8)))
    claims = {claim.claim: claim for claim in evaluate_claims(lookup, {}, passed)}
    assert claims[dcl_claim].verdict.verdict == HELD
    claims = {claim.claim: claim for claim in evaluate_claims(lookup, {}, failed)}
    assert claims[dcl_claim].verdict.label == "no verdict (its suite did not learn)"
    assert claims[dcl_claim].verdict.mean == pytest.approx(0.05)  # the difference is still shown
    assert claims["NUCLR beats SogCLR"].verdict.verdict == NOT_MEASURED


def test_every_preset_plans_the_gates_and_the_image_text_claims_and_tiny_and_full_every_claim():
    gates = {("two_view", "large", "infonce"), ("image_text", "clean", "clip")}
    image_text_claims = {arm for arm in CLAIM_ARMS if arm[0] == "image_text"}
    for preset in PRESETS.values():
        runs = plan_runs(preset)
        planned = {(run.suite, run.arm.role, run.arm.objective_key) for run in runs}
        assert gates | image_text_claims <= planned, preset.name
        assert len({run.name for run in runs}) == len(runs)
        assert set(TWO_VIEW_OBJECTIVES) >= {
            key for key in {run.arm.objective_key for run in runs} if key not in IMAGE_TEXT_OBJECTIVES
        }
    for name in ("tiny", "full"):
        runs = plan_runs(PRESETS[name])
        assert set(CLAIM_ARMS) <= {(run.suite, run.arm.role, run.arm.objective_key) for run in runs}, name
        objectives = {run.arm.objective_key for run in runs}
        assert set(IMAGE_TEXT_OBJECTIVES) <= objectives
        assert {"infonce", "dcl", "hcl-b0.5", "hcl-b1", "rince-q0.5", "oracle"} <= objectives
    assert len(PRESETS["full"].seeds) >= 3 and len(PRESETS["quick"].seeds) >= 3


def test_seeds_are_spent_on_the_arms_the_verdicts_read():
    preset = PRESETS["quick"]
    seeds = {}
    for run in plan_runs(preset):
        seeds.setdefault((run.suite, run.arm.role, run.arm.objective_key), []).append(run.seed)
    for (suite, role, key), used in seeds.items():
        read = (suite, role, key) in CLAIM_ARMS or (role, key) == ("clean", "clip")
        if suite == "image_text" and read:
            assert used == list(preset.seeds), (suite, role, key)
        else:
            assert len(used) == 1, (suite, role, key)


def test_the_two_view_preset_runs_every_two_view_claim_on_three_seeds_in_clutter(tmp_path):
    from uncurated.bench.runner import run_config

    preset = PRESETS["two-view"]
    assert preset.suites == ("two_view",)
    runs = plan_runs(preset, preset.suites)
    seeds = {}
    for run in runs:
        seeds.setdefault((run.suite, run.arm.role, run.arm.objective_key), []).append(run.seed)
    claim_arms = {arm for arm in CLAIM_ARMS if arm[0] == "two_view"}
    assert claim_arms <= set(seeds)
    assert all(seeds[arm] == [0, 1, 2] for arm in claim_arms), seeds
    assert seeds[("two_view", "large", "oracle")] == [0]  # the table's row, read by no claim
    assert set(seeds) == claim_arms | {("two_view", "large", "oracle")}
    # Same encoder, budget and evaluation for every arm: the suite's base, then the condition and the objective.
    assert all(run.arm.overrides[: len(preset.two_view_base)] == preset.two_view_base for run in runs)
    configs = [run_config(run, tmp_path / "runs", tmp_path / "data", "cpu") for run in runs]
    assert {config.dataset for config in configs} == {"fashion-clutter"}
    assert {(config.train_subset, config.epochs, config.probe_train_size) for config in configs} == {(6000, 2.0, 2000)}
    assert {config.batch_size for config in configs} == {64, 256}
    # The bench's stratified test split reaches the clutter runs (rendered from it).
    assert {config.data_dir for config in configs} == {str(tmp_path / "data")}
    assert "CIFAR-10" in preset.description


def test_only_the_default_runs_measure_the_baselines(tmp_path):
    from uncurated.bench.runner import run_config

    for spec in plan_runs(PRESETS["tiny"]):
        default = (spec.arm.role, spec.arm.objective_key) in (("large", "infonce"), ("clean", "clip"))
        assert run_config(spec, tmp_path, None, "cpu").probe_baselines == default, spec.name


# The tiny preset end to end -----------------------------------------------------------------------------------


def test_tiny_bench_runs_every_suite_writes_the_report_and_resumes_without_training(
    tmp_path, fast_probe, one_thread, capfd
):
    data = tmp_path / "fashion"
    write_fake_fashion_mnist(data, sizes={"train": 1000, "test": 100})
    out = tmp_path / "bench"
    progress = tmp_path / "progress.txt"
    with progress.open("w") as stream:
        results = run_bench(PRESETS["tiny"], out, data_dir=data, device="cpu", stream=stream)
    summary = write_report(results)
    # Written to a log (not a terminal), the bench and everything it runs print plain, short lines: no bar frames.
    printed = capfd.readouterr()
    log = printed.out + printed.err + progress.read_text()
    assert "\r" not in log and max(map(len, log.splitlines())) <= 300, max(log.splitlines(), key=len)
    lines = progress.read_text()
    assert "two-view" in lines and "image-text" in lines and "theory" in lines and "ETA" in lines

    assert len(results.runs) == len(plan_runs(PRESETS["tiny"])) and all(run.trained_now for run in results.runs)
    markdown = (out / "report.md").read_text()
    for section in (
        "## Claims",
        "## Two-view pretraining",
        "## Image-text pretraining",
        "## Theory",
        "## Configuration and versions",
        "torch",
        "python",
    ):
        assert section in markdown
    claims = summary["claims"]
    assert len(claims) == len(REGISTRY)
    # One seed and encoders that have not learned: every claim is measured, none gets a verdict.
    assert all(claim["verdict"]["verdict"] == NO_VERDICT and claim["verdict"]["count"] == 1 for claim in claims), [
        (claim["claim"], claim["verdict"]) for claim in claims
    ]
    assert "no verdict (n = 1)" in markdown and "95% interval" in markdown
    # Each verdict names the data it came from; the two-view ones say they are not the thesis's.
    assert summary["settings"]["two_view"].startswith("scikit-learn's digits: 256 training images, 1 epoch at")
    assert "The two-view verdicts (Chuang 2023) come from scikit-learn's digits" in markdown
    assert "not the thesis's data, CIFAR-10" in markdown and "| measured on |" in markdown
    assert (
        "| scikit-learn's digits: 256 training images, 1 epoch at batch 16 or 64; not the thesis's CIFAR-10; seeds 0 |"
        in markdown
    )
    for claim in claims:
        assert claim["claim"] in markdown
    for figure in ("two_view.png", "image_text.png", "nuclr_popularity.png", "claims.png"):
        assert (out / "figures" / figure).read_bytes()[:4] == b"\x89PNG"
    for toy in ("nuclr", "wpse", "bound"):
        assert results.theory[toy]["status"] == "ok", results.theory[toy]
    page = (out / "report.html").read_text()
    assert page.count("data:image/png;base64,") >= 5 and "<table>" in page

    saved = json.loads((out / "bench.json").read_text())
    numbers = _numbers(saved)
    assert numbers and all(math.isfinite(number) for number in numbers)
    assert all("nan" not in cell.lower() for cell in re.findall(r"\| ([^|]*)", markdown))
    two_view = saved["suites"]["two_view"]["arms"]
    assert two_view["tv-large-dcl"]["dcl_clamped"] is not None
    assert 0.0 <= two_view["tv-large-dcl"]["dcl_clamped"]["mean"] <= 1.0

    # A second invocation trains nothing: every run is read back, the theory comes from its files.
    def no_training(config):
        raise AssertionError(f"trained {config.name} again")

    again = run_bench(
        PRESETS["tiny"], out, data_dir=data, device="cpu", stream=progress.open("w"), train_fn=no_training
    )
    assert not any(run.trained_now for run in again.runs)
    assert [run.report for run in again.runs] == [run.report for run in results.runs]
    assert write_report(again)["claims"] == json.loads(json.dumps(summary["claims"]))


def _numbers(value) -> list[float]:
    if isinstance(value, dict):
        return [n for item in value.values() for n in _numbers(item)]
    if isinstance(value, list):
        return [n for item in value for n in _numbers(item)]
    if isinstance(value, float):
        return [value]
    return []


def test_a_run_killed_mid_way_is_resumed_from_its_checkpoint(tmp_path, fast_probe):
    from uncurated.bench.runner import execute_run
    from uncurated.train import train

    spec = next(run for run in plan_runs(PRESETS["tiny"]) if run.name == "tv-large-infonce-seed0")
    calls = []

    def record(config):
        calls.append(config)
        return train(config)

    first = execute_run(spec, tmp_path, None, "cpu", record)
    assert calls[0].resume and first.trained_now
    (first.folder / "report.json").unlink()  # as if killed after the checkpoint, before the report
    second = execute_run(spec, tmp_path, None, "cpu", record)
    assert second.trained_now and len(calls) == 2
    assert second.report["steps"] == first.report["steps"]
    assert second.wall_seconds >= first.wall_seconds
    assert torch.isfinite(torch.tensor(second.report["evaluation"]["linear_probe"]["accuracy"]))


def test_report_only_trains_nothing_and_reports_every_claim_as_not_measured(tmp_path):
    def no_training(config):
        raise AssertionError("report_only trained a run")

    data = tmp_path / "fashion"
    write_fake_fashion_mnist(data, sizes={"train": 20, "test": 20})
    results = run_bench(
        PRESETS["tiny"],
        tmp_path / "bench",
        data_dir=data,
        device="cpu",
        train_fn=no_training,
        report_only=True,
        stream=(tmp_path / "progress.txt").open("w"),
    )
    assert results.runs == [] and all(part["status"] == "not run yet" for part in results.theory.values())
    summary = write_report(results)
    assert {claim["verdict"]["verdict"] for claim in summary["claims"]} == {NOT_MEASURED}
    assert "## Claims" in (tmp_path / "bench" / "report.md").read_text()


# The GPU preset -----------------------------------------------------------------------------------------------


def test_the_gpu_preset_runs_every_two_view_claim_on_three_seeds_by_default(tmp_path):
    from uncurated.bench.runner import run_config

    preset = PRESETS["gpu"]
    assert preset.suites == ("two_view",)
    runs = plan_runs(preset, preset.suites)
    seeds = {}
    for run in runs:
        seeds.setdefault((run.suite, run.arm.role, run.arm.objective_key), []).append(run.seed)
    assert set(seeds) == {arm for arm in CLAIM_ARMS if arm[0] == "two_view"}
    assert all(used == [0, 1, 2] for used in seeds.values())
    config = run_config(runs[0], tmp_path, None, "cuda")
    assert config.data_on_device and config.widths == [64, 128, 256, 512] and config.blocks == [2, 2, 2, 2]
    assert "H100" in preset.estimate and "predicted" in preset.estimate


def test_the_gpu_preset_trains_its_default_arm_at_tiny_size_on_the_cpu(tmp_path, fast_probe, one_thread):
    """The default arm (the learning gate's) end to end with the preset's keys, its stages narrowed and its data
    cut: the data held on the training device, four stages of two blocks, the baselines measured."""
    import dataclasses

    from uncurated.bench.presets import _two_view_conditions
    from uncurated.bench.runner import execute_run, prepare_data

    data = tmp_path / "fashion"
    write_fake_fashion_mnist(data, sizes={"train": 300, "test": 100})
    gpu = PRESETS["gpu"]
    tiny = dataclasses.replace(
        gpu,
        test_size=60,
        two_view_base=gpu.two_view_base
        + ("widths=[4, 4, 8, 8]", "train_subset=256", "epochs=1", "probe_train_size=100"),
        two_view_conditions=_two_view_conditions(16, 64),
    )
    root, _ = prepare_data(tiny, tmp_path / "data", data)
    spec = next(run for run in plan_runs(tiny, tiny.suites) if run.name == "tv-large-infonce-seed0")
    outcome = execute_run(spec, tmp_path / "runs", root, "cpu", lambda config: _train_checked(config))
    for key in ("accuracy", "raw_pixels_accuracy", "untrained_accuracy"):  # what the learning gate reads
        assert math.isfinite(metric(outcome.report, f"linear_probe.{key}")), key


def _train_checked(config):
    from uncurated.train import train

    assert config.data_on_device and config.blocks == [2, 2, 2, 2] and config.batch_size == 64
    return train(config)


def test_the_popularity_correlation_is_spearmans():
    import random

    from scipy.stats import spearmanr

    from uncurated.bench.manipulation import spearman as _spearman

    generator = random.Random(0)
    x = [generator.random() for _ in range(30)]
    y = [value + generator.gauss(0, 0.3) for value in x]
    assert _spearman(x, y) == pytest.approx(spearmanr(x, y).statistic, abs=1e-12)
    assert _spearman(x, [-value for value in x]) == pytest.approx(-1.0)
    assert math.isnan(_spearman([1.0], [2.0]))
