"""The bench report: ``report.md``, a self-contained ``report.html`` (plots inlined) and ``bench.json``.

The report is built once as a :class:`~uncurated.bench.document.Document` and
rendered twice, so the Markdown and the HTML always say the same thing.
"""

from __future__ import annotations

import csv
import datetime
import json
import math
import platform
import sys
from dataclasses import asdict
from pathlib import Path

from .claims import ClaimResult, evaluate_claims, format_difference
from .document import Document
from .dotplot import arms_plot, claims_plot
from .gate import Gate, learning_gates
from .popularity import popularity_plot
from .presets import SUITE_TITLES, SUITES
from .registry import CHANCE, MIN_SEEDS
from .results import IMAGE_TEXT_COLUMNS, TWO_VIEW_COLUMNS, format_summary, metric, per_seed, summarize
from .verdicts import ALPHA, POWER

# ---------------------------------------------------------------------------------------------------------------


def write_report(results) -> dict:
    """Write ``report.md``, ``report.html`` and ``bench.json`` into the bench folder; return the summary dict."""
    out = results.out
    figures = out / "figures"
    figures.mkdir(parents=True, exist_ok=True)
    bounds = {int(seed): value for seed, value in (results.theory.get("bound", {}).get("per_seed") or {}).items()}
    gates = learning_gates(results.arm_reports)
    claims = evaluate_claims(results.arm_reports, bounds, gates)
    doc = Document()
    title = f"uncurated bench: preset {results.preset.name}"
    doc.heading(1, title)
    wall = sum(run.wall_seconds for run in results.runs if math.isfinite(run.wall_seconds))
    trained = sum(run.trained_now for run in results.runs)
    doc.paragraph(
        f"Started {results.started}; this invocation took {_duration(results.wall_seconds)} "
        f"({trained} of {len(results.runs)} runs trained now"
        + ("" if trained == len(results.runs) else ", the rest reused from an earlier invocation")
        + "; "
        f"all runs together took {_duration(wall)} of training and evaluation). "
        f"Preset `{results.preset.name}`: {results.preset.description} Seeds: "
        f"{', '.join(map(str, results.preset.seeds))}. {results.data_note}"
    )
    settings = {suite: suite_setting(results, suite) for suite in results.suites}
    _claims_section(
        doc,
        claims,
        gates,
        figures,
        settings,
        {
            suite: suite_setting(results, suite, short=True) if suite in results.suites else "not run"
            for suite in SUITES
        },
    )
    summary = {
        "preset": results.preset.name,
        "claims": [_finite(claim.as_dict()) for claim in claims],
        "suites": {},
        "learning_gates": {suite: asdict(gate) for suite, gate in gates.items()},
        "settings": settings,
    }
    if "two_view" in results.suites:
        summary["suites"]["two_view"] = _two_view_section(doc, results, figures, gates["two_view"])
    if "image_text" in results.suites:
        summary["suites"]["image_text"] = _image_text_section(doc, results, figures, gates["image_text"])
    if "theory" in results.suites:
        summary["theory"] = _theory_section(doc, results)
    _configuration_section(doc, results)
    summary.update(
        versions=versions(),
        wall_seconds=results.wall_seconds,
        started=results.started,
        runs=[_run_row(run) for run in results.runs],
    )
    (out / "report.md").write_text(doc.markdown(out))
    (out / "report.html").write_text(doc.html(title))
    (out / "bench.json").write_text(json.dumps(_finite(summary), indent=2) + "\n")
    return summary


def _duration(seconds: float) -> str:
    if not math.isfinite(seconds):
        return "?"
    seconds = int(round(seconds))
    return f"{seconds // 60} min {seconds % 60:02d} s" if seconds >= 60 else f"{seconds} s"


#: How the report names each two-view data set; the thesis measured its two-view claims on none of them.
TWO_VIEW_DATASETS = {
    "fashion-clutter": "Fashion-MNIST in clutter (garments at a random position, scale and colour on tiles of other "
    "garments, 32 x 32 RGB, rendered from Fashion-MNIST)",
    "fashion-mnist": "Fashion-MNIST (28 x 28 grayscale)",
    "digits": "scikit-learn's digits",
}
#: The thesis's own data for the two-view claims (Chuang 2023: Figs. 3-3, 4-2 and 5-3).
THESIS_DATA = "CIFAR-10 (and STL-10 and CIFAR-100 in Figs. 3-3 and 4-2)"


