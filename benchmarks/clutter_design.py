"""Which Fashion-MNIST-in-clutter design makes a short InfoNCE run beat raw pixels and an untrained encoder.

On plain Fashion-MNIST at CPU budgets the bench's learning gate fails: the
linear probe on InfoNCE's encoder does not beat the probe on raw pixels or
on the untrained encoder. ``dataset=fashion-clutter``
(``uncurated.data.fashion_clutter``) places each garment at a random
position, scale and colour on a background; this script renders a few
candidate backgrounds and, for each, runs ``uncurated train`` with the quick
bench preset's two-view budget (InfoNCE at t = 0.5, batch 256, 6,000
training images for 2 epochs, a 2,000-image probe training set, every stage
pooled on a 2x2 grid, a stratified 2,000 of the test images), reading the
package's linear probe on the trained encoder, on the untrained encoder and
on raw pixels (``probe_baselines``).

    python benchmarks/clutter_design.py                          # every design, seed 0
    python benchmarks/clutter_design.py --designs patches --seeds 0 1 2

Writes ``benchmarks/results/clutter_design.json`` (``--out``); with
``--merge`` the runs are added to an existing file's. ``--samples PNG``
instead draws the first test images of the default design, one row per class.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace

import torch
from timing import write_report  # the sibling module benchmarks/timing.py

import uncurated.data.fashion_clutter as clutter
from uncurated.bench.runner import prepare_data
from uncurated.train import train
from uncurated.train.config import load_config

#: The candidates: name -> design. ``patches`` is the dataset's default.
DESIGNS = {
    "patches": clutter.ClutterDesign(background="patches", background_strength=0.5),
    "noise": clutter.ClutterDesign(background="noise", background_strength=0.6),
    "plain": clutter.ClutterDesign(background="plain", background_strength=0.5),
}

#: The quick bench preset's two-view budget, on the new dataset, with InfoNCE (the gate's run).
BASE = (
    "preset=fashion-clutter",
    "objective=simclr",
    "objective.temperature=0.5",
    "probe_layer=stages",
    "batch_size=256",
    "train_subset=6000",
    "epochs=2",
    "probe_train_size=2000",
    "progress=false",
    "log_every=10",
)

TEST_SIZE = 2000


def one_run(design: str, seed: int, data_dir: Path, work: Path, overrides: tuple[str, ...]) -> dict:
    """One InfoNCE run on ``design``'s rendering: the probe on its encoder, the untrained one and pixels."""
    clutter.DEFAULT_DESIGN = DESIGNS[design]
    name = f"{design}-s{seed}"
    config = load_config([*BASE, *overrides, f"seed={seed}", f"data_dir={data_dir}", f"name={name}", f"out={work}"])
    load_before, wall, cpu = os.getloadavg(), time.perf_counter(), time.process_time()
    report = train(config)
    probe = report["evaluation"]["linear_probe"]
    result = {
        "design": design,
        "seed": seed,
        "overrides": list(overrides),
        "threads": torch.get_num_threads(),
        "raw_pixels": probe["raw_pixels_accuracy"],
        "untrained": probe["untrained_accuracy"],
        "infonce": probe["accuracy"],
        "steps": report["steps"],
        "train_seconds": report["train_seconds"],
        "run_wall_seconds_with_rendering_and_evaluation": time.perf_counter() - wall,
        "process_cpu_seconds": time.process_time() - cpu,
        "load_average_before": load_before,
        "load_average_after": os.getloadavg(),
    }
    result["margin_over_best_baseline"] = result["infonce"] - max(result["raw_pixels"], result["untrained"])
    print(f"[clutter] {json.dumps(result)}", flush=True)
    return result


def summarize(runs: list[dict]) -> dict:
    """Per design: the seeds, and the mean and sample standard deviation of each probe and of the margin."""
    summary = {}
    for design in dict.fromkeys(run["design"] for run in runs):
        chosen = [run for run in runs if run["design"] == design]
        summary[design] = {"seeds": [run["seed"] for run in chosen]}
        for key in ("raw_pixels", "untrained", "infonce", "margin_over_best_baseline"):
            values = [run[key] for run in chosen]
            spread = statistics.stdev(values) if len(values) > 1 else None
            summary[design][key] = {"mean": statistics.fmean(values), "sd": spread}
    return summary


def draw_samples(path: Path, per_class: int = 8, zoom: int = 2) -> None:
    """The first ``per_class`` test images of each class of the default design, one row per class, as a PNG."""
    import numpy as np
    from PIL import Image

    test = clutter.fashion_clutter_dataset(split="test")
    labels, images = test.labels.numpy(), test.images.numpy().transpose(0, 2, 3, 1)
    rows = [np.concatenate(list(images[np.flatnonzero(labels == label)[:per_class]]), axis=1) for label in range(10)]
    grid = np.concatenate(rows, axis=0)
    picture = Image.fromarray(grid).resize((grid.shape[1] * zoom, grid.shape[0] * zoom), Image.NEAREST)
    path.parent.mkdir(parents=True, exist_ok=True)
    picture.quantize(256).save(path, optimize=True)  # a 256-colour palette: a third of the file
    print(f"wrote {path}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--designs", nargs="+", choices=sorted(DESIGNS), default=list(DESIGNS))
    parser.add_argument("--seeds", nargs="+", type=int, default=[0])
    parser.add_argument("--set", nargs="*", default=[], help="extra key=value overrides of every run")
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/clutter_design.json"))
    parser.add_argument("--merge", action="store_true", help="add the runs to those already in --out")
    parser.add_argument("--samples", type=Path, help="draw the sample grid to this PNG and stop")
    args = parser.parse_args()
    if args.samples:
        draw_samples(args.samples)
        return
    started = time.perf_counter()
    runs = json.loads(args.out.read_text())["results"]["runs"] if args.merge and args.out.exists() else []
    with tempfile.TemporaryDirectory(prefix="clutter-design-") as work:
        data_dir, described = prepare_data(SimpleNamespace(test_size=TEST_SIZE), Path(work) / "data", None)
        for design in args.designs:
            for seed in args.seeds:
                runs.append(one_run(design, seed, data_dir, Path(work) / "runs", tuple(args.set)))
    settings = {
        "cores": len(os.sched_getaffinity(0)),
        "omp_num_threads": os.environ.get("OMP_NUM_THREADS"),
        "wall_seconds": time.perf_counter() - started,
        "base": list(BASE),
        "data": described,
        "designs": {name: vars(design) for name, design in DESIGNS.items()},
        "generator_version": clutter.GENERATOR_VERSION,
    }
    write_report(args.out, "clutter_design", settings, {"runs": runs, "summary": summarize(runs)})


if __name__ == "__main__":
    main()
