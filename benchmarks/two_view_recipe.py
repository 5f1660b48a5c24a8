"""Which two-view recipe learns fastest per CPU-second, in one run.

Two parts, because they answer different questions:

1. **Step cost.** One training step of the default two-view run (augment both
   views, the ResNet and its projection head, the objective, backward, AdamW)
   at its batch size, in float32, with channels_last, with bf16 autocast, with
   both, and under ``torch.compile``: the median wall and process-CPU seconds
   per step, and for bf16 the loss's difference from float32 on the same
   batch. These settings change what a step costs, not what it learns
   (bf16 up to its rounding).
2. **Learning.** Short runs of ``uncurated train`` (the bench's two-view base:
   InfoNCE at t = 0.5, batch 256) that vary one setting each: learning rate,
   batch size, the crop's scale, the encoder's width, the temperature. Each
   run's final encoder is read by the linear probe and the kNN classifier on
   three feature sets: the last stage pooled on a 2x2 grid (``encoder``), every
   stage so pooled (``stages``) and the projection head's output; beside them
   the same probes on the untrained encoder and on raw pixels.

Accuracy is on the whole Fashion-MNIST test split with ``--probe-train``
probe images; every run records its process CPU seconds, which shared cores
stretch less than wall time.

    python benchmarks/two_view_recipe.py                   # both parts
    python benchmarks/two_view_recipe.py --part cost

Writes ``benchmarks/results/two_view_recipe.json`` and ``.png`` (``--out``).
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import statistics
import tempfile
import time
from pathlib import Path

import torch
from timing import write_report  # the sibling module benchmarks/timing.py

import uncurated.data.augment as augment_module
from uncurated.evaluate import knn_classifier, linear_probe
from uncurated.train import train
from uncurated.train.builders import build_augmentation, build_model, build_objective, build_splits
from uncurated.train.config import load_config
from uncurated.train.evaluation import embed
from uncurated.train.random_state import seed_everything
from uncurated.train.restore import load_run

#: The bench's two-view base (its learning gate reads this run): InfoNCE, t = 0.5, batch 256, the default preset.
BASE = ("preset=fashion-mnist", "objective=simclr", "objective.temperature=0.5", "batch_size=256", "progress=false")

#: One setting changed per learning run (label -> overrides, or a crop scale under "crop_scale").
VARIANTS: dict[str, dict] = {
    "default (lr 2e-3, batch 256, crop 0.5-1, widths 16-32-64, t 0.5)": {},
    "lr 4e-3": {"overrides": ("lr=0.004",)},
    "batch 512, lr 4e-3": {"overrides": ("batch_size=512", "lr=0.004")},
    "crop 0.2-1": {"crop_scale": (0.2, 1.0)},
    "t 0.2": {"overrides": ("objective.temperature=0.2",)},
    "widths 32-64-128": {"overrides": ("widths=[32, 64, 128]",)},
}


#: The numeric settings of part 1: name -> (channels_last, bf16 autocast, torch.compile).
NUMERICS = {
    "float32": (False, False, False),
    "channels_last": (True, False, False),
    "bf16 autocast": (False, True, False),
    "channels_last + bf16": (True, True, False),
    "torch.compile": (False, False, True),
    "torch.compile + channels_last + bf16": (True, True, True),
}


def training_step(config, splits, images: torch.Tensor, channels_last: bool, bf16: bool, compiled: bool):
    """One step of the default two-view run under the given numeric settings, as a closure returning the loss."""
    seed_everything(0)
    model = build_model(config, splits.train)
    objective, augment = build_objective(config, splits.train), build_augmentation(config)
    memory_format = torch.channels_last if channels_last else torch.contiguous_format
    model = model.to(memory_format=memory_format)
    forward = torch.compile(model.embed_views) if compiled else model.embed_views
    optimizer = torch.optim.AdamW(model.parameters(), lr=config.lr)
    generator = torch.Generator().manual_seed(0)

    def step() -> float:
        first, second = (augment(images, generator).contiguous(memory_format=memory_format) for _ in range(2))
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            a, b = forward(first, second)
        loss = objective(a.float(), b.float())
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        return float(loss.detach())

    return step


def step_cost(repeats: int, threads: tuple[int, ...]) -> dict:
    """Part 1: the seconds of one training step under each numeric setting (see the module's documentation).

    The settings' timed steps are interleaved (one step of each in turn), so a change in the machine's load
    during the measurement falls on all of them alike.
    """
    config = load_config([*BASE, "train_subset=2048"])
    splits = build_splits(config)
    images = splits.train.batch(torch.arange(config.batch_size))["image"]
    default_threads = torch.get_num_threads()
    by_threads = {}
    for count in threads:
        torch.set_num_threads(count)
        steps, results = {}, {}
        for name, flags in NUMERICS.items():
            steps[name] = training_step(config, splits, images, *flags)
            started = time.perf_counter()
            first_loss = steps[name]()  # compiles, for torch.compile
            results[name] = {
                "first_step_seconds": time.perf_counter() - started,
                "first_loss": first_loss,
                "wall": [],
                "cpu": [],
            }
            steps[name]()
        for _ in range(repeats):
            for name, step in steps.items():
                wall, cpu = time.perf_counter(), time.process_time()
                step()
                results[name]["wall"].append(time.perf_counter() - wall)
                results[name]["cpu"].append(time.process_time() - cpu)
        base = statistics.median(results["float32"]["wall"])
        for name, value in results.items():
            wall, cpu = statistics.median(value.pop("wall")), statistics.median(value.pop("cpu"))
            value.update(
                wall_seconds_per_step=wall,
                cpu_seconds_per_step=cpu,
                speedup_over_float32=base / wall,
                first_loss_minus_float32=value["first_loss"] - results["float32"]["first_loss"],
            )
            print(f"[cost, {count} threads] {name}: {value}", flush=True)
        by_threads[str(count)] = results
    torch.set_num_threads(default_threads)
    return {"batch_size": config.batch_size, "repeats": repeats, "by_threads": by_threads}


def probes(model, batches, layer: str | None, seed: int) -> dict:
    """The linear probe and kNN accuracy of ``model``'s ``layer`` features (``None``: the projection head's)."""
    (train_batch, test_batch) = batches
    if layer is None:
        model.eval()
        with torch.no_grad():
            features = [
                torch.cat([model(images) for images in batch["image"].split(1024)])
                for batch in (train_batch, test_batch)
            ]
    else:
        features = [embed(model, batch["image"], torch.device("cpu"), layer) for batch in (train_batch, test_batch)]
    return {
        "linear_probe": linear_probe(
            features[0], train_batch["label"], features[1], test_batch["label"], seed=seed
        ).accuracy,
        "knn": knn_classifier(features[0], train_batch["label"], features[1], test_batch["label"]).accuracy,
    }


def read_all(model, batches, seed: int) -> dict:
    """:func:`probes` on the three feature sets the study compares."""
    return {
        name: probes(model, batches, layer, seed)
        for name, layer in (("encoder", "encoder"), ("stages", "stages"), ("projection", None))
    }


def learning(epochs: float, probe_train: int, work: Path) -> dict:
    """Part 2: one short run per variant, read on three feature sets (see the module's documentation)."""
    base = [*BASE, f"epochs={epochs}", f"probe_train_size={probe_train}", "probe_baselines=false"]
    config = load_config(base)
    splits = build_splits(config)
    chosen = torch.randperm(len(splits.train), generator=torch.Generator().manual_seed(0))[:probe_train]
    batches = splits.train.batch(chosen), splits.test.batch(torch.arange(len(splits.test)))
    pixels = linear_probe(
        batches[0]["image"].flatten(1), batches[0]["label"], batches[1]["image"].flatten(1), batches[1]["label"], seed=0
    ).accuracy
    seed_everything(config.seed)
    untrained = read_all(build_model(config, splits.train), batches, config.seed)
    print(f"[learning] pixels {pixels:.4f}, untrained {untrained}", flush=True)
    default_crop = augment_module.PRESETS["fashion-mnist"]
    runs = {}
    for label, variant in VARIANTS.items():
        name = f"v{len(runs)}"
        overrides = [*base, *variant.get("overrides", ()), f"name={name}", f"out={work}"]
        crop = variant.get("crop_scale")
        augment_module.PRESETS["fashion-mnist"] = (
            default_crop if crop is None else dataclasses.replace(default_crop, crop_scale=crop)
        )
        try:
            cpu = time.process_time()
            report = train(load_config(overrides))
            cpu = time.process_time() - cpu
        finally:
            augment_module.PRESETS["fashion-mnist"] = default_crop
        trained = load_run(work / name)
        runs[label] = {
            "overrides": overrides,
            "crop_scale": crop,
            "steps": report["steps"],
            "train_seconds": report["train_seconds"],
            "process_cpu_seconds_with_evaluation": cpu,
            "final": read_all(trained.model, batches, trained.config.seed),
        }
        print(f"[learning] {label}: {runs[label]['train_seconds']:.0f} s, {runs[label]['final']}", flush=True)
    return {
        "epochs": epochs,
        "probe_train_images": probe_train,
        "test_images": len(splits.test),
        "raw_pixels_linear_probe": pixels,
        "untrained": untrained,
        "runs": runs,
    }


def plot(results: dict, path: Path) -> None:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    figure = Figure(figsize=(12, 4.6), layout="constrained")
    FigureCanvasAgg(figure)
    left, right = figure.subplots(1, 2, width_ratios=(1, 2.2))
    if "cost" in results:
        names = list(NUMERICS)
        height = 0.8 / len(results["cost"]["by_threads"])
        for offset, (count, settings) in enumerate(results["cost"]["by_threads"].items()):
            left.barh(
                [i + offset * height for i in range(len(names))],
                [settings[name]["speedup_over_float32"] for name in names],
                height,
                label=f"{count} thread{'s' if count != '1' else ''}",
            )
        left.set_yticks([i + 0.4 - height / 2 for i in range(len(names))], names)
        left.invert_yaxis()
        left.legend(fontsize=7)
        left.axvline(1.0, color="black", linewidth=1)
        left.set_xlabel(f"speedup of a training step over float32 (batch {results['cost']['batch_size']})")
        left.set_title("step cost: medians of interleaved steps, one invocation per thread count", fontsize=9)
        left.tick_params(axis="y", labelsize=7)
    if "learning" in results:
        learning_results = results["learning"]
        labels = list(learning_results["runs"])
        width = 0.27
        for offset, (layer, colour) in enumerate(
            (("encoder", "tab:blue"), ("stages", "tab:orange"), ("projection", "tab:green"))
        ):
            values = [100 * learning_results["runs"][label]["final"][layer]["linear_probe"] for label in labels]
            right.bar(
                [i + (offset - 1) * width for i in range(len(labels))],
                values,
                width,
                color=colour,
                label=f"probe on {layer}",
            )
            right.axhline(
                100 * learning_results["untrained"][layer]["linear_probe"], color=colour, linestyle=":", linewidth=1
            )
        right.axhline(
            100 * learning_results["raw_pixels_linear_probe"],
            color="black",
            linestyle="--",
            linewidth=1,
            label="raw pixels",
        )
        right.plot([], [], color="gray", linestyle=":", label="untrained encoder (same features)")
        right.set_xticks(
            range(len(labels)), [label.split(" (")[0] for label in labels], rotation=30, ha="right", fontsize=7
        )
        low = min(100 * learning_results["raw_pixels_linear_probe"], 70)
        right.set_ylim(low - 2, 92)
        right.set_ylabel("linear probe, test accuracy (%)")
        right.set_title(f"learning: {learning_results['epochs']} epochs of InfoNCE each", fontsize=9)
        right.legend(fontsize=7, loc="upper left", ncols=3)
    figure.savefig(path, dpi=110)
    print(f"wrote {path}")


def timed_part(part) -> dict:
    """``part()``'s results with its wall seconds and the load average before and after (shared cores)."""
    load_before, started = os.getloadavg(), time.perf_counter()
    results = part()
    return {
        **results,
        "wall_seconds": time.perf_counter() - started,
        "load_average_before": load_before,
        "load_average_after": os.getloadavg(),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--part", choices=("cost", "learning", "both"), default="both")
    parser.add_argument("--repeats", type=int, default=10, help="timed steps per setting (default: 10)")
    parser.add_argument(
        "--threads",
        type=int,
        nargs="+",
        default=[1, torch.get_num_threads()],
        help="torch threads of the cost part (default: 1 and torch's default)",
    )
    parser.add_argument("--epochs", type=float, default=1.0, help="epochs of each learning run (default: 1)")
    parser.add_argument("--probe-train", type=int, default=5000, help="probe training images (default: 5000)")
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/two_view_recipe.json"))
    args = parser.parse_args()
    started = time.perf_counter()
    results = {}
    if args.part in ("cost", "both"):
        results["cost"] = timed_part(lambda: step_cost(args.repeats, tuple(args.threads)))
    if args.part in ("learning", "both"):
        with tempfile.TemporaryDirectory(prefix="two-view-recipe-") as work:
            results["learning"] = timed_part(lambda: learning(args.epochs, args.probe_train, Path(work)))
    settings = {"cores": len(os.sched_getaffinity(0)), "wall_seconds": time.perf_counter() - started}
    write_report(args.out, "two_view_recipe", settings, results)
    plot(results, args.out.with_suffix(".png"))


if __name__ == "__main__":
    main()