def suite_setting(results, suite: str, *, short: bool = False) -> str:
    """Which data and budget produced a suite's verdicts: in full for the report's text, ``short`` for a cell of
    the claims table (the data's name, the budget, and for two views that it is not the thesis's CIFAR-10)."""
    if suite == "theory":
        two_view = suite_setting(results, "two_view", short=True)
        return "not run" if two_view == "not run" else f"the bound on the trained two-view InfoNCE model ({two_view})"
    configs = [run.report.get("config", {}) for run in results.runs if run.spec.suite == suite]
    if not configs:
        return "not run"
    if suite == "image_text":
        return _budget(
            "FashionCaptions" if short else "FashionCaptions (generated captions for Fashion-MNIST)", configs
        )
    names = sorted({config.get("dataset") or "?" for config in configs})
    if short:
        data = ", ".join(TWO_VIEW_DATASETS.get(name, name).split(" (")[0] for name in names)
        return _budget(data, configs) + "; not the thesis's CIFAR-10"
    data = ", ".join(TWO_VIEW_DATASETS.get(name, name) for name in names)
    return _budget(data, configs) + f"; not the thesis's data, {THESIS_DATA}"


def _budget(data: str, configs: list[dict]) -> str:
    def values(key: str) -> str:
        found: list[float] = sorted({config[key] for config in configs if config.get(key) is not None})
        return " or ".join(f"{value:,}" if isinstance(value, int) else f"{value:g}" for value in found) or "?"

    images = values("train_subset")
    images = "every training image" if images == "0" else f"{images} training images"
    epochs = values("epochs")
    return f"{data}: {images}, {epochs} epoch{'' if epochs == '1' else 's'} at batch {values('batch_size')}"


def _claims_section(
    doc: Document,
    claims: list[ClaimResult],
    gates: dict[str, Gate],
    figures: Path,
    settings: dict[str, str] | None = None,
    cells: dict[str, str] | None = None,
) -> None:
    """The claims table; ``settings`` (in full) and ``cells`` (short) name each suite's data and budget."""
    doc.heading(2, "Claims")
    doc.paragraph(
        "Each claim is declared before any run in the claims registry: the paper's effect, the bench's measure "
        "and its departures from the paper, a smallest effect of interest (SESOI) and the checks that its "
        "mechanism engaged. It is measured as a difference paired by seed, positive when the claim holds, in "
        "accuracy points (pts) or decades (dec). A claim whose check failed gets *no verdict: manipulation "
        "failed* with the figure; a suite that did not pass its learning gate, or fewer than "
        f"{MIN_SEEDS} seeds, no verdict. The others are tested together: *held* or *reversed* when the paired t "
        "test rejects no effect, *absent* when it does not and the equivalence test (TOST) puts the effect "
        f"within ±SESOI, *inconclusive* otherwise; both families of p-values are Holm-adjusted across the "
        f"claims tested, so the report as a whole errs with probability below {ALPHA:g}. `MDE` is the effect the "
        f"test would find with {100 * POWER:.0f}% power at the seeds' spread (not the interval's half-width); "
        "`seeds for a verdict` the seeds at which the observed difference and spread would give one with that "
        "power. `fraction` is our effect over the paper's."
    )
    settings, cells = settings or {}, cells or {}
    rows = []
    for claim in claims:
        effect, interval, mde = format_difference(claim)
        v, spec = claim.verdict, claim.spec
        assert spec.paper_effect is not None and spec.sesoi is not None  # the registry refuses a claim without
        scale, unit = (100.0, " pts") if spec.unit == "points" else (1.0, " dec")
        rows.append(
            [
                spec.title,
                spec.source,
                f"{scale * spec.paper_effect:+.2f}{unit} ({spec.paper_spread})",
                spec.measure,
                f"{effect} {interval}" if effect != "—" else "—",
                f"{v.fraction:.2f}" if math.isfinite(v.fraction) else "—",
                f"±{scale * spec.sesoi:.2f}{unit}",
                mde,
                _seeds_needed(v),
                v.label,
                "; ".join(check.figure for check in claim.checks) or "—",
                claim.detail,
                "; ".join(spec.departures),
                _measured_on(cells.get(claim.suite), claim.seeds),
            ]
        )
    header = ["claim", "paper", "paper's effect", "measured as", "our effect [95% interval] (n)", "fraction"]
    header += ["SESOI", "MDE (80%)", "seeds for a verdict", "verdict", "manipulation check", "detail"]
    doc.table(header + ["departures", "measured on"], rows)
    doc.image(
        claims_plot(claims, figures / "claims.png"),
        "Claims: our effect with its 95% interval (dot), the paper's (diamond), ±SESOI (grey), zero (line)",
    )
    two_view = settings.get("two_view")
    if two_view and two_view != "not run":
        doc.paragraph(
            f"The two-view verdicts (Chuang 2023) come from {two_view}. A verdict there says whether the "
            "direction of the thesis's effect holds in this setting at this budget, not whether its numbers "
            "reproduce."
        )
    for suite, gate in gates.items():
        if gate.passed is not None:
            doc.paragraph(f"{SUITE_TITLES[suite].capitalize()} suite. {gate.explanation}")


