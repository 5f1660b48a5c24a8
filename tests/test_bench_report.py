"""The bench report reads like a paper's table: each claim with the paper's effect, ours with its interval, the
fraction, the verdict, the manipulation check's figure and the departures; dot plots on honest axes."""

from __future__ import annotations

import math
import types

import numpy
import pytest
import torch

from uncurated.bench import PRESETS, plan_runs, write_report
from uncurated.bench.claims import evaluate_claims
from uncurated.bench.dotplot import arms_figure, claims_figure
from uncurated.bench.registry import REGISTRY
from uncurated.bench.runner import BenchResults, RunOutcome
from uncurated.evaluate.suite import effective_rank

# Accuracies per (suite, role, objective key), one per seed: the label-noise condition costs InfoNCE nothing.
_VALUES = {
    ("two_view", "large", "infonce"): [0.42, 0.41, 0.43],
    ("two_view", "small", "infonce"): [0.48, 0.49, 0.48],
    ("two_view", "small", "dcl"): [0.48, 0.49, 0.485],
    ("two_view", "label", "infonce"): [0.40, 0.41, 0.40],
    ("two_view", "label_noise", "infonce"): [0.40, 0.41, 0.40],
    ("two_view", "label", "rince-q0.5"): [0.40, 0.40, 0.41],
    ("two_view", "label_noise", "rince-q0.5"): [0.39, 0.40, 0.40],
}


def _results(tmp_path) -> BenchResults:
    preset = PRESETS["two-view"]
    runs = []
    for spec in plan_runs(preset, preset.suites):
        values = _VALUES.get((spec.suite, spec.arm.role, spec.arm.objective_key))
        if not values or spec.seed >= len(values):
            continue
        probe = {"accuracy": values[spec.seed]}
        if (spec.arm.role, spec.arm.objective_key) == ("large", "infonce"):  # the learning gate's baselines
            probe.update(raw_pixels_accuracy=0.28, untrained_accuracy=0.34)
        folder = tmp_path / "runs" / spec.name
        folder.mkdir(parents=True)
        report = {"run": str(folder), "steps": 46, "config": {"dataset": "fashion-clutter"}}
        runs.append(RunOutcome(spec, {**report, "evaluation": {"linear_probe": probe}}, 50.0, True, folder))
    return BenchResults(preset, tmp_path, ("two_view",), runs, started="2026-11-28T08:00:00")


def test_the_claims_table_gives_each_claim_as_a_paper_would(tmp_path):
    summary = write_report(_results(tmp_path))
    markdown = (tmp_path / "report.md").read_text()
    header = next(line for line in markdown.splitlines() if line.startswith("| claim | paper |"))
    for column in (
        "paper's effect",
        "our effect [95% interval] (n)",
        "fraction",
        "SESOI",
        "MDE (80%)",
        "seeds for a verdict",
        "verdict",
        "manipulation check",
        "departures",
    ):
        assert f"| {column} |" in header, column
    dcl = next(line for line in markdown.splitlines() if line.startswith("| DCL beats InfoNCE at small batch |"))
    assert "| Chuang 2023, Fig. 3-3 |" in dcl and "| +4.26 pts (" in dcl and "| ±2.13 pts |" in dcl
    assert "| absent |" in dcl  # +0.17 points, tightly within ±2.13 over 3 seeds
    assert "not the thesis's CIFAR-10, STL-10, CIFAR-100" in dcl  # the departures, in the row
    # The planted null: label noise that costs InfoNCE nothing gives no verdict, with the figure that says why.
    rince = next(
        line
        for line in markdown.splitlines()
        if line.startswith("| RINCE (q=0.5) degrades less than InfoNCE under label noise")
    )
    assert "| no verdict: manipulation failed |" in rince
    assert "the noise costs infonce +0.00 points (label -> label_noise, 3 seeds; minimum +1.45 points)" in rince
    row = next(claim for claim in summary["claims"] if claim["key"] == "dcl-small-batch")
    assert row["paper_effect"] == pytest.approx(0.0426) and row["verdict"]["label"] == "absent"
    assert row["verdict"]["fraction"] == pytest.approx(row["verdict"]["mean"] / 0.0426)
    assert (tmp_path / "figures" / "claims.png").read_bytes()[:4] == b"\x89PNG"
    assert "Chen et al. 2024" in markdown and "not measured" in markdown  # the image-text claims, not run


