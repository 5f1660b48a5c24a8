"""Running a bench: prepare the data, train every run (reusing finished ones), run the theory, report.

Layout of ``<out>`` (``runs/bench-<preset>-<date>`` by default)::

    data/                  the Fashion-MNIST folder the runs read (a stratified test subset, when the preset asks)
    runs/<run>/            one training run each (config.yaml, metrics.csv, checkpoints/, report.json)
    runs/<run>/bench.json  the run's wall time (training and evaluation) as the bench measured it
    runs/<run>/mechanism.json  NUCLR's learned zeta, read once from the run's checkpoint for its checks
    theory/                each toy's JSON and PNG
    bench.json             everything the report shows, machine-readable
    report.md, report.html the report

A run whose ``report.json`` exists is finished and reused as it is; any
other is (re)started with ``resume=true``, so a run killed mid-way continues
from its last checkpoint. Running the same command again therefore trains
only what is missing.
"""

from __future__ import annotations

import datetime
import json
import math
import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import torch

from .gate import DEFAULT_RUNS
from .presets import SUITE_TITLES, SUITES, Arm, Preset, RunSpec, arms, plan_runs, seed_shortfalls

FASHION_DATASETS = ("fashion-mnist", "fashion-clutter", "fashion-captions", "fashion-spurious")


@dataclass
class RunOutcome:
    """A finished run: its spec, its report, its wall time, and whether this invocation trained it."""

    spec: RunSpec
    report: dict
    wall_seconds: float
    trained_now: bool
    folder: Path


@dataclass
class BenchResults:
    """What a bench invocation measured (the report is written from it)."""

    preset: Preset
    out: Path
    suites: tuple[str, ...]
    runs: list[RunOutcome] = field(default_factory=list)
    theory: dict = field(default_factory=dict)
    started: str = ""
    wall_seconds: float = 0.0
    data_note: str = ""

    def arm_reports(self, suite: str, role: str, objective_key: str) -> dict[int, dict]:
        """``{seed: report}`` of one arm (empty when it did not run)."""
        return {
            run.spec.seed: run.report
            for run in self.runs
            if run.spec.suite == suite and run.spec.arm.role == role and run.spec.arm.objective_key == objective_key
        }

    def arms(self) -> list[Arm]:
        seen, result = set(), []
        for run in self.runs:
            if run.spec.arm.key not in seen:
                seen.add(run.spec.arm.key)
                result.append(run.spec.arm)
        return result


class Progress:
    """Prints the suite, the run and the ETA to stderr, one line per event."""

    def __init__(self, preset: Preset, plan: list[RunSpec], theory: bool, stream=None) -> None:
        self.preset, self.stream = preset, stream or sys.stderr
        self.total = len(plan) + (1 if theory else 0)
        self.done = 0
        self.measured: dict[str, list[float]] = {}
        self.remaining = {suite: sum(1 for spec in plan if spec.suite == suite) for suite in SUITES}
        self.remaining["theory"] = 1 if theory else 0
        self.started = time.perf_counter()

    def estimate(self, suite: str) -> float:
        values = self.measured.get(suite)
        return sum(values) / len(values) if values else self.preset.seconds_per_run.get(suite, 60.0)

    def eta(self) -> float:
        return sum(count * self.estimate(suite) for suite, count in self.remaining.items())

    def start(self, suite: str, what: str) -> None:
        elapsed = time.perf_counter() - self.started
        print(
            f"[bench {self.preset.name}] {SUITE_TITLES[suite]} | {self.done + 1}/{self.total} {what} | "
            f"elapsed {_clock(elapsed)}, ETA {_clock(self.eta())}",
            file=self.stream,
            flush=True,
        )

    def finish(self, suite: str, seconds: float, trained: bool) -> None:
        self.done += 1
        self.remaining[suite] -= 1
        if trained:
            self.measured.setdefault(suite, []).append(seconds)


