"""This process's share of a global batch, and the collectives an objective uses to see the rest of it.

Under an initialized process group of ``W`` processes (``torchrun``), every
objective is called on its process's *local* batch, the global batch being
the ``W`` local batches in rank order. A :class:`Shard` says where this
process's pairs sit in it and runs the few collectives an objective needs.
The local batches are the same size but for the items a process could not
read (dropped from its batch, :mod:`uncurated.data.skip`): the sizes are
exchanged first (one all-gather of ``W`` numbers) and the gathers pad.

* :meth:`Shard.gather`: the global batch of a local tensor, differentiable:
  its backward pass returns to each process the sum, over all processes, of
  the gradients of its rows (a reduce-scatter). Features are gathered this
  way, so each process scores its own anchors against every candidate and
  still gets its candidates' share of every other process's gradient.
* :meth:`Shard.all_reduce`: the sum over processes, differentiable (its
  backward pass sums the gradients too): CyCLIP's d x d Gram matrices.
* :meth:`Shard.logsumexp`: an elementwise log-sum-exp over the processes (no
  gradient): NUCLR's column statistic.
* :meth:`Shard.checks`: the consistency checks every call makes, reported on
  every process: a bad argument on one process raises the same error on all of
  them, rather than leaving the others waiting in the next collective.

:func:`count_traffic` counts the bytes each collective sends from this
process, by kind, for the benchmarks: an all-gather sends ``(W - 1)`` times
the local part, a reduce-scatter ``(W - 1) / W`` times its input, an
all-reduce ``2 (W - 1) / W`` times its tensor (ring algorithms).
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field

import torch
from torch import Tensor

from .group import (
    ProcessGroup,
    all_gather_into,
    all_gather_object,
    all_reduce,
    process_place,
    reduce_scatter_from,
)

_COUNTERS: list[Counter] = []
_AGREED = threading.local()


@contextmanager
def count_traffic() -> Iterator[Counter]:
    """Count the bytes this process's objective collectives send, by kind, while the block runs."""
    counts: Counter = Counter()
    _COUNTERS.append(counts)
    try:
        yield counts
    finally:
        _COUNTERS.remove(counts)


def _count(kind: str, nbytes: float) -> None:
    for counts in _COUNTERS:
        counts[kind] += int(nbytes)


def process_shard(
    local_size: int, distributed: bool | None, device: torch.device, group: ProcessGroup | None = None
) -> Shard | None:
    """This process's :class:`Shard` of a global batch split over ``group`` (``None``: the default process
    group), this process holding ``local_size`` pairs, or ``None`` (see :func:`~.group.process_place`). The
    processes' counts are exchanged on ``device`` (the features')."""
    place = process_place(distributed, group)
    if place is None:
        return None
    agreed: Shard | None = getattr(_AGREED, "shard", None)
    if agreed is not None:
        if (agreed.rank, agreed.world_size, agreed.local_size) != (place.rank, place.world_size, local_size):
            raise ValueError(
                f"the agreed shard holds {agreed.local_size} pairs of rank {agreed.rank} of {agreed.world_size}, "
                f"the call {local_size} of rank {place.rank} of {place.world_size}"
            )
        return agreed
    rank, world = place
    sizes = torch.empty(world, dtype=torch.long, device=device)
    _count("checks", 8 * (world - 1))
    all_gather_into(sizes, torch.tensor([local_size], device=device), group=group)
    return Shard(rank, tuple(sizes.tolist()), group)


def agree_on_step(local_size: int, flags: Tensor, group: ProcessGroup | None = None) -> tuple[Shard, list[float]]:
    """One all-gather and one read, for a caller that checks its processes' inputs itself (the trainer): every
    process's pair count with the numbers ``flags`` (a 1-d tensor on the features' device).

    Returns this process's :class:`Shard`, ``vouched`` (for :func:`agreed_shard`), and the sum of each flag over
    the processes: what an all-reduce of them gives, read together with the counts."""
    rank, world = process_place(True, group) or (0, 1)
    local = torch.cat([flags.detach().reshape(-1).double(), flags.new_tensor([local_size], dtype=torch.float64)])
    everyone = local.new_empty((world, local.numel()))
    _count("checks", local.numel() * 8 * (world - 1))
    all_gather_into(everyone, local[None], group=group)
    rows = everyone.tolist()
    counts = tuple(int(row[-1]) for row in rows)
    return Shard(rank, counts, group, vouched=True), [sum(column) for column in zip(*rows, strict=True)][:-1]


