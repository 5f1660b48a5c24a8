"""What NUCLR's column statistic costs a training step on the Python tiles.

NUCLR learning its popularities (``freeze_epochs=0``) accumulates, in the
backward pass of its fused pass, the column statistic of the popularity
update (Wang et al. 2025, Eq. 14); frozen (epoch 1 of ``freeze_epochs=5``) it does not.
The difference of the two step times (forward + backward, cross pairing,
``tiling="always"``, float32 unit vectors, one torch thread) is the
statistic's cost. Each time is the fastest of repeats (on a shared machine the
median moves with the load far more than the minimum does), the two phases
alternating from repeat to repeat; the load average at the start and the end is
recorded.

Writes ``benchmarks/results/nuclr_column_cost.json``.

    python benchmarks/nuclr_column_cost.py                  # B in {1024, 4096}, d = 256
    python benchmarks/nuclr_column_cost.py --batches 512 --repeats 3
"""

from __future__ import annotations

import argparse
import os
import time
from collections.abc import Callable
from pathlib import Path

import torch
from timing import write_report  # the sibling module benchmarks/timing.py

from uncurated import objectives

PHASES = {"learning": {"freeze_epochs": 0}, "frozen": {"freeze_epochs": 5}}


def training_step(batch: int, dim: int, phase: str) -> Callable[[], None]:
    """One training call and its backward pass."""
    generator = torch.Generator().manual_seed(0)
    a = torch.nn.functional.normalize(torch.randn(batch, dim, generator=generator), dim=1).requires_grad_(True)
    b = torch.nn.functional.normalize(torch.randn(batch, dim, generator=generator), dim=1).requires_grad_(True)
    index = torch.arange(batch)
    loss = objectives.build("nuclr", num_samples=4 * batch, tiling="always", **PHASES[phase])
    loss.set_epoch(1.0)

    def step() -> None:
        loss.begin_step()
        value = loss(a, b, index=index)
        value.backward()
        a.grad = b.grad = None

    return step


def fastest_seconds(batch: int, dim: int, repeats: int) -> dict[str, float]:
    """The fastest time of each phase's step over ``repeats``, the phases alternating, after one untimed each."""
    steps = {phase: training_step(batch, dim, phase) for phase in PHASES}
    times: dict[str, list[float]] = {phase: [] for phase in PHASES}
    for step in steps.values():
        step()
    for _ in range(repeats):
        for phase, step in steps.items():
            start = time.perf_counter()
            step()
            times[phase].append(time.perf_counter() - start)
    return {phase: min(values) for phase, values in times.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", type=int, nargs="+", default=[1024, 4096])
    parser.add_argument("--dim", type=int, default=256)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--note", default="", help="what was measured (the commit, say)")
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results" / "nuclr_column_cost.json")
    args = parser.parse_args()
    torch.set_num_threads(1)
    load_start, start = os.getloadavg()[0], time.time()
    results = []
    for batch in args.batches:
        times = fastest_seconds(batch, args.dim, args.repeats)
        row = {"batch": batch, **{f"{phase}_seconds": t for phase, t in times.items()}}
        row["column_statistic_share"] = times["learning"] / times["frozen"] - 1.0
        print(row)
        results.append(row)
    settings = {
        "dim": args.dim,
        "repeats": args.repeats,
        "note": args.note,
        "load_average_start": load_start,
        "load_average_end": os.getloadavg()[0],
        "seconds": round(time.time() - start),
    }
    write_report(args.out, "nuclr_column_cost", settings, results)


if __name__ == "__main__":
    main()