def _clock(seconds: float) -> str:
    seconds = max(0, int(round(seconds)))
    return f"{seconds // 3600}h{seconds // 60 % 60:02d}m" if seconds >= 3600 else f"{seconds // 60}m{seconds % 60:02d}s"


def default_out(preset: str, root: Path = Path("runs")) -> Path:
    return root / f"bench-{preset}-{datetime.date.today().strftime('%Y%m%d')}"


def run_bench(
    preset: Preset,
    out: Path,
    *,
    data_dir: Path | None = None,
    suites: tuple[str, ...] = SUITES,
    device: str = "auto",
    stream=None,
    train_fn: Callable | None = None,
    report_only: bool = False,
) -> BenchResults:
    """Run the preset's suites into ``out``, reusing finished runs; return the results (the report is separate).

    ``report_only`` trains and computes nothing: the results hold the runs and theory parts finished so far.
    The bench's own lines report its progress, so other libraries' bars ("Loading weights") are turned off.
    Before anything runs, each claim whose arms run on fewer seeds than it declares is named; a preset with
    ``require_declared_seeds`` then refuses to start (:class:`~uncurated.train.config.ConfigError`).
    """
    from threadpoolctl import threadpool_limits

    from ..progress import silence_third_party_progress
    from ..train.config import ConfigError

    chosen = tuple(s for s in SUITES if s in suites)
    shortfalls = seed_shortfalls(preset, chosen)
    if shortfalls and preset.require_declared_seeds and not report_only:
        raise ConfigError("; ".join(shortfalls) + f" (preset {preset.name} runs only with every claim's seeds)")
    for line in shortfalls:
        print(f"[bench {preset.name}] {line}", file=stream or sys.stderr, flush=True)
    silence_third_party_progress()

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    results = BenchResults(
        preset,
        out,
        chosen,
        started=datetime.datetime.now().isoformat(timespec="seconds"),
    )
    plan = plan_runs(preset, results.suites)
    progress = Progress(preset, plan, "theory" in results.suites, stream)
    began = time.perf_counter()
    # One BLAS thread for numpy/scipy (the probes' scikit-learn fits): on 2 shared cores, their default threads
    # oversubscribe and a probe runs 4 to 50 times slower. torch keeps its own threads.
    with threadpool_limits(1, user_api="blas"):
        fashion_root, results.data_note = prepare_data(preset, out / "data", data_dir)
        for spec in plan:
            if report_only and not (out / "runs" / spec.name / "report.json").is_file():
                continue
            progress.start(spec.suite, f"{spec.name} ({spec.arm.objective}; {spec.arm.condition})")
            outcome = execute_run(spec, out / "runs", fashion_root, device, train_fn or _train)
            progress.finish(spec.suite, outcome.wall_seconds, outcome.trained_now)
            results.runs.append(outcome)
        if "theory" in results.suites:
            from .theory import run_theory

            progress.start("theory", "toys and the bound")
            started = time.perf_counter()
            results.theory = run_theory(preset, out / "theory", results, stream=stream, cached_only=report_only)
            progress.finish("theory", time.perf_counter() - started, True)
    results.wall_seconds = time.perf_counter() - began
    return results


def _train(config) -> dict:
    from ..train import train

    return train(config)


def execute_run(spec: RunSpec, runs_dir: Path, fashion_root: Path | None, device: str, train_fn) -> RunOutcome:
    """The run's report: read back when it finished before, else trained (resumed from its checkpoint)."""
    folder = runs_dir / spec.name
    report_path, timing_path = folder / "report.json", folder / "bench.json"
    if report_path.is_file():
        report = json.loads(report_path.read_text())
        wall = _stored_wall(timing_path, report)
        return RunOutcome(spec, report, wall, False, folder)
    config = run_config(spec, runs_dir, fashion_root, device)
    started = time.perf_counter()
    report = train_fn(config)
    wall = time.perf_counter() - started
    if timing_path.parent.is_dir():
        previous = _stored_wall(timing_path, None) if timing_path.is_file() else 0.0
        timing_path.write_text(json.dumps({"wall_seconds": wall + previous, "finished": True}) + "\n")
        wall += previous
    return RunOutcome(spec, report, wall, True, folder)