@contextmanager
def agreed_shard(shard: Shard) -> Iterator[None]:
    """Within (this thread), :func:`process_shard` returns ``shard`` rather than exchanging the counts again: the
    objective call of a step whose counts :func:`agree_on_step` exchanged."""
    _AGREED.shard = shard
    try:
        yield
    finally:
        _AGREED.shard = None


@dataclass(frozen=True)
class Shard:
    """Where this process's pairs sit in a global batch: process ``k`` (its rank in ``group``, ``None`` for the
    default process group) holds ``counts[k]`` of them. ``vouched``: the caller checked every process's inputs
    (the trainer: one model, each process its own samples), so :meth:`checks` exchanges nothing."""

    rank: int
    counts: tuple[int, ...]
    group: ProcessGroup | None = field(default=None, compare=False)
    vouched: bool = field(default=False, compare=False)

    @property
    def world_size(self) -> int:
        return len(self.counts)

    @property
    def local_size(self) -> int:
        return self.counts[self.rank]

    @property
    def global_size(self) -> int:
        return sum(self.counts)

    @property
    def start(self) -> int:
        """The first global row of this process's pairs."""
        return sum(self.counts[: self.rank])

    @property
    def rows(self) -> slice:
        """This process's rows of the global batch."""
        return slice(self.start, self.start + self.local_size)

    @property
    def weight(self) -> float:
        """The factor of this process's means over its rows: its share of the batch against an even share
        (1 when the shares are even). The processes' weighted means then add up to ``W`` times the mean over
        the whole batch, so that DDP's average of their gradients is the whole batch's gradient."""
        return self.local_size * self.world_size / self.global_size

    def owner(self, row: int) -> int:
        """The process whose pairs hold the global batch's ``row``."""
        return next(rank for rank in range(self.world_size) if row < sum(self.counts[: rank + 1]))

    def gather(self, local: Tensor, kind: str = "features") -> Tensor:
        """The global batch of this process's rows ``local`` (rank order along dim 0); differentiable if
        ``local`` requires grad: the backward pass hands each process the sum over processes of the gradients
        of its rows."""
        if local.requires_grad and torch.is_grad_enabled():
            return _GatherRows.apply(local, self, kind, self.counts)
        return _gather(local, self, kind, self.counts)

    def gather_parts(self, part: Tensor, kind: str) -> Tensor:
        """Every process's ``part`` (the same shape on all), stacked along dim 0 in rank order; differentiable."""
        counts = (part.shape[0],) * self.world_size
        if part.requires_grad and torch.is_grad_enabled():
            return _GatherRows.apply(part, self, kind, counts)
        return _gather(part, self, kind, counts)

    def all_reduce(self, values: Tensor, kind: str) -> Tensor:
        """The sum of ``values`` over the processes; differentiable (the gradients are summed too)."""
        if values.requires_grad and torch.is_grad_enabled():
            return _AllReduce.apply(values, self, kind)
        return _all_reduce(values, kind, self)

    def logsumexp(self, values: Tensor, kind: str) -> Tensor:
        """``log sum_k exp(values_k)`` over the processes, elementwise (no gradient): two all-reduces, the
        maximum, then the sum of exponentials below it."""
        values = values.detach()
        top = values.clone().contiguous()
        _count(kind, 2 * top.numel() * top.element_size() * 2 * (self.world_size - 1) / self.world_size)
        all_reduce(top, maximum=True, group=self.group)
        top = torch.where(torch.isfinite(top), top, torch.zeros_like(top))  # all -inf: the sum stays 0
        total = torch.exp(values - top)
        all_reduce(total, group=self.group)
        return top + torch.log(total)

    @contextmanager
    def checks(self, device: torch.device, *, fingerprint: Tensor | None = None, **consistent: float) -> Iterator[None]:
        """Run the argument checks of a call on every process and raise, on all of them, what any one raised.

        ``consistent`` names numbers that must be equal on every process (the
        local batch size, the feature dimension, the dataset size); a
        difference raises ``ValueError`` naming each process's value.
        ``fingerprint``: a few float64 numbers that tell this process's inputs
        from another's, the last one non-zero where they can tell
        (:func:`~uncurated.objectives.call_form.features_fingerprint`): when
        every process's are equal, ``ValueError`` says the inputs were the
        global batch already. One all-gather of a few numbers, and a second of
        the messages if some process failed. A ``vouched`` shard's caller
        checked the inputs: an error is raised where it occurs, and nothing is
        exchanged or read.
        """
        if self.vouched:
            yield
            return
        problem: str | None = None
        try:
            yield
        except (ValueError, TypeError) as error:
            problem = f"{type(error).__name__}: {error}"
        local = torch.tensor([float(problem is not None), *consistent.values()], dtype=torch.float64, device=device)
        if fingerprint is not None:
            local = torch.cat([local, fingerprint.to(device=device, dtype=torch.float64)])
        everyone = self.gather_parts(local[None], "checks").cpu()
        failed = [rank for rank in range(self.world_size) if everyone[rank, 0] > 0]
        if failed:
            messages: list[str | None] = all_gather_object(problem, self.group)
            raise ValueError(
                "; ".join(f"rank {rank} of {self.world_size}: {messages[rank]}" for rank in failed)
                + " (raised on every process, nothing was written)"
            )
        for column, (name, value) in enumerate(consistent.items(), start=1):
            values = everyone[:, column]
            if not bool((values == value).all()):
                found = ", ".join(f"{_number(v)} on rank {rank}" for rank, v in enumerate(values.tolist()))
                raise ValueError(f"every process must pass the same {name}: got {found}{_hint(name)}")
        if fingerprint is not None:
            prints = everyone[:, 1 + len(consistent) :]
            if bool((prints == prints[0]).all()) and bool(prints[0, -1] != 0):
                raise ValueError(SAME_INPUTS.format(world=self.world_size))


