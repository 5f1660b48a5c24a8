"""Manipulation checks: whether a claim's mechanism engaged in the runs, read from what the runs logged.

A claim whose mechanism did not act is no evidence for or against its
paper, so it gets *no verdict: manipulation failed* with the figure that
says why. Each check is declared in the claims registry (:mod:`.registry`):

* ``zeta_spread``: NUCLR's learned popularities differ across samples: the
  5th to 95th percentile range of ``zeta_j / t`` (logits), mean over seeds,
  at least the declared minimum; the Spearman correlation of each class's
  mean zeta with its share of the training pairs is shown beside it;
* ``state_updates``: each sample's u (SogCLR, NUCLR) or zeta was updated the
  declared number of times on average: ``steps x batch / samples`` for u,
  times the share of the epochs after zeta's freeze for zeta (0 when zeta is
  not learned), from the run's report;
* ``noise_cost``: the noise costs the reference arm at least the SESOI
  (mean paired drop from the clean to the noisy condition);
* ``clean_agreement``: the arms of a difference of drops agree on clean data
  within the SESOI before their drops are compared;
* ``dcl_clamped``: DCL's clamped-anchor fraction from ``metrics.csv``, shown,
  not checked;
* ``effective_rank``: the image embeddings' effective rank (Roy & Vetterli
  2007; 1 for a collapsed encoder) beside a reference arm's, shown beside the
  "collapses" claim, whose verdict is its accuracy against chance.
"""

from __future__ import annotations

import csv
import json
import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .registry import CheckSpec, ClaimSpec
from .results import paired_differences, per_seed, summarize

#: ``lookup(suite, role, objective_key)`` -> ``{seed: report}`` of that arm (empty when it did not run).
Lookup = Callable[[str, str, str], dict]
#: The checks that show a figure and decide nothing.
FIGURE_ONLY = frozenset({"dcl_clamped", "effective_rank"})
#: The file a run's mechanism reading is kept in, beside its report.
READING_FILE = "mechanism.json"


@dataclass(frozen=True)
class CheckResult:
    """One check's outcome: ``passed`` is ``None`` when it could not be measured or only shows a figure."""

    kind: str
    passed: bool | None
    figure: str
    value: float | None = None
    threshold: float | None = None


def run_checks(spec: ClaimSpec, lookup: Lookup) -> list[CheckResult]:
    """Every declared check of ``spec`` on the runs ``lookup`` finds."""
    return [_CHECKS[check.kind](spec, check, lookup) for check in spec.checks]


def failed(results: list[CheckResult]) -> list[CheckResult]:
    return [result for result in results if result.passed is False]


def unmeasured(results: list[CheckResult]) -> list[CheckResult]:
    """The checks that could not be measured, except those that only show a figure (``dcl_clamped``): a verdict
    needs its mechanism shown to have engaged, not merely not shown to have failed."""
    return [result for result in results if result.passed is None and result.kind not in FIGURE_ONLY]


def _zeta_spread(spec: ClaimSpec, check: CheckSpec, lookup: Lookup) -> CheckResult:
    assert check.arm is not None
    found = [zeta_reading(report) for report in lookup(spec.suite, *check.arm).values()]
    readings = [reading for reading in found if reading is not None]
    threshold = _threshold(spec, check)
    spreads = summarize(reading["spread_logits"] for reading in readings)
    if spreads is None:
        return CheckResult(check.kind, None, "zeta spread not measured (no NUCLR state could be read)", None, threshold)
    correlations = summarize(reading.get("spearman") for reading in readings)
    figure = (
        f"zeta spread {spreads.mean:.3f} logits (5th-95th percentile of zeta/t over samples, mean of {spreads.count} "
        f"seeds; minimum {threshold:g})"
        + (f", Spearman with class share {correlations.mean:+.2f}" if correlations else "")
    )
    return CheckResult(check.kind, spreads.mean >= threshold, figure, spreads.mean, threshold)


def _state_updates(spec: ClaimSpec, check: CheckSpec, lookup: Lookup) -> CheckResult:
    assert check.arm is not None
    threshold = _threshold(spec, check)
    counts = summarize(state_updates(report, check.field) for report in lookup(spec.suite, *check.arm).values())
    name = f"{check.arm[1]}'s {check.field}"
    if counts is None:
        return CheckResult(check.kind, None, f"updates of {name} not measured", None, threshold)
    figure = f"{name} updated {counts.mean:.1f} times per sample (minimum {threshold:g})"
    return CheckResult(check.kind, counts.mean >= threshold, figure, counts.mean, threshold)


