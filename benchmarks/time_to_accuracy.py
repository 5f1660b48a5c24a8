"""Accuracy against training time for the default two-view and image-text runs.

Each run trains as ``uncurated train`` would (its preset plus ``--set``
overrides) and checkpoints ``--points`` times; every checkpoint, and the
untrained model at time 0, is then measured on the same frozen features: the
linear probe (C searched, as ``uncurated eval``) and the weighted kNN on the
run's ``probe_layer``, and for image-text runs zero-shot top-1 from the class
prompts. The same probe on raw pixels is drawn as a line, the untrained
encoder is the curve's first point.

The time axis is the training's wall-clock seconds up to each checkpoint
(checkpoint writes excluded) and the process's CPU seconds beside it; the
JSON records the cores, torch's threads and the load average before and
after, since shared cores stretch both.

    python benchmarks/time_to_accuracy.py                      # both default runs
    python benchmarks/time_to_accuracy.py --runs image_text --set image_text epochs=2

Writes ``benchmarks/results/time_to_accuracy_<runs>.json`` and ``.png`` (``--out``).
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

import torch
from safetensors.torch import load_file
from timing import write_report  # the sibling module benchmarks/timing.py

import uncurated.train.trainer as trainer_module
from uncurated.evaluate import knn_classifier, linear_probe, zero_shot_accuracy
from uncurated.train import train
from uncurated.train.builders import build_model, build_splits
from uncurated.train.config import load_config
from uncurated.train.evaluation import embed, image_text_features
from uncurated.train.random_state import seed_everything

#: The default run of each pipeline: its preset (the bench's gates judge these two).
RUNS = {"two_view": ("preset=fashion-mnist",), "image_text": ("preset=fashion-captions",)}


class CheckpointClock:
    """Notes the training time at each checkpoint: it starts when the loop does (``Trainer.fit``, so building
    the data and the model is left out) and wraps ``Trainer.save`` to leave the writes out."""

    def __init__(self) -> None:
        self.original_save, self.original_fit = trainer_module.Trainer.save, trainer_module.Trainer.fit
        self.marks: list[dict] = []
        self.wall = self.cpu = 0.0
        self.last_wall, self.last_cpu = time.perf_counter(), time.process_time()

    def mark(self, step: int) -> None:
        now_wall, now_cpu = time.perf_counter(), time.process_time()
        self.wall += now_wall - self.last_wall
        self.cpu += now_cpu - self.last_cpu
        self.marks.append({"step": step, "train_seconds": self.wall, "cpu_seconds": self.cpu})

    def restart(self) -> None:
        self.last_wall, self.last_cpu = time.perf_counter(), time.process_time()

    def __enter__(self) -> CheckpointClock:
        clock, fit, save = self, self.original_fit, self.original_save

        def timed_fit(trainer, *args, **kwargs):
            clock.restart()
            return fit(trainer, *args, **kwargs)

        def timed_save(trainer) -> None:
            clock.mark(trainer.position.step)
            save(trainer)
            clock.restart()

        trainer_module.Trainer.save = timed_save
        trainer_module.Trainer.fit = timed_fit
        return self

    def __exit__(self, *exc) -> None:
        trainer_module.Trainer.save = self.original_save
        trainer_module.Trainer.fit = self.original_fit


def measure(model, config, splits, probe_batches, seed: int) -> dict:
    """Probe, kNN (and zero-shot for image-text) of ``model`` on fixed probe images."""
    train_batch, test_batch = probe_batches
    device = torch.device("cpu")
    train_features = embed(model, train_batch["image"], device, config.probe_layer)
    test_features = embed(model, test_batch["image"], device, config.probe_layer)
    result = {
        "linear_probe": linear_probe(
            train_features, train_batch["label"], test_features, test_batch["label"], seed=seed
        ).accuracy,
        "knn": knn_classifier(train_features, train_batch["label"], test_features, test_batch["label"]).accuracy,
    }
    if config.pipeline == "image_text":
        features = image_text_features(model, splits.test, device, seed=seed)
        result["zero_shot"] = zero_shot_accuracy(features.images, features.class_prompts, features.labels).accuracy
    return result


def run_curve(name: str, overrides: list[str], points: int, probe_train: int, work: Path) -> dict:
    """Train one run with ``points`` checkpoints and measure each (see the module's documentation)."""
    base = [*RUNS[name], f"name={name}", f"out={work}", "progress=false", f"probe_train_size={probe_train}", *overrides]
    config = load_config(base)
    splits = build_splits(config)
    steps_per_epoch = -(-len(splits.train) // config.batch_size)
    total = max(1, round(config.epochs * steps_per_epoch))
    every = [f"checkpoint_every={max(1, total // points)}", f"keep_checkpoints={points + 2}"]
    config = load_config([*base, *every, "checkpoint_each_epoch=false"])  # the points alone, evenly spaced
    seed_everything(config.seed)
    untrained = build_model(config, splits.train).eval()
    chosen = torch.randperm(len(splits.train), generator=torch.Generator().manual_seed(config.seed))[:probe_train]
    probe_batches = splits.train.batch(chosen), splits.test.batch(torch.arange(len(splits.test)))
    print(f"[{name}] training {total} steps, {points} checkpoints", flush=True)
    with CheckpointClock() as clock:
        report = train(config)
    curve = [
        {
            "step": 0,
            "train_seconds": 0.0,
            "cpu_seconds": 0.0,
            **measure(untrained, config, splits, probe_batches, config.seed),
        }
    ]
    for mark in clock.marks:
        folder = work / name / "checkpoints" / f"step-{mark['step']:08d}"
        if not folder.is_dir() or mark["step"] == curve[-1]["step"]:  # the last step is saved twice
            continue
        model = build_model(config, splits.train)
        model.load_state_dict(load_file(folder / "model.safetensors"), strict=False)
        curve.append({**mark, **measure(model.eval(), config, splits, probe_batches, config.seed)})
        print(f"[{name}] step {mark['step']}: {curve[-1]}", flush=True)
    pixels = linear_probe(
        probe_batches[0]["image"].flatten(1),
        probe_batches[0]["label"],
        probe_batches[1]["image"].flatten(1),
        probe_batches[1]["label"],
        seed=config.seed,
    ).accuracy
    return {
        "overrides": base,
        "steps": report["steps"],
        "train_seconds": report["train_seconds"],
        "raw_pixels_linear_probe": pixels,
        "untrained": curve[0],
        "curve": curve,
    }


def plot(results: dict, path: Path) -> None:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    figure = Figure(figsize=(5.2 * len(results), 4.0), layout="constrained")
    FigureCanvasAgg(figure)
    axes = figure.subplots(1, len(results), squeeze=False)[0]
    for ax, (name, result) in zip(axes, results.items(), strict=True):
        seconds = [point["train_seconds"] for point in result["curve"]]
        for metric, colour in (("linear_probe", "tab:blue"), ("knn", "tab:orange"), ("zero_shot", "tab:green")):
            if metric in result["curve"][0]:
                ax.plot(
                    seconds,
                    [100 * point[metric] for point in result["curve"]],
                    marker="o",
                    color=colour,
                    label=metric.replace("_", " "),
                )
                ax.axhline(100 * result["untrained"][metric], color=colour, linestyle=":", linewidth=1)
        ax.axhline(
            100 * result["raw_pixels_linear_probe"],
            color="black",
            linestyle="--",
            linewidth=1,
            label="linear probe on raw pixels",
        )
        ax.plot([], [], color="gray", linestyle=":", label="untrained encoder (same metric)")
        ax.set_title(f"{name.replace('_', '-')}: accuracy against training time", fontsize=9)
        ax.set_xlabel("training wall-clock seconds (2 CPU cores)")
        ax.set_ylabel("test accuracy (%)")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7, loc="lower right")
    figure.savefig(path, dpi=110)
    print(f"wrote {path}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", nargs="+", choices=sorted(RUNS), default=list(RUNS))
    parser.add_argument(
        "--set",
        nargs="+",
        action="append",
        default=[],
        metavar=("RUN", "KEY=VALUE"),
        help="overrides of one run, e.g. --set image_text epochs=2",
    )
    parser.add_argument("--points", type=int, default=8, help="checkpoints measured per run (default: 8)")
    parser.add_argument("--probe-train", type=int, default=5000, help="probe training images (default: 5000)")
    parser.add_argument(
        "--out",
        type=Path,
        default=None,
        help="the JSON file (default: benchmarks/results/time_to_accuracy_<runs>.json)",
    )
    args = parser.parse_args()
    args.out = args.out or Path(f"benchmarks/results/time_to_accuracy_{'_'.join(args.runs)}.json")
    overrides = {name: [] for name in RUNS}
    for name, *items in args.set:
        if name not in RUNS:
            parser.error(f"argument --set: the run must be one of {', '.join(sorted(RUNS))}, got {name!r}")
        overrides[name] += items
    load_before = os.getloadavg()
    started = time.perf_counter()
    results = {}
    with tempfile.TemporaryDirectory(prefix="time-to-accuracy-") as work:
        for name in args.runs:
            results[name] = run_curve(name, overrides[name], args.points, args.probe_train, Path(work))
    settings = {
        "cores": len(os.sched_getaffinity(0)),
        "load_average_before": load_before,
        "load_average_after": os.getloadavg(),
        "wall_seconds": time.perf_counter() - started,
        "probe_train_images": args.probe_train,
    }
    write_report(args.out, "time_to_accuracy", settings, results)
    plot(results, args.out.with_suffix(".png"))


if __name__ == "__main__":
    main()