def test_the_claims_plot_marks_the_papers_effect_and_the_sesoi_band(tmp_path):
    claims = evaluate_claims(_results(tmp_path).arm_reports, {})
    figure = claims_figure(claims)
    ax = figure.axes[0]
    measured = [claim for claim in claims if claim.spec.unit == "points" and claim.verdict.count > 0]
    assert len(ax.get_yticks()) == len(measured) >= 2
    diamonds = [line for line in ax.lines if line.get_marker() == "D"]
    assert sorted(line.get_xdata()[0] for line in diamonds) == pytest.approx(
        sorted(100 * claim.spec.paper_effect for claim in measured)
    )
    low, high = ax.get_xlim()
    assert low < 0 < high and high >= 100 * max(claim.spec.paper_effect for claim in measured)


def test_the_claims_plot_keeps_every_label_inside_the_figure():
    """The registry's longest titles wrap: no tick label or axis label runs off the saved figure's edge."""
    longest = max(REGISTRY, key=lambda spec: len(spec.title))
    verdict = types.SimpleNamespace(count=3, low=-0.02, high=0.3, mean=0.1, label="no verdict: manipulation failed")
    claims = [types.SimpleNamespace(spec=spec, verdict=verdict) for spec in (longest, REGISTRY[0])]
    figure = claims_figure(claims)
    figure.canvas.draw()
    renderer = figure.canvas.get_renderer()
    ax = figure.axes[0]
    for text in [ax.xaxis.label, *ax.get_yticklabels()]:
        box = text.get_window_extent(renderer)
        assert 0 <= box.x0 and box.x1 <= figure.bbox.width, text.get_text()


def test_the_arms_plot_is_a_dot_plot_on_the_whole_accuracy_axis():
    figure = arms_figure([("InfoNCE", [0.47, 0.48, 0.49]), ("DCL", [0.475, 0.48])], "linear probe", 0.1, 0.28)
    ax = figure.axes[0]
    assert ax.get_xlim() == (0.0, 100.0)  # not a bar chart whose axis starts at 47%
    assert not ax.patches  # no bars
    dots = [line for line in ax.lines if line.get_marker() == "o"]
    assert [line.get_xdata()[0] for line in dots] == pytest.approx([48.0, 47.75])


def test_the_effective_rank_is_one_for_a_collapse_and_d_for_an_isotropic_set():
    assert effective_rank(torch.ones(50, 8)) == pytest.approx(1.0)
    assert effective_rank(torch.eye(8)) == pytest.approx(8.0)
    generator = torch.Generator().manual_seed(0)
    matrix = torch.randn(40, 6, generator=generator, dtype=torch.float64)
    values = torch.linalg.svdvals(matrix).numpy()
    shares = values / values.sum()
    assert effective_rank(matrix) == pytest.approx(math.exp(-(shares * numpy.log(shares)).sum()))


def test_the_collapse_claim_shows_the_effective_rank_beside_its_verdict():
    def lookup(suite, role, key):
        rank = {"reg-only": 1.3, "clip": 40.2}.get(key)
        accuracy = {"reg-only": 0.101, "clip": 0.80}.get(key)
        if rank is None or role != "noisy":
            return {}
        evaluation = {"zero_shot": {"top1": accuracy}, "embeddings": {"image_effective_rank": rank}}
        return {seed: {"evaluation": evaluation} for seed in range(3)}

    (row,) = [claim for claim in evaluate_claims(lookup, {}) if claim.spec.key == "regularizer-alone-collapses"]
    (check,) = row.checks
    assert check.figure == "reg-only's image embeddings have effective rank 1.3 (clip's 40.2; 1 is a collapse)"
    assert row.verdict.verdict == "held" and check.passed is None
    assert REGISTRY  # the registry the table is read from
