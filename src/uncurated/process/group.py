"""The process group as this process sees it: its place, the collectives, and what a failed one means.

A run of ``W`` processes (``torchrun``) shares its batches, its per-sample
state and its data. Each part needs to know which process it runs in, and
they must all agree: this module is the one that asks ``torch.distributed``
(the engines' wrappers, DDP, FSDP2 and DCP in :mod:`uncurated.train.parallel`,
are the only other modules that import it). The others ask here:

* :func:`process_place`: this process's :class:`Place` among those that split
  the batches, or ``None`` alone; the objectives, the per-sample state and
  the trainer read it (:func:`join` makes it, for the trainer).
* :func:`launched_place`: the place ``torchrun`` gave this process, for the
  code that may run before the process group exists or outside it (the
  trainer deciding whether to join it, the data readers in a DataLoader
  worker): the group's place, else ``torchrun``'s ``RANK`` and ``WORLD_SIZE``.
* :meth:`Place.range`: the index range a process holds of a partition of
  ``n`` items (the per-sample state's rows).
* The collectives that :mod:`.shard`, the per-sample state and the trainer
  run: :func:`all_gather_into`, :func:`reduce_scatter_from`,
  :func:`all_reduce`, :func:`largest`, :func:`all_gather_object`,
  :func:`broadcast_object`, :func:`barrier`; :func:`new_host_group`, a
  group of their own for collectives run from another thread.
* :func:`peers_answering`: a collective that fails (a peer died, its socket
  closed, or it did not answer within the timeout) becomes :class:`PeerLost`.
"""

from __future__ import annotations

import datetime
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import NamedTuple

import torch
import torch.distributed as dist
from torch import Tensor
from torch.distributed import ProcessGroup

from ..errors import RunStopped

# torch 2.13 renamed the tensor collectives; earlier versions have only the old names.
all_gather_into: Callable = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
"""All-gather ``tensor`` into ``output`` (``W`` times its rows, in rank order): ``all_gather_into(output, tensor)``."""
reduce_scatter_from: Callable = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor
"""Sum ``tensor`` over the processes, keep this process's ``1 / W`` of it: ``reduce_scatter_from(output, tensor)``."""


class PeerLost(RunStopped, RuntimeError):
    """A collective operation failed: another training process died or did not answer within the timeout."""


class Place(NamedTuple):
    """This process's place among ``world_size`` processes (a pair, so it unpacks as ``rank, world_size``)."""

    rank: int = 0
    world_size: int = 1

    def range(self, size: int) -> tuple[int, int]:
        """``[start, stop)`` of the ``size`` indices this process holds of a partition into index ranges."""
        return owned_range(size, self.rank, self.world_size)


ALONE = Place(0, 1)


def owned_range(size: int, rank: int, world_size: int) -> tuple[int, int]:
    """``[start, stop)`` of the indices ``0 .. size - 1`` that process ``rank`` of ``world_size`` holds:
    ``floor(rank size / world_size)`` to ``floor((rank + 1) size / world_size)``, contiguous ranges that
    differ in length by at most one and cover every index once."""
    return rank * size // world_size, (rank + 1) * size // world_size


def initialized() -> bool:
    """Whether a ``torch.distributed`` process group is initialized in this process."""
    return dist.is_available() and dist.is_initialized()


def process_place(distributed: bool | None, group: ProcessGroup | None = None) -> Place | None:
    """This process's :class:`Place` among those that split the batches, or ``None`` (one process).

    ``distributed``: ``None`` splits the batch when a process group of two or
    more processes is initialized; ``False`` never (every call is a whole
    batch); ``True`` requires a process group. ``group``: the processes that
    split the batches (``None``: the default group, every process).
    """
    if distributed is False:
        return None
    if not initialized():
        if distributed:
            raise RuntimeError("distributed=True needs an initialized torch.distributed process group")
        if group is not None:
            raise RuntimeError("group= needs an initialized torch.distributed process group")
        return None
    world = dist.get_world_size(group)
    if world < 2 and not distributed:
        return None
    return Place(dist.get_rank(group), world)


def place_or_alone(distributed: bool | None, group: ProcessGroup | None = None) -> Place:
    """:func:`process_place`, ``Place(0, 1)`` for one process."""
    return process_place(distributed, group) or ALONE