def _seeds_needed(verdict) -> str:
    if verdict.count < 2:
        return "—"
    return str(verdict.seeds_needed) if verdict.seeds_needed is not None else "more than 200"


def _measured_on(setting: str | None, seeds: list[int]) -> str:
    if not setting or setting == "not run":
        return "not run"
    return f"{setting}; seeds {', '.join(map(str, seeds))}" if seeds else setting


def _two_view_section(doc: Document, results, figures: Path, gate: Gate) -> dict:
    doc.heading(2, f"Two-view pretraining ({_dataset(results, 'two_view', 'Fashion-MNIST')})")
    doc.paragraph(f"Data and budget: {suite_setting(results, 'two_view')}.")
    doc.paragraph(gate.explanation)
    doc.paragraph(
        "Same encoder, budget and seeds for every objective; two views by augmentation unless the condition says "
        "label positives (the second view is an augmentation of another training image with the same, possibly "
        "noisy, label; thesis Fig. 5-3). Accuracies on the test split, mean ± standard deviation over seeds. "
        "`DCL clamped` is the fraction of anchors whose debiased estimate sat on the e^{-1/t} floor, averaged over "
        "the logged steps."
    )
    rows, table = _arm_table(results, "two_view", TWO_VIEW_COLUMNS)
    baseline = _baselines(results, "two_view")
    for label, summary in baseline.items():
        rows.append(["baseline (same probe)", label, f"{100 * summary.mean:.2f}", "", "", "", ""])
    headers = [header for _, header in TWO_VIEW_COLUMNS]
    doc.table(["condition", "objective"] + headers + ["DCL clamped", "wall time"], rows)
    raw_pixels = baseline.get("raw pixels")
    path = _arms_dot_plot(
        results,
        "two_view",
        "linear_probe.accuracy",
        "linear probe accuracy",
        figures / "two_view.png",
        raw_pixels.mean if raw_pixels else None,
    )
    doc.image(
        path,
        "Two-view: linear probe accuracy per objective and condition on the full 0-100% axis (dot: mean over "
        "seeds; line: the seeds' range; dotted: chance; dashed: raw pixels)",
    )
    return {"arms": table, "baselines": {k: _summary_dict(v) for k, v in baseline.items()}}