def state_updates(report: dict, field: str) -> float | None:
    """The mean number of updates of each sample's ``field`` ("u" or "zeta") in the run of ``report``."""
    config = report.get("config") or {}
    steps, batch = report.get("steps"), config.get("batch_size")
    samples = report.get("train_samples") or config.get("train_subset")
    if not (steps and batch and samples):
        return None
    visits = steps * batch / samples
    if field == "u":
        return visits
    params = config.get("objective_params") or {}
    if params.get("learn_zeta") in (False, "false", "False"):
        return 0.0
    epochs = float(config.get("epochs") or params.get("epochs") or 0)
    freeze = _zeta_freeze(epochs, params)
    return visits * max(0.0, epochs - freeze) / epochs if epochs > 0 and freeze is not None else None


def _zeta_freeze(epochs: float, params: dict[str, Any]) -> float | None:
    """The epochs a NUCLR run of ``epochs`` kept zeta frozen: as its parameters recorded them, else by NUCLR's own
    rule (``freeze_fraction`` of its epochs); ``None`` where that rule cannot give one."""
    from ..objectives import NUCLR

    resolved: dict[str, Any] = NUCLR.run_length_parameters(epochs, params)
    freeze = resolved.get("freeze_epochs")
    return None if freeze is None else float(freeze)


def _noise_cost(spec: ClaimSpec, check: CheckSpec, lookup: Lookup) -> CheckResult:
    clean_role, noisy_role = check.roles
    key = check.keys[0]
    clean = per_seed(lookup(spec.suite, clean_role, key), spec.metric)
    noisy = per_seed(lookup(spec.suite, noisy_role, key), spec.metric)
    threshold = _threshold(spec, check)
    drop = summarize(paired_differences(clean, noisy))
    if drop is None:
        return CheckResult(check.kind, None, f"the noise's cost to {key} not measured", None, threshold)
    figure = (
        f"the noise costs {key} {_points(spec, drop.mean)} ({clean_role} -> {noisy_role}, {drop.count} seeds; "
        f"minimum {_points(spec, threshold)})"
    )
    return CheckResult(check.kind, drop.mean >= threshold, figure, drop.mean, threshold)


def _clean_agreement(spec: ClaimSpec, check: CheckSpec, lookup: Lookup) -> CheckResult:
    (role,) = check.roles
    first, second = (per_seed(lookup(spec.suite, role, key), spec.metric) for key in check.keys)
    threshold = _threshold(spec, check)
    gap = summarize(paired_differences(first, second))
    if gap is None:
        return CheckResult(check.kind, None, "the arms' clean accuracies not measured", None, threshold)
    figure = (
        f"clean: {check.keys[0]} - {check.keys[1]} = {_points(spec, gap.mean)} (agreement within "
        f"{_points(spec, threshold)} needed before drops are compared)"
    )
    return CheckResult(check.kind, abs(gap.mean) <= threshold, figure, gap.mean, threshold)


def _dcl_clamped(spec: ClaimSpec, check: CheckSpec, lookup: Lookup) -> CheckResult:
    assert check.arm is not None
    fractions = summarize(clamped_fraction(report) for report in lookup(spec.suite, *check.arm).values())
    if fractions is None:
        return CheckResult(check.kind, None, "DCL's clamped fraction not logged")
    return CheckResult(
        check.kind, None, f"DCL's estimate at its clamp for {100 * fractions.mean:.2f}% of anchors", fractions.mean
    )


def _effective_rank(spec: ClaimSpec, check: CheckSpec, lookup: Lookup) -> CheckResult:
    assert check.arm is not None
    name = "embeddings.image_effective_rank"
    ranks = summarize(per_seed(lookup(spec.suite, *check.arm), name).values())
    if ranks is None:
        return CheckResult(check.kind, None, "the image embeddings' effective rank not measured")
    references = [
        f"{key}'s {summary.mean:.1f}"
        for role in check.roles
        for key in check.keys
        if (summary := summarize(per_seed(lookup(spec.suite, role, key), name).values())) is not None
    ]
    figure = f"{check.arm[1]}'s image embeddings have effective rank {ranks.mean:.1f}" + (
        f" ({', '.join(references)}; 1 is a collapse)" if references else " (1 is a collapse)"
    )
    return CheckResult(check.kind, None, figure, ranks.mean)