def check_group(group: object) -> ProcessGroup | None:
    """``group`` if it is ``None`` or a ``torch.distributed`` process group, else ``ValueError`` naming it."""
    if group is not None and not isinstance(group, ProcessGroup):
        raise ValueError(
            f"group must be None (the default process group) or a torch.distributed ProcessGroup "
            f"(dist.new_group(ranks)), got {type(group).__name__}"
        )
    return group


def launched_place() -> Place:
    """The place ``torchrun`` gave this process: the process group's, or, before it is initialized or in a
    DataLoader worker outside it, ``torchrun``'s ``RANK`` and ``WORLD_SIZE`` (``Place(0, 1)`` without them)."""
    if initialized():
        return Place(dist.get_rank(), dist.get_world_size())
    return Place(int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1)))


def join(device: torch.device, timeout: float) -> Place:
    """Join the process group ``torchrun`` describes (NCCL for a CUDA ``device``, else gloo), unless this process
    already has; every collective may then wait ``timeout`` seconds. Returns this process's place."""
    if not dist.is_initialized():
        backend = "nccl" if device.type == "cuda" else "gloo"
        dist.init_process_group(backend, timeout=datetime.timedelta(seconds=timeout))
    return Place(dist.get_rank(), dist.get_world_size())


def leave() -> None:
    """Destroy the process group, if one is initialized."""
    if initialized():
        dist.destroy_process_group()


def new_host_group(timeout: float | None) -> ProcessGroup:
    """A new gloo group of every process (every process must call, in the same order), for collectives run beside
    the training's, from another thread (a checkpoint written in the background): they never share its group.
    ``timeout``: the seconds its collectives may wait (``None``: torch's default)."""
    return dist.new_group(backend="gloo", timeout=None if timeout is None else datetime.timedelta(seconds=timeout))


def collective_device(group: ProcessGroup | None = None) -> torch.device:
    """The device collectives of ``group`` (default: the default process group) run on: the current GPU under
    NCCL, else the CPU."""
    if dist.get_backend(group) == "nccl":
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def all_reduce(values: Tensor, *, maximum: bool = False, group: ProcessGroup | None = None) -> None:
    """Replace ``values`` by their sum over the processes of ``group`` (their maximum with ``maximum``), in
    place."""
    dist.all_reduce(values, op=dist.ReduceOp.MAX if maximum else dist.ReduceOp.SUM, group=group)


def largest(value: float, group: ProcessGroup | None = None) -> float:
    """The largest of every process's ``value`` (one all-reduce over ``group``, on :func:`collective_device`)."""
    holder = torch.tensor([value], dtype=torch.float64, device=collective_device(group))
    all_reduce(holder, maximum=True, group=group)
    return float(holder)


def all_gather_object(value, group: ProcessGroup | None = None) -> list:
    """``value`` as every process of ``group`` has it, by rank (on every process)."""
    values: list = [None] * dist.get_world_size(group)
    dist.all_gather_object(values, value, group=group)
    return values


def broadcast_object(value, source: int = 0):
    """``value`` as process ``source`` has it."""
    holder = [value]
    dist.broadcast_object_list(holder, src=source)
    return holder[0]


def barrier() -> None:
    """Wait until every process is here."""
    dist.barrier()


@contextmanager
def peers_answering(place: Place, what: str, timeout: float | None, *, any_error: bool = False) -> Iterator[None]:
    """Inside, a collective operation that fails raises :class:`PeerLost` naming ``what`` and this process's
    ``place``: the objective's gathers and DDP's gradient buckets as much as the trainer's own agreements. Other
    errors pass unchanged (``any_error``: every ``RuntimeError`` is a failed collective, for code that runs
    nothing else); so does everything of a single process. ``timeout``: the seconds a collective may wait, for the
    message."""
    try:
        yield
    except PeerLost:
        raise
    except RuntimeError as error:
        if not (place.world_size > 1 and (any_error or is_collective_failure(error))):
            raise
        problem = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise PeerLost(
            f"rank {place.rank} of {place.world_size}: {what} failed ({problem}). Another training "
            f"process has probably died or stopped answering (dist_timeout = {timeout} s); this one "
            "stops too. Start all processes again with resume=true to continue from the last checkpoint."
        ) from error


def is_collective_failure(error: RuntimeError) -> bool:
    """Whether ``error`` came from a collective of torch.distributed's backends (gloo and NCCL name themselves in
    their messages; newer errors are ``DistError``)."""
    return isinstance(error, dist.DistError) or any(name in str(error) for name in ("gloo", "NCCL", "c10d"))
