"""An open_clip loop's calls of the loss under torchrun, for test_open_clip_call.py.

Under ``torchrun`` (``python open_clip_ranks.py OUT``) every process takes its share of one global batch, calls the
objectives as open_clip users do (the model's ``logit_scale`` and SigLIP's ``logit_bias``), and writes to
``OUT/rank{r}.pt`` what it got: the loss on its own pairs and its gradients with respect to the model's scale and
bias; the loss on the global batch it gathered itself, with ``gathered=True`` and without (the refusal's message);
and the loss in a process group of ranks 0 and the last only. The test compares them with one process's values on
the whole batch (:func:`global_batch`).
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

import torch
import torch.distributed as dist
from launch import COLLECTIVE_TIMEOUT

from uncurated import objectives

BATCH, DIM = 6, 5
SCALE, BIAS = 23.0, -3.5
"""Away from open_clip's initial values (1 / 0.07 and SigLIP's -10)."""
CASES = {"clip": {}, "siglip": {"learnable": False}, "dcl": {"tau_plus": 0.05}}


def global_batch() -> tuple[torch.Tensor, torch.Tensor]:
    """The whole batch: ``BATCH`` pairs of float64 features, the same on every process."""
    generator = torch.Generator().manual_seed(7)
    return tuple(torch.randn(BATCH, DIM, generator=generator, dtype=torch.float64) for _ in range(2))


def share(rank: int, world: int) -> slice:
    """Process ``rank``'s pairs: uneven shares where ``BATCH`` does not divide."""
    return slice(rank * BATCH // world, (rank + 1) * BATCH // world)


def model_parameters() -> tuple[torch.Tensor, torch.Tensor]:
    """The model's log scale (open_clip's ``logit_scale`` parameter, exp'd at the call) and SigLIP's bias."""
    log_scale = torch.tensor(math.log(SCALE), dtype=torch.float64, requires_grad=True)
    return log_scale, torch.tensor(BIAS, dtype=torch.float64, requires_grad=True)


def call(name: str, a: torch.Tensor, b: torch.Tensor, **options) -> tuple[float, list[float]]:
    """The loss of ``name`` at the model's scale (and bias, for SigLIP) and its gradients with respect to them."""
    log_scale, bias = model_parameters()
    objective = objectives.build(name, **CASES[name], **options.pop("build", {}))
    extra = (bias,) if name == "siglip" else ()
    value = objective(a, b, log_scale.exp(), *extra, output_dict=True, **options)["contrastive_loss"]
    gradients = torch.autograd.grad(value, (log_scale, *extra))
    return float(value.detach()), [float(g) for g in gradients]


def main(out: str) -> None:
    dist.init_process_group("gloo", timeout=COLLECTIVE_TIMEOUT)
    rank, world = dist.get_rank(), dist.get_world_size()
    try:
        a, b = global_batch()
        mine = share(rank, world)
        results: dict = {}
        for name in CASES:
            results[name, "own pairs"] = call(name, a[mine], b[mine])
            gathered_a, gathered_b = (_all_gather(x[mine]) for x in (a, b))
            results[name, "gathered"] = call(name, gathered_a, gathered_b, gathered=True)
            try:
                call(name, gathered_a, gathered_b)
                results[name, "gathered, no flag"] = "accepted"
            except ValueError as error:
                results[name, "gathered, no flag"] = str(error)
        pair = dist.new_group([0, world - 1])  # every process creates it; the middle ones stay out
        if rank in (0, world - 1):
            results["clip", "group"] = call("clip", a[share(rank, world)], b[share(rank, world)], build={"group": pair})
        torch.save(results, Path(out) / f"rank{rank}.pt")
    finally:
        dist.destroy_process_group()


def _all_gather(local: torch.Tensor) -> torch.Tensor:
    """open_clip's gather (without gradient): every process's rows, in rank order."""
    sizes = [torch.zeros(1, dtype=torch.long) for _ in range(dist.get_world_size())]
    dist.all_gather(sizes, torch.tensor([local.shape[0]]))
    longest = int(max(sizes))
    padded = torch.cat([local, local.new_zeros(longest - local.shape[0], local.shape[1])])
    parts = [torch.empty_like(padded) for _ in sizes]
    dist.all_gather(parts, padded)
    return torch.cat([part[: int(size)] for part, size in zip(parts, sizes, strict=True)])


if __name__ == "__main__":
    main(*sys.argv[1:])