def clamped_fraction(report: dict) -> float | None:
    """The mean over logged steps of ``dcl_clamped_fraction`` in the run's ``metrics.csv``."""
    path = Path(report.get("run", "")) / "metrics.csv"
    if not report.get("run") or not path.is_file():
        return None
    with path.open(newline="") as file:
        values = [float(row["dcl_clamped_fraction"]) for row in csv.DictReader(file) if row.get("dcl_clamped_fraction")]
    return sum(values) / len(values) if values else None


def _threshold(spec: ClaimSpec, check: CheckSpec) -> float:
    assert spec.sesoi is not None  # the registry refuses a claim without one
    return spec.sesoi if check.threshold is None else check.threshold


def _points(spec: ClaimSpec, value: float) -> str:
    return f"{100 * value:+.2f} points" if spec.unit == "points" else f"{value:+.2f}"


_CHECKS = {
    "zeta_spread": _zeta_spread,
    "state_updates": _state_updates,
    "noise_cost": _noise_cost,
    "clean_agreement": _clean_agreement,
    "dcl_clamped": _dcl_clamped,
    "effective_rank": _effective_rank,
}


def zeta_reading(report: dict) -> dict | None:
    """NUCLR's learned popularities in the run of ``report``: their spread in logits per side and over both, and
    each class's mean zeta against its share of the training pairs. Read from the run's checkpoint once and kept
    in ``mechanism.json`` beside its report (read back while the checkpoint it came from is the run's latest)."""
    folder = Path(report.get("run", ""))
    if not report.get("run") or not folder.is_dir():
        return None
    path = folder / READING_FILE
    checkpoint = _latest_checkpoint_name(folder)
    if path.is_file():
        saved = json.loads(path.read_text())
        if checkpoint is None or saved.get("checkpoint") == checkpoint:
            return saved
    if checkpoint is None:
        return None
    reading = {"checkpoint": checkpoint, **_read_zeta(folder)}
    path.write_text(json.dumps(reading, indent=2) + "\n")
    return reading


def _latest_checkpoint_name(folder: Path) -> str | None:
    from ..train.checkpoint import latest_checkpoint

    directory = folder / "checkpoints"
    if not directory.is_dir():
        return None
    found = latest_checkpoint(directory)
    return None if found is None else found.name


def _read_zeta(folder: Path) -> dict:
    import torch

    from ..data import TensorImageDataset
    from ..objectives import StatefulObjective
    from ..train.restore import load_run

    restored = load_run(folder)
    train, objective = restored.splits.train, restored.objective
    if not isinstance(train, TensorImageDataset) or not isinstance(objective, StatefulObjective):
        raise ValueError(f"{folder}: NUCLR's zeta reading needs its in-memory data and per-sample state")
    temperature = restored.temperature()
    labels = train.labels.cpu()
    spreads, points = {}, []
    for side in ("a", "b"):
        _, zeta = objective.sample_values("zeta", side)  # one process: every sample's row
        logits = zeta.double() / temperature
        spreads[side] = float(torch.quantile(logits, 0.95) - torch.quantile(logits, 0.05))
        for label in labels.unique().tolist():
            members = labels == label
            share, mean_zeta = float(members.double().mean()), float(zeta[members].mean())
            points.append({"side": side, "class": int(label), "share": share, "zeta": mean_zeta})
    return {
        "temperature": temperature,
        "spread_logits": sum(spreads.values()) / len(spreads),
        "spread_logits_by_side": spreads,
        "spearman": _mean_spearman(points),
        "points": points,
    }


def _mean_spearman(points: list[dict]) -> float:
    values = [
        spearman([p["share"] for p in points if p["side"] == side], [p["zeta"] for p in points if p["side"] == side])
        for side in ("a", "b")
    ]
    finite = [value for value in values if math.isfinite(value)]
    return sum(finite) / len(finite) if finite else math.nan


def spearman(x: list[float], y: list[float]) -> float:
    """Spearman's rank correlation of ``x`` and ``y``, ties at their mean rank (NaN below two points, or when
    either side is constant: a frozen zeta has no ranking)."""
    from scipy.stats import spearmanr

    if len(x) < 2 or len(set(x)) < 2 or len(set(y)) < 2:
        return math.nan
    return float(spearmanr(x, y).statistic)