def _stored_wall(path: Path, report: dict | None) -> float:
    try:
        return float(json.loads(path.read_text())["wall_seconds"])
    except (OSError, ValueError, KeyError, TypeError):
        return float((report or {}).get("train_seconds", math.nan))


def run_config(spec: RunSpec, runs_dir: Path, fashion_root: Path | None, device: str):
    """The training configuration of one run: the arm's overrides, its seed, the bench's folders."""
    from ..train.config import load_config

    # The baselines (the probe on raw pixels and on an untrained model) are what the learning gate reads: the
    # suite's default run measures them, the other runs skip them.
    baselines = DEFAULT_RUNS.get(spec.suite) == (spec.arm.role, spec.arm.objective_key)
    overrides = list(spec.arm.overrides) + [
        f"seed={spec.seed}",
        f"out={runs_dir}",
        f"name={spec.name}",
        "resume=true",
        "progress=false",
        f"device={device}",
        f"probe_baselines={str(baselines).lower()}",
    ]
    config = load_config(overrides)
    if fashion_root is not None and config.dataset in FASHION_DATASETS and not config.data_dir:
        config = load_config(overrides + [f"data_dir={fashion_root}"])
    return config


def prepare_data(preset: Preset, folder: Path, data_dir: Path | None) -> tuple[Path | None, str]:
    """The Fashion-MNIST folder the runs read, and a sentence saying what it holds.

    With ``preset.test_size``, the training files are linked and the test
    split is cut to a stratified random subset of that size (seed 0), so
    that every run's evaluation costs seconds rather than minutes.
    """
    from ..data import DEFAULT_ROOT, load_fashion_mnist, write_idx
    from ..data.fashion_mnist import SPLIT_FILES
    from ..data.mnist import find_split_file

    root = Path(data_dir) if data_dir else DEFAULT_ROOT
    try:
        images, labels = load_fashion_mnist(root, split="test")
    except (FileNotFoundError, ValueError) as error:
        return root, f"Fashion-MNIST could not be read from {root} ({error}); runs that need it fail."
    count = len(labels)
    if not preset.test_size or preset.test_size >= count:
        return root, f"Fashion-MNIST from {root}: every training image, all {count} test images."
    chosen = _stratified(labels, preset.test_size)
    folder.mkdir(parents=True, exist_ok=True)
    images_stem, labels_stem = SPLIT_FILES["test"]
    marker = folder / "subset.json"
    wanted = {"source": str(root.resolve()), "test_size": preset.test_size}
    if not (marker.is_file() and json.loads(marker.read_text()) == wanted):
        write_idx(folder / f"{images_stem}", images[chosen].numpy())
        write_idx(folder / f"{labels_stem}", labels[chosen].numpy().astype("uint8"))
        for stem in SPLIT_FILES["train"]:
            source = find_split_file(root, stem, "Fashion-MNIST", "")
            link = folder / source.name
            if link.is_symlink() or link.exists():
                link.unlink()
            os.symlink(source.resolve(), link)
        marker.write_text(json.dumps(wanted) + "\n")
    return folder, (
        f"Fashion-MNIST from {root}: every training image (runs subsample them with train_subset), and a "
        f"stratified random {preset.test_size} of the {count} test images (seed 0) for every evaluation."
    )


def _stratified(labels: torch.Tensor, size: int) -> torch.Tensor:
    generator = torch.Generator().manual_seed(0)
    classes = labels.unique()
    chosen = []
    for position, label in enumerate(classes.tolist()):
        rows = torch.nonzero(labels == label).flatten()
        share = size // len(classes) + (1 if position < size % len(classes) else 0)
        chosen.append(rows[torch.randperm(len(rows), generator=generator)[:share]])
    return torch.cat(chosen).sort().values


__all__ = [
    "BenchResults",
    "RunOutcome",
    "arms",
    "default_out",
    "execute_run",
    "prepare_data",
    "run_bench",
    "run_config",
]
