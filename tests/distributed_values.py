"""Values that processes sharing a batch must get right, computed under torchrun for test_distributed_values.py.

Under ``torchrun`` (``python distributed_values.py OUT``) every process runs each check of :data:`CHECKS` on its
share and writes what it got to ``OUT/rank{r}.pt``; the test compares that with one process's computation or an
exact invariant. Alone, :func:`authors_xi_run` trains on the whole batch: the one-process reference.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from launch import COLLECTIVE_TIMEOUT

from uncurated.objectives import NUCLR, InfoNCE, SogCLR
from uncurated.process.shard import process_shard
from uncurated.train.distributed import Distributed

COUNTS = (3, 2)
"""Pairs of each of the two processes in the gather checks: uneven, so the gather pads."""
SAMPLES, DIM = 8, 4
XI_EPOCHS = (0.0, 0.5, 1.0, 2.0)
"""The epochs of the steps of :func:`authors_xi_run`: two whole-epoch boundaries, and a step within an epoch."""
XI_OPTIONS: dict[str, Any] = {
    "temperature": 0.2,
    "zeta_init": -1.0,
    "xi_init": -1.0,
    "zeta_lr": 2.0,
    "freeze_epochs": 0,
}
"""Popularities start below zero and xi with them, so that xi = max(xi_0, max zeta) is neither xi_0 nor 0."""


def place() -> tuple[int, int]:
    return (dist.get_rank(), dist.get_world_size()) if dist.is_initialized() else (0, 1)


def rows(rank: int, counts: tuple[int, ...]) -> slice:
    return slice(sum(counts[:rank]), sum(counts[: rank + 1]))


def gather_inputs() -> dict[str, torch.Tensor]:
    """The global batch (5, 3) and, for each process r, the weights of its loss ``|X M_r|^2 + <V_r, X_r>``."""
    generator = torch.Generator().manual_seed(7)
    batch = sum(COUNTS)
    return {
        "x": torch.randn(batch, 3, generator=generator, dtype=torch.float64),
        "m": torch.randn(len(COUNTS), 3, 2, generator=generator, dtype=torch.float64),
        "v": torch.randn(batch, 3, generator=generator, dtype=torch.float64),
    }


def gather_gradient() -> torch.Tensor:
    """This process's rows of X: the gradient of its loss, which reads the whole batch through the gather."""
    rank, _ = place()
    inputs, mine = gather_inputs(), rows(rank, COUNTS)
    local = inputs["x"][mine].clone().requires_grad_(True)
    shard = process_shard(local.shape[0], True, local.device)
    assert shard is not None
    everyone = shard.gather(local)
    loss = (everyone @ inputs["m"][rank]).square().sum() + (inputs["v"][mine] * local).sum()
    loss.backward()
    assert local.grad is not None
    return local.grad


def infonce_inputs() -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(11)
    batch = sum(COUNTS)
    a = torch.randn(batch, DIM, generator=generator, dtype=torch.float64)
    return a, torch.randn(batch, DIM, generator=generator, dtype=torch.float64)


def infonce_gradient() -> tuple[torch.Tensor, torch.Tensor]:
    """CLIP's loss on this process's pairs, the candidates gathered: its gradient for this process's rows."""
    rank, _ = place()
    a, b = (x[rows(rank, COUNTS)].clone().requires_grad_(True) for x in infonce_inputs())
    InfoNCE(0.3)(a, b).backward()
    assert a.grad is not None and b.grad is not None
    return a.grad, b.grad


def average() -> torch.Tensor:
    rank, world = place()
    return Distributed(rank=rank, world_size=world).average(torch.tensor([rank + 1.0, 10.0 * (rank + 1), -rank]))


def authors_xi_run() -> list[dict]:
    """NUCLR with the authors' xi, on full batches of fixed features, one step at each of :data:`XI_EPOCHS`: for
    each step, xi and this process's rows of zeta as ``set_epoch`` left them (the first index of its rows, the
    rows), then the loss."""
    rank, world = place()
    generator = torch.Generator().manual_seed(3)
    a_all, b_all = (torch.randn(SAMPLES, DIM, generator=generator, dtype=torch.float64) for _ in range(2))
    objective = NUCLR(SAMPLES, xi_rule="authors", tiling="never", **XI_OPTIONS)
    share = rows(rank, (SAMPLES // world,) * world)
    steps = []
    for epoch in XI_EPOCHS:
        objective.set_epoch(epoch)
        record: dict[str, Any] = {"xi": objective.state.scalar_values()}
        for side in "ab":
            record[side] = (objective.state.range(side)[0], objective.state.tensors["zeta", side].clone())
        index = torch.randperm(SAMPLES, generator=generator)[share]
        objective.begin_step()
        loss = objective(a_all[index], b_all[index], index=index)
        record["loss"] = float(Distributed(rank=rank, world_size=world).average(loss.detach()))
        steps.append(record)
    return steps


def index_beyond_side_b() -> dict:
    """A shared index within side a's 9 samples but beyond side b's 5, passed by process 1: what each process
    raised, and whether its state rows changed."""
    rank, _ = place()
    objective = SogCLR((9, 5))
    before = {key: tensor.clone() for key, tensor in objective.state.tensors.items()}
    generator = torch.Generator().manual_seed(5)
    a, b = (torch.randn(2, DIM, generator=generator) for _ in range(2))
    index = torch.tensor([0, 1]) if rank == 0 else torch.tensor([2, 7])
    try:
        objective(a, b, index=index)
        raised = None
    except ValueError as error:
        raised = str(error)
    unchanged = all(torch.equal(tensor, before[key]) for key, tensor in objective.state.tensors.items())
    return {"raised": raised, "unchanged": unchanged}


CHECKS = {
    "gather_gradient": gather_gradient,
    "infonce_gradient": infonce_gradient,
    "average": average,
    "authors_xi": authors_xi_run,
    "index_beyond_side_b": index_beyond_side_b,
}


def main(out: str) -> None:
    dist.init_process_group("gloo", timeout=COLLECTIVE_TIMEOUT)
    try:
        results = {name: check() for name, check in CHECKS.items()}
        torch.save(results, Path(out) / f"rank{dist.get_rank()}.pt")
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    main(*sys.argv[1:])