def _image_text_section(doc: Document, results, figures: Path, gate: Gate) -> dict:
    doc.heading(2, "Image-text pretraining (FashionCaptions)")
    doc.paragraph(gate.explanation)
    doc.paragraph(
        "Generated captions for Fashion-MNIST; the noisy condition swaps 20% of the captions for a confusable "
        "class's, makes the classes long-tailed and duplicates captions; the test split is clean and balanced. "
        "Same encoders, budget and seeds for every objective (the frozen MiniLM text tower with a trained linear "
        "map; WPSE reads its token states with a trained point-set head); zero-shot top-1 from class prompts, "
        "retrieval Recall@1 in both directions over the distinct captions (5 per test image; a repeated text is "
        "one candidate, correct for all its images) and the linear probe, as the run's evaluation reports them "
        "(WPSE scored by its own similarity, the dot product of its vectors)."
    )
    rows, table = _arm_table(results, "image_text", IMAGE_TEXT_COLUMNS)
    doc.table(
        ["condition", "objective"] + [header for _, header in IMAGE_TEXT_COLUMNS] + ["DCL clamped", "wall time"], rows
    )
    clean = _baselines(results, "image_text")
    path = _arms_dot_plot(results, "image_text", "zero_shot.top1", "zero-shot top-1", figures / "image_text.png", None)
    doc.image(
        path,
        "Image-text: zero-shot top-1 per objective and condition on the full 0-100% axis (dot: mean over seeds; "
        "line: the seeds' range; dotted: chance)",
    )
    popularity = popularity_plot(results, figures / "nuclr_popularity.png")
    if popularity.get("figure"):
        doc.paragraph(popularity["text"])
        doc.image(
            Path(popularity["figure"]),
            "NUCLR: learned popularity (mean zeta per class) against the class's share of the training pairs",
        )
    elif popularity.get("text"):
        doc.paragraph(popularity["text"])
    return {
        "arms": table,
        "baselines": {k: _summary_dict(v) for k, v in clean.items()},
        "nuclr_popularity": {k: v for k, v in popularity.items() if k != "figure"},
    }


def _theory_section(doc: Document, results) -> dict:
    doc.heading(2, "Theory")
    titles = {
        "nuclr": (
            "NUCLR toy (Wang et al. 2025, Sec. 3.3)",
            "generalization error |L_hat - L| of MLE, GCL and NUCLR "
            "against n: GCL's error should plateau while NUCLR's falls with MLE's.",
        ),
        "wpse": (
            "WPSE toy (Uesaka et al. 2025)",
            "gap L + I(X;Y) >= 0 of CLIP and weighted point sets on a discrete joint: "
            "WPSE with M >= 4 should end far below CLIP.",
        ),
        "clip_margin": (
            "CLIP margin against temperature (Chen et al. 2024, Thms 6.2-6.3)",
            "CLIP's learned margin is of the order of the temperature; the regularizer lifts it.",
        ),
        "bound": (
            "Coupon-collector bound against K (Nozawa & Sato 2021, Fig. 1)",
            "upper bounds on the mean classifier's supervised loss from the trained two-view InfoNCE model: "
            "the CURL bound (Eq. 8) should explode with K, the proposed one (Eq. 10) should not.",
        ),
    }
    summary = {}
    for name, (title, what) in titles.items():
        outcome = results.theory.get(name)
        if outcome is None:
            continue
        doc.heading(3, title)
        if outcome.get("status") != "ok":
            doc.paragraph(f"{what} Not run: {outcome.get('status')} ({outcome.get('note', '')}).")
        else:
            doc.paragraph(what + (f" Measured: {outcome['summary']}." if outcome.get("summary") else ""))
            doc.pre(outcome.get("table", ""))
            if outcome.get("figure"):
                doc.image(Path(outcome["figure"]), title)
        summary[name] = {key: value for key, value in outcome.items() if key not in ("traceback",)}
    return summary


def _configuration_section(doc: Document, results) -> None:
    import yaml

    doc.heading(2, "Configuration and versions")
    info = versions()
    doc.paragraph(", ".join(f"{key} {value}" for key, value in info.items()) + ".")
    preset = {key: value for key, value in asdict(results.preset).items() if key not in ("seconds_per_run",)}
    doc.pre(yaml.safe_dump(json.loads(json.dumps(preset)), sort_keys=False, width=110).strip())
    doc.heading(3, "Runs")
    doc.paragraph(
        "Every run's exact `key=value` overrides (on top of its preset) and its wall time (training and "
        "evaluation). Each run folder holds its resolved `config.yaml`, `metrics.csv` and `report.json`."
    )
    rows = [
        [
            run.spec.name,
            " ".join(run.spec.arm.overrides) + f" seed={run.spec.seed}",
            _duration(run.wall_seconds),
            "trained" if run.trained_now else "reused",
            str(run.report.get("steps", "")),
        ]
        for run in results.runs
    ]
    doc.table(["run", "overrides", "wall time", "this time", "steps"], rows)


def versions() -> dict:
    import torch

    from .. import __version__

    return {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "uncurated": __version__,
        "platform": platform.platform(),
        "cpu cores": str(_cores()),
        "device": "cuda" if torch.cuda.is_available() else "cpu",
        "date": datetime.date.today().isoformat(),
    }


def _cores() -> int:
    import os

    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 0


