"""The distributed-correctness cases: a few float64 training steps of one objective, by one process or several.

Alone (``run_case``) it trains on the whole global batch; under ``torchrun`` (``python distributed_cases.py OUT
CASES_JSON``) every process trains on its share of each global batch with the objective gathering the rest, the
model wrapped in ``DistributedDataParallel`` (and the objective too, where it learns something), and writes what
it saw to ``OUT/rank{r}.pt``: the losses averaged over the processes, the model's and the objective's gradients
of every step, and its rows of the per-sample state. ``tests/test_distributed_matrix.py`` compares the two.
"""

from __future__ import annotations

import gc
import json
import sys
from pathlib import Path

import torch
import torch.distributed as dist
from launch import COLLECTIVE_TIMEOUT
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from uncurated import objectives
from uncurated.similarity import WeightedPointSet, WPSEmbedding
from uncurated.train.gradient_cache import GradientCache
from uncurated.train.parallel import buffers_unsynced

BATCH, SAMPLES, STEPS, DIM_IN = 8, 24, 3, 6
UNEVEN = {1: (8,), 2: (5, 3), 4: (3, 2, 1, 2)}
"""Pairs per process when some process could not read all of its share (``"uneven": True``)."""


class Towers(nn.Module):
    """One float64 MLP for both sides (LayerNorm, so samples are independent); optionally WPSE point sets."""

    def __init__(self, wpse: bool) -> None:
        super().__init__()
        torch.manual_seed(0)
        out = 12 if wpse else 5
        self.net = nn.Sequential(nn.Linear(DIM_IN, 16), nn.LayerNorm(16), nn.Tanh(), nn.Linear(16, out)).double()
        self.wpse = WPSEmbedding(train_features=8, seed=3) if wpse else None

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        a, b = self.net(torch.cat([x, y])).chunk(2)
        if self.wpse is None:
            return a, b
        sets = [WeightedPointSet(torch.full((len(z), 4), 0.25, dtype=z.dtype), z.view(len(z), 4, 3)) for z in (a, b)]
        return self.wpse(*sets)


def build_objective(case: dict) -> nn.Module:
    params = dict(case.get("params", {}))
    if objectives.OBJECTIVES[case["objective"]].defaults().get("num_samples") is not None:
        params["num_samples"] = SAMPLES
    if case["objective"] == "nuclr":
        params.setdefault("freeze_epochs", 0)  # zeta moves from the first step
    if case.get("wpse"):
        params["normalize"] = False
    return objectives.build(case["objective"], **params).double()


def step_data(step: int) -> dict[str, torch.Tensor]:
    generator = torch.Generator().manual_seed(100 + step)
    return {
        "x": torch.randn(BATCH, DIM_IN, generator=generator, dtype=torch.float64),
        "y": torch.randn(BATCH, DIM_IN, generator=generator, dtype=torch.float64),
        "index": torch.randperm(SAMPLES, generator=generator)[:BATCH],
        "labels": torch.arange(BATCH) % 3,
    }


def run_case(case: dict) -> dict:
    """Train ``case`` for ``STEPS`` steps on this process's share of each batch (the whole batch alone)."""
    world = dist.get_world_size() if dist.is_initialized() else 1
    rank = dist.get_rank() if dist.is_initialized() else 0
    counts = UNEVEN[world] if case.get("uneven") else (BATCH // world,) * world
    rows = slice(sum(counts[:rank]), sum(counts[: rank + 1]))
    model, objective = Towers(bool(case.get("wpse"))), build_objective(case)
    learns = any(p.requires_grad for p in objective.parameters())
    trained_model, trained_objective = model, objective
    if world > 1:
        trained_model = DistributedDataParallel(model)
        if learns:
            trained_objective = DistributedDataParallel(objective, **buffers_unsynced())
    parameters = [*model.parameters(), *objective.parameters()]
    optimizer = torch.optim.SGD(parameters, lr=0.5)
    losses, gradients = [], []
    for step in range(STEPS):
        data = step_data(step)
        x, y, index = data["x"][rows], data["y"][rows], data["index"][rows]
        inputs = {"index": index}
        if case.get("labels"):
            inputs["labels"] = data["labels"][rows]
        objective.set_epoch(step / STEPS)
        objective.begin_step()
        optimizer.zero_grad(set_to_none=True)
        if case.get("micro"):
            cache = GradientCache(trained_model, case["micro"])
            a, b = cache.embed(lambda part, x=x, y=y: trained_model(x[part], y[part]), len(x))
            a.requires_grad_()
            b.requires_grad_()
            loss = trained_objective(a, b, **inputs)
            loss.backward()
            cache.backward(a.grad, b.grad)
        else:
            a, b = trained_model(x, y)
            loss = trained_objective(a, b, **inputs)
            loss.backward()
        value = loss.detach().clone()
        if world > 1:
            dist.all_reduce(value)
            value /= world
        losses.append(float(value))
        gradients.append({f"{k}": p.grad.clone() for k, p in enumerate(parameters) if p.grad is not None})
        optimizer.step()
    state = objective.state.get_extra_state() if isinstance(objective, objectives.StatefulObjective) else None
    return {"losses": losses, "gradients": gradients, "state": state}


def main(out: str, cases: str) -> None:
    dist.init_process_group("gloo", timeout=COLLECTIVE_TIMEOUT)
    try:
        results = {name: run_case(case) for name, case in json.loads(cases).items()}
        torch.save(results, Path(out) / f"rank{dist.get_rank()}.pt")
    finally:
        gc.collect()  # the DDP wrappers sit in reference cycles that hold the group: freed at exit, gloo may abort
        dist.destroy_process_group()


if __name__ == "__main__":
    main(*sys.argv[1:])