SAME_INPUTS = (
    "every process passed the same features: the global batch gathered already? The objective gathers the "
    "processes' batches itself, so it would count each pair {world} times. Pass each process's own pairs "
    "(open_clip users: the features before their gather), or call with gathered=True to score the given features "
    "as the whole batch on every process."
)
"""What :meth:`Shard.checks` says when every process passed the same inputs (formatted with their number)."""


def _hint(name: str) -> str:
    hints: Mapping[str, str] = {"num_samples": " (every process must build the objective for the same dataset)"}
    return hints.get(name, "")


def _number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else str(value)


def _gather(local: Tensor, shard: Shard, kind: str, counts: tuple[int, ...]) -> Tensor:
    """The rows of every process (``counts[k]`` from process ``k``), padded to the largest count for the
    all-gather."""
    longest = max(counts)
    padded = local.contiguous()
    if local.shape[0] < longest:
        padded = torch.cat([padded, padded.new_zeros((longest - local.shape[0], *local.shape[1:]))])
    out = padded.new_empty((shard.world_size * longest, *local.shape[1:]))
    _count(kind, padded.numel() * padded.element_size() * (shard.world_size - 1))
    all_gather_into(out, padded, group=shard.group)
    if all(count == longest for count in counts):
        return out
    return torch.cat([out[k * longest : k * longest + count] for k, count in enumerate(counts)])


def _all_reduce(values: Tensor, kind: str, shard: Shard) -> Tensor:
    total = values.detach().clone().contiguous()
    _count(kind, total.numel() * total.element_size() * 2 * (shard.world_size - 1) / shard.world_size)
    all_reduce(total, group=shard.group)
    return total


class _GatherRows(torch.autograd.Function):
    """All-gather forward, reduce-scatter (sum) backward, both padded to the largest count."""

    @staticmethod
    def forward(ctx, local: Tensor, shard: Shard, kind: str, counts: tuple[int, ...]) -> Tensor:
        ctx.shard, ctx.kind, ctx.counts = shard, kind, counts
        return _gather(local, shard, kind, counts)

    @staticmethod
    def backward(ctx, grad: Tensor):
        shard, counts = ctx.shard, ctx.counts
        longest = max(counts)
        grad = grad.contiguous()
        if any(count != longest for count in counts):
            pieces, start = [], 0
            for count in counts:
                piece = grad[start : start + count]
                pieces += [piece, piece.new_zeros((longest - count, *grad.shape[1:]))]
                start += count
            grad = torch.cat(pieces)
        mine = grad.new_empty((longest, *grad.shape[1:]))
        _count(f"{ctx.kind}: gradients", grad.numel() * grad.element_size() * (shard.world_size - 1) / shard.world_size)
        reduce_scatter_from(mine, grad, group=shard.group)
        return mine[: counts[shard.rank]], None, None, None


class _AllReduce(torch.autograd.Function):
    """All-reduce (sum) forward and backward."""

    @staticmethod
    def forward(ctx, values: Tensor, shard: Shard, kind: str) -> Tensor:
        ctx.shard, ctx.kind = shard, kind
        return _all_reduce(values, kind, shard)

    @staticmethod
    def backward(ctx, grad: Tensor):
        return _all_reduce(grad, f"{ctx.kind}: gradients", ctx.shard), None, None
