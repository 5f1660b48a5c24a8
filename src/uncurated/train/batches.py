"""Which samples form each batch: a seeded, resumable plan over a dataset.

Each epoch is a permutation of the dataset drawn from ``(seed, epoch)``
alone, cut into ``len // batch_size`` global batches (the incomplete last one
is dropped, so every step sees ``batch_size`` samples). A position is
``(epoch, batch)``; resuming there replays nothing and skips nothing. Under
``torchrun`` every rank computes the same plan and loads its own slice of
each global batch.

Streamed data (webdataset shards) has no length and no random access: an
epoch is ``steps_per_epoch`` batches read in order, each rank reading its own
shards, and resuming mid-epoch reads the epoch's first batches again without
training on them. A rank whose shards hold fewer batches ends the epoch
early, and the trainer ends it on every rank with it, so that the ranks stay
in the same epoch.

Every epoch's ``DataLoader`` draws from its own generator, seeded by the
run's seed, the process's rank and the epoch
(:func:`~uncurated.train.random_state.loader_generator`): starting it leaves
the process's generators (the augmentations') untouched, its workers' seeds
differ per rank, worker and epoch, and a resumed epoch's loader starts as the
uninterrupted one's did.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Iterator
from dataclasses import dataclass

import torch
from torch import Tensor
from torch.utils.data import DataLoader

from ..data import WebDatasetShards, collate_samples
from .distributed import Distributed
from .random_state import loader_generator


@dataclass(frozen=True)
class BatchPlan:
    """Global batches of dataset indices for every epoch."""

    size: int
    batch_size: int
    seed: int

    def __post_init__(self) -> None:
        if self.batch_size < 2:
            raise ValueError(f"batch_size must be at least 2, got {self.batch_size}")
        if self.size < self.batch_size:
            raise ValueError(f"batch_size ({self.batch_size}) must not exceed the dataset size ({self.size})")

    @property
    def steps_per_epoch(self) -> int:
        return self.size // self.batch_size

    def epoch(self, epoch: int) -> Tensor:
        """(steps_per_epoch, batch_size) dataset indices of the epoch's global batches."""
        generator = torch.Generator().manual_seed(self.seed * 1_000_003 + epoch)
        order = torch.randperm(self.size, generator=generator)
        return order[: self.steps_per_epoch * self.batch_size].view(self.steps_per_epoch, self.batch_size)


def load_batches(
    dataset, plan: BatchPlan, epoch: int, start: int, context: Distributed, *, workers: int = 0
) -> Iterator[dict]:
    """This rank's slice of the epoch's batches from batch ``start`` on, loaded from ``dataset``.

    A dataset with a ``batch(indices)`` method (data held in memory) is
    indexed directly; any other map-style dataset goes through a
    ``DataLoader`` whose collate function drops the items it could not read
    and reports them under the batch's ``"skips"`` key, its generator seeded by ``plan.seed``, the rank and the
    epoch (its workers' seeds: the module's documentation).
    """
    share = context.local_slice(plan.batch_size)
    batches = [indices[share] for indices in plan.epoch(epoch)[start:]]
    _forget_earlier_skips(dataset)
    if hasattr(dataset, "batch"):
        for indices in batches:
            yield pinned(dataset.batch(indices), context.device)
        return
    loader = DataLoader(
        dataset,
        batch_sampler=[b.tolist() for b in batches],
        num_workers=workers,
        pin_memory=context.device.type == "cuda",
        collate_fn=_collate(dataset),
        generator=loader_generator(plan.seed, context.rank, epoch),
    )
    yield from loader


def stream_batches(
    dataset: WebDatasetShards,
    batch_size: int,
    steps: int,
    epoch: int,
    start: int,
    context: Distributed,
    *,
    workers: int = 0,
) -> Iterator[dict]:
    """Batches ``start .. steps - 1`` of an epoch of streamed data, this rank's share of each; the loader's
    generator is seeded by the dataset's seed (the run's), the rank and the epoch (the module's documentation)."""
    dataset.set_epoch(epoch)
    _forget_earlier_skips(dataset)
    local = batch_size // context.world_size
    loader = DataLoader(
        dataset,
        batch_size=local,
        num_workers=workers,
        pin_memory=context.device.type == "cuda",
        collate_fn=_collate(dataset),
        generator=loader_generator(dataset.seed, context.rank, epoch),
    )
    for number, batch in enumerate(loader):
        if number >= steps:
            return
        if number >= start:
            yield batch


def pinned(batch: dict, device: torch.device) -> dict:
    """The batch's host tensors in pinned memory when they go to a CUDA device (so that their copies there run
    asynchronously, ``non_blocking``); data already on a device, and batches for the CPU, are left as they are."""
    if device.type != "cuda":
        return batch
    return {
        key: value.pin_memory() if isinstance(value, torch.Tensor) and value.device.type == "cpu" else value
        for key, value in batch.items()
    }


def _forget_earlier_skips(dataset) -> None:
    """Start the dataset's report afresh, so that the batches carry only the skips of their own items.

    Items read before the loop (a first sample to size the model, say) stay
    in the report's totals but must not be counted again with the first batch.
    """
    report = getattr(dataset, "report", None)
    if report is not None:
        report.drain()


def _collate(dataset):
    return functools.partial(collate_samples, report=getattr(dataset, "report", None))


def report_short_epoch(read: int, steps_per_epoch: int, epoch: int, context: Distributed) -> None:
    """Say that an epoch of streamed data ended after ``read`` of ``steps_per_epoch`` batches, and why."""
    if read < steps_per_epoch and context.is_main:
        several = (
            " on a process; every process ends the epoch there, the samples left in the others' shards unread"
            if context.enabled
            else ""
        )
        print(
            f"epoch {epoch}: the shards ran out after {read} of steps_per_epoch = {steps_per_epoch} batches{several}",
            file=sys.stderr,
            flush=True,
        )
