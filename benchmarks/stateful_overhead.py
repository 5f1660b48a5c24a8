"""Per-step cost of the global objectives (SogCLR, iSogCLR, NUCLR) relative to CLIP's loss.

Two measurements per batch size, each the median over repeated steps in one run:

* ``loss``: forward and backward of the objective alone on fixed features;
* ``step``: a whole training step of a small two-tower MLP (784 -> 512 -> 256
  per tower, AdamW) on synthetic inputs, the objective included.

Ratios are to CLIP (``infonce`` with a cross pairing) in the same run. Prints
a table and writes JSON (``--out``, default ``benchmarks/results/stateful_overhead.json``).

    python benchmarks/stateful_overhead.py --batch-sizes 256 1024
"""

from __future__ import annotations

import argparse
import functools
from collections.abc import Iterator
from pathlib import Path

import torch
from timing import median_seconds, write_report  # the sibling module benchmarks/timing.py
from torch import nn

from uncurated import objectives

NAMES = ("infonce", "sogclr", "isogclr", "nuclr")


def build(name: str, num_samples: int) -> nn.Module:
    if name == "infonce":
        return objectives.build("infonce")
    objective = objectives.build(name, num_samples=num_samples)
    objective.set_epoch(10)  # past NUCLR's frozen epochs: every update runs
    return objective


def call(objective: nn.Module, a: torch.Tensor, b: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    if isinstance(objective, objectives.StatefulObjective):
        return objective(a, b, index=index)
    return objective(a, b)


def loss_only(objective: nn.Module, features: torch.Tensor, batches: Iterator[torch.Tensor]) -> None:
    """The objective's forward and backward pass on fixed features."""
    a, b = (x.clone().requires_grad_(True) for x in features)
    call(objective, a, b, next(batches)).backward()


def training_step(
    objective: nn.Module,
    towers: nn.ModuleList,
    optimizer: torch.optim.Optimizer,
    inputs: torch.Tensor,
    batches: Iterator[torch.Tensor],
) -> None:
    """One optimizer step of two MLP towers through the objective."""
    optimizer.zero_grad()
    call(objective, towers[0](inputs[0]), towers[1](inputs[1]), next(batches)).backward()
    optimizer.step()


def measure(batch: int, dim: int, repeats: int, num_samples: int) -> dict:
    generator = torch.Generator().manual_seed(0)
    features = torch.randn(2, batch, dim, generator=generator)
    inputs = torch.randn(2, batch, 784, generator=generator)
    results = {}
    for name in NAMES:
        objective = build(name, num_samples)
        towers = nn.ModuleList(nn.Sequential(nn.Linear(784, 512), nn.ReLU(), nn.Linear(512, dim)) for _ in range(2))
        optimizer = torch.optim.AdamW(towers.parameters(), lr=1e-3)
        indices = iter(torch.randperm(num_samples, generator=generator).split(batch) for _ in range(10**6))
        batches = (index for epoch in indices for index in epoch if index.numel() == batch)
        results[name] = {
            "loss_seconds": median_seconds(functools.partial(loss_only, objective, features, batches), repeats),
            "step_seconds": median_seconds(
                functools.partial(training_step, objective, towers, optimizer, inputs, batches), repeats
            ),
        }
    for name in NAMES:
        for kind in ("loss", "step"):
            results[name][f"{kind}_ratio_to_clip"] = (
                results[name][f"{kind}_seconds"] / results["infonce"][f"{kind}_seconds"]
            )
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch-sizes", type=int, nargs="+", default=[256, 1024])
    parser.add_argument("--dim", type=int, default=256)
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--num-samples", type=int, default=60_000, help="dataset size of the per-sample state")
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/stateful_overhead.json"))
    args = parser.parse_args()
    torch.manual_seed(0)
    results_by_batch = {}
    print(f"{'B':>6} {'objective':>9} {'loss ms':>9} {'x CLIP':>7} {'step ms':>9} {'x CLIP':>7}")
    for batch in args.batch_sizes:
        results = measure(batch, args.dim, args.repeats, args.num_samples)
        results_by_batch[str(batch)] = results
        for name, row in results.items():
            print(
                f"{batch:>6} {name:>9} {1e3 * row['loss_seconds']:>9.2f} {row['loss_ratio_to_clip']:>7.2f} "
                f"{1e3 * row['step_seconds']:>9.2f} {row['step_ratio_to_clip']:>7.2f}",
                flush=True,
            )
    write_report(args.out, "stateful_overhead", {"dim": args.dim, "num_samples": args.num_samples}, results_by_batch)


if __name__ == "__main__":
    main()
