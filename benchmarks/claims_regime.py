"""Whether the claims preset's image-text regime lets NUCLR's and SogCLR's mechanisms act, measured on its runs.

The bench's ``claims`` preset trains its image-text arms on 5,760 FashionCaptions pairs for 12 epochs at batch
64 and t 0.07 so that each sample's u is updated 12 times and NUCLR's zeta 10 times (Wang et al. 2025 freeze
zeta for 5 of 30 epochs; the preset for 2 of 12). This script trains the named runs of that preset, with a
stratified 2,000 of the test images instead of all 10,000 to save their evaluation, and records for each its
zero-shot top-1, its linear probe against the untrained encoder (the learning gate's), the updates of u and
zeta per sample and, for NUCLR, the spread of zeta / t across samples (5th to 95th percentile, the manipulation
check's figure) and its Spearman correlation with the classes' share of the pairs.

    python benchmarks/claims_regime.py it-noisy-nuclr-seed0 it-noisy-sogclr-seed0 it-clean-clip-seed0

Writes ``benchmarks/results/claims_regime.json`` (``--out``), adding to the runs already there.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import tempfile
import time
from pathlib import Path

import torch

from uncurated.bench import PRESETS, plan_runs
from uncurated.bench.manipulation import state_updates, zeta_reading
from uncurated.bench.runner import execute_run, prepare_data
from uncurated.train import train

TEST_IMAGES = 2000


def measure(name: str, folder: Path, root: Path | None, preset) -> dict:
    spec = next(run for run in plan_runs(preset, ("image_text",)) if run.name == name)
    started = time.perf_counter()
    outcome = execute_run(spec, folder / "runs", root, "cpu", train)
    evaluation = outcome.report["evaluation"]
    row = {
        "run": name,
        "seconds": time.perf_counter() - started,
        "steps": outcome.report["steps"],
        "train_samples": outcome.report["train_samples"],
        "zero_shot_top1": evaluation["zero_shot"]["accuracy"],
        "linear_probe": evaluation["linear_probe"]["accuracy"],
        "untrained_probe": evaluation["linear_probe"].get("untrained_accuracy"),
        "u_updates": state_updates(outcome.report, "u"),
    }
    if spec.arm.objective_key == "nuclr":
        reading = zeta_reading(outcome.report) or {}
        row.update(
            zeta_updates=state_updates(outcome.report, "zeta"),
            zeta_spread_logits=reading.get("spread_logits"),
            zeta_spread_by_side=reading.get("spread_logits_by_side"),
            zeta_spearman_with_class_share=reading.get("spearman"),
        )
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("runs", nargs="+", help="run names of the claims preset's image-text suite")
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results" / "claims_regime.json")
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    preset = dataclasses.replace(PRESETS["claims"], test_size=TEST_IMAGES)
    saved = json.loads(args.out.read_text()) if args.out.is_file() else {"runs": []}
    with tempfile.TemporaryDirectory() as scratch:
        folder = Path(scratch)
        root, _ = prepare_data(preset, folder / "data", None)
        for name in args.runs:
            row = measure(name, folder, root, preset)
            print(json.dumps(row), flush=True)
            saved["runs"] = [old for old in saved["runs"] if old["run"] != name] + [row]
    saved["settings"] = {"preset": "claims", "test_images": TEST_IMAGES, "threads": args.threads}
    args.out.write_text(json.dumps(saved, indent=2) + "\n")


if __name__ == "__main__":
    main()