# ---------------------------------------------------------------------------------------------------------------


def _dataset(results, suite: str, default: str) -> str:
    names = {run.report.get("config", {}).get("dataset") for run in results.runs if run.spec.suite == suite}
    names.discard(None)
    return ", ".join(sorted(names)) if names else default


def _arm_table(results, suite: str, columns) -> tuple[list[list[str]], dict]:
    """The suite's results table, one row per arm (condition, objective, ``columns``, DCL clamped, wall time), and
    the same summaries by arm key for ``bench.json``."""
    rows, table = [], {}
    for arm in _arms(results, suite):
        reports = results.arm_reports(suite, arm.role, arm.objective_key)
        cells = {name: summarize(metric(r, name) for r in reports.values()) for name, _ in columns}
        clamped = summarize(_clamped_fraction(run.folder) for run in results.runs if run.spec.arm.key == arm.key)
        wall = summarize(run.wall_seconds for run in results.runs if run.spec.arm.key == arm.key)
        table[arm.key] = {
            "condition": arm.condition,
            "objective": arm.objective,
            **{name: _summary_dict(s) for name, s in cells.items()},
            "dcl_clamped": _summary_dict(clamped),
        }
        rows.append(
            [arm.condition, arm.objective]
            + [format_summary(cells[name]) for name, _ in columns]
            + [format_summary(clamped, percent=False) if clamped else "", _duration(wall.mean if wall else math.nan)]
        )
    return rows, table


def _arms(results, suite: str):
    return [arm for arm in results.arms() if arm.suite == suite]


def _baselines(results, suite: str) -> dict:
    reports = [run.report for run in results.runs if run.spec.suite == suite]
    result = {}
    for label, name in (
        ("raw pixels", "linear_probe.raw_pixels_accuracy"),
        ("untrained encoder", "linear_probe.untrained_accuracy"),
    ):
        summary = summarize(metric(report, name) for report in reports)
        if summary is not None:
            result[label] = summary
    return result


def _summary_dict(summary) -> dict | None:
    return None if summary is None else {"mean": summary.mean, "std": summary.std, "count": summary.count}


def _clamped_fraction(folder: Path) -> float | None:
    path = folder / "metrics.csv"
    if not path.is_file():
        return None
    with path.open(newline="") as file:
        values = [
            float(row["dcl_clamped_fraction"])
            for row in csv.DictReader(file)
            if row.get("dcl_clamped_fraction") not in (None, "")
        ]
    return sum(values) / len(values) if values else None


def _arms_dot_plot(results, suite: str, name: str, xlabel: str, path: Path, baseline: float | None) -> Path | None:
    rows = [
        (
            f"{arm.objective} ({arm.condition})",
            list(per_seed(results.arm_reports(suite, arm.role, arm.objective_key), name).values()),
        )
        for arm in _arms(results, suite)
    ]
    return arms_plot(rows, path, xlabel, CHANCE, baseline)


def _run_row(run) -> dict:
    return {
        "name": run.spec.name,
        "suite": run.spec.suite,
        "arm": run.spec.arm.key,
        "seed": run.spec.seed,
        "wall_seconds": run.wall_seconds,
        "trained_now": run.trained_now,
        "folder": str(run.folder),
        "evaluation": run.report.get("evaluation"),
    }


def _finite(value):
    """JSON-able without NaN or infinity (written as null and as the string "inf")."""
    if isinstance(value, dict):
        return {str(key): _finite(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(item) for item in value]
    if isinstance(value, float) and not math.isfinite(value):
        return None if math.isnan(value) else ("inf" if value > 0 else "-inf")
    return value


def print_claims(summary: dict, stream=sys.stdout) -> None:
    """The claims table as plain text, for the terminal: verdict, our effect and the paper's, the claim."""
    for claim in summary["claims"]:
        v = claim["verdict"]
        scale = 100.0 if claim["unit"] == "points" else 1.0
        unit = "pts" if claim["unit"] == "points" else "dec"
        ours = "—" if v["count"] == 0 or v["mean"] is None else f"{scale * v['mean']:+.2f} {unit}"
        paper = f"paper {scale * claim['paper_effect']:+.2f}"
        print(f"  {v['label']:<34} {ours:>11} ({paper})  {claim['claim']} ({claim['source']})", file=stream)
