"""The theory suite: the NUCLR, WPSE and CLIP-margin toys, and Nozawa & Sato 2021's bound on the trained InfoNCE model.

Each part writes ``<name>.json`` (its rows, its text table, its settings)
and ``<name>.png`` into the theory folder and is skipped when its JSON exists
with the same settings, so an interrupted bench does not redo finished toys.
A part that fails is recorded with the reason and the rest of the bench
goes on.
"""

from __future__ import annotations

import json
import math
import sys
import traceback
from dataclasses import asdict, is_dataclass
from pathlib import Path
from typing import Any


def run_theory(preset, folder: Path, results, *, stream=None, cached_only: bool = False) -> dict:
    """``{part: outcome}`` for every toy of the preset and the bound (see the module's documentation).

    ``cached_only`` computes nothing: parts without a finished JSON are reported as not run yet.
    """
    folder.mkdir(parents=True, exist_ok=True)
    settings = preset.theory
    outcomes = {}
    for name, function in (("nuclr", _nuclr), ("wpse", _wpse), ("clip_margin", _clip_margin)):
        outcomes[name] = _cached(
            folder, name, settings.get(name, {}), lambda s, f=function: f(s, folder), stream, cached_only
        )
    bound_settings = settings.get("bound", {})
    outcomes["bound"] = _cached(
        folder,
        "bound",
        {**bound_settings, "runs": _bound_runs(results)},
        lambda s: _bound(bound_settings, folder, results),
        stream,
        cached_only,
    )
    return outcomes


def _cached(folder: Path, name: str, settings: dict, compute, stream, cached_only: bool = False) -> dict:
    path = folder / f"{name}.json"
    settings = json.loads(json.dumps(settings))  # tuples as lists, as they come back from the file
    if path.is_file():
        saved = json.loads(path.read_text())
        if saved.get("settings") == settings and saved.get("status") == "ok":
            return saved
    if cached_only:
        return {"status": "not run yet", "note": "the bench has not reached it"}
    print(f"[bench] theory: {name} ...", file=stream or sys.stderr, flush=True)
    try:
        outcome = {"status": "ok", **compute(settings)}
    except Exception as error:  # a toy's failure must not cost the whole bench its report
        outcome = {
            "status": "failed",
            "note": f"{type(error).__name__}: {error}",
            "traceback": traceback.format_exc(limit=4),
        }
    outcome["settings"] = settings
    path.write_text(json.dumps(_plain(outcome), indent=2) + "\n")
    return outcome


def _nuclr(settings: dict, folder: Path) -> dict:
    from ..theory import nuclr_toy

    rows = []
    for tau in settings.get("taus", (0.2, 1.0)):
        runs = [
            nuclr_toy.run_toy(
                tau,
                settings.get("sizes", nuclr_toy.DEFAULT_SIZES),
                seed,
                fresh_pairs=settings.get("fresh_pairs", nuclr_toy.DEFAULT_FRESH_PAIRS),
            )
            for seed in range(settings.get("seeds", 1))
        ]
        rows += nuclr_toy.average_over_seeds(runs)
    figure = nuclr_toy.plot_errors(rows, folder / "nuclr.png")
    largest: dict[float, nuclr_toy.ToyRow] = {}
    for row in rows:
        if row.n >= largest.get(row.tau, row).n:
            largest[row.tau] = row
    summary = "; ".join(
        f"tau={tau:g}, n={row.n}: GCL error {row.gcl_error:.4f}, NUCLR {row.nuclr_error:.4f}, MLE {row.mle_error:.4f}"
        for tau, row in largest.items()
    )
    return {
        "table": nuclr_toy.format_table(rows),
        "rows": [asdict(row) for row in rows],
        "figure": str(figure),
        "summary": summary,
    }


def _wpse(settings: dict, folder: Path) -> dict:
    from ..theory import wpse_toy

    kwargs = {key: settings[key] for key in ("steps", "items", "dim") if key in settings}
    rows = wpse_toy.run_wpse_toy(tuple(settings.get("seeds", wpse_toy.DEFAULT_SEEDS)), **kwargs)
    figure = wpse_toy.plot_gaps(rows, folder / "wpse.png")
    gaps = wpse_toy.mean_gaps(rows)
    return {
        "table": wpse_toy.format_gap_table(rows),
        "rows": [asdict(row) for row in rows],
        "figure": str(figure),
        "summary": ", ".join(f"{label}: gap {gap:.3g}" for label, gap in gaps.items()),
    }


def _clip_margin(settings: dict, folder: Path) -> dict:
    from ..theory import clip_margin_toy

    # the settings come back from JSON, where the toy's tuples are lists
    options: dict[str, Any] = {
        key: tuple(value) if isinstance(value, list) else value for key, value in settings.items()
    }
    rows = clip_margin_toy.run_clip_margin_toy(**options)
    outcome = {
        "table": clip_margin_toy.format_table(rows),
        "rows": [_plain(row) for row in rows],
        "figure": str(clip_margin_toy.plot_margins(rows, folder / "clip_margin.png")),
    }
    margins: dict[tuple[str, float], list[float]] = {}
    for row in rows:
        if row.tau is not None:
            margins.setdefault((row.objective, row.tau), []).append(row.mean_margin)
    outcome["summary"] = ", ".join(
        f"{objective} tau={tau:g}: margin {sum(values) / len(values):.3f}"
        for (objective, tau), values in sorted(margins.items())
    )
    return outcome


def _bound_runs(results) -> list[str]:
    return [run.folder.name for run in _infonce_runs(results)]


def _infonce_runs(results) -> list:
    return [
        run
        for run in results.runs
        if run.spec.suite == "two_view" and run.spec.arm.role == "large" and run.spec.arm.objective_key == "infonce"
    ]


def _bound(settings: dict, folder: Path, results) -> dict:
    from ..theory.bound_report import format_bound_table, measure_bounds, plot_bounds
    from ..train.bound_features import features_from_run  # run-level: reads the trained run through load_run

    runs = _infonce_runs(results)
    if not runs:
        raise ValueError("the bound needs the two-view InfoNCE run (suite two_view)")
    per_seed, tables, figure = {}, [], None
    negatives = list(settings.get("negatives", (4, 16, 64, 256)))
    for run in runs:
        features = features_from_run(
            run.folder,
            seed=run.spec.seed,
            train_samples=settings.get("train_samples", 5000),
            augmentations=settings.get("augmentations", 10),
        )
        usable = [k for k in negatives if k + 1 <= len(features.test_labels)]
        report = measure_bounds(features, usable, epochs=settings.get("epochs", 10), seed=run.spec.seed)
        per_seed[str(run.spec.seed)] = {"temperature": features.temperature, **report.as_dict()}
        tables.append(f"seed {run.spec.seed} (t = {features.temperature:g}):\n{format_bound_table(report)}")
        if figure is None:
            figure = folder / "bound.png"
            plot_bounds(report, figure)
    return {"per_seed": per_seed, "table": "\n\n".join(tables), "figure": str(figure)}


def _plain(value):
    """JSON-able: dataclasses as dicts, tuples as lists, non-finite floats as strings."""
    if is_dataclass(value) and not isinstance(value, type):
        return _plain(asdict(value))
    if isinstance(value, dict):
        return {str(key): _plain(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(item) for item in value]
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    return value
