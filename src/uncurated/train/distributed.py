"""Several processes, one batch: ``torchrun`` support with ``torch.distributed``.

Every process holds a replica of the towers (or a shard of them, FSDP2; see
:mod:`.parallel`), the objective with its share of the per-sample state, and
a share of each global batch. The objective gathers what it needs of the
rest of the batch itself (:mod:`uncurated.process.shard`) and returns the
mean over the process's rows; DistributedDataParallel averages the gradients
while the backward pass runs. This module holds the process's place and the
few agreements the loop needs beyond that: a step is skipped on every process
or none, a checkpoint is written by all or none, and the logged loss is the
mean over the processes.

A process never waits forever for the others: every collective operation
times out after ``dist_timeout`` seconds, and a failed one (a peer died, its
socket closed, or it stopped answering) raises :class:`PeerLost` on the
processes left, which then exit; the run continues from its last checkpoint
when all processes are started again with ``resume=true``.
"""

from __future__ import annotations

import datetime
import os
import secrets
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.distributed as dist
from torch import Tensor

from ..errors import RunStopped


class PeerLost(RunStopped, RuntimeError):
    """A collective operation failed: another training process died or did not answer within the timeout."""


@dataclass(frozen=True)
class Distributed:
    """This process's place among the training processes (``timeout``: seconds a collective may wait)."""

    rank: int = 0
    world_size: int = 1
    device: torch.device = torch.device("cpu")
    timeout: float | None = None

    @property
    def enabled(self) -> bool:
        return self.world_size > 1

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    def check_batch_size(self, batch: int) -> None:
        """Refuse a global batch of ``batch`` samples that the processes cannot share evenly."""
        if batch % self.world_size:
            raise ValueError(
                f"batch_size must be a multiple of the number of processes, {self.world_size}: got {batch} "
                f"(accepted: {self.world_size}, {2 * self.world_size}, {3 * self.world_size}, ...)"
            )

    def check_shard_count(self, shards: int) -> None:
        """Refuse ``shards`` webdataset shards that the processes cannot share evenly: each reads every
        ``world_size``-th, and a process with fewer shards would run out of batches before the others."""
        if shards % self.world_size:
            world = self.world_size
            raise ValueError(
                "the shards of data_dir must divide evenly over the processes, or some would run out of batches "
                f"before the others: got {shards} shards over {world} processes (accepted: {world}, {2 * world}, "
                f"{3 * world}, ... shards); name a multiple of {world} shards, or start a number of processes that "
                f"divides {shards}"
            )

    def check_shared_folder(self, folder: Path) -> None:
        """Refuse the run folder ``folder`` unless every process sees the same folder there and can write into it,
        on every process: each checkpoint gathers a file from each process into it.

        The main process draws a random token; each process writes it into a probe file of its own in ``folder``;
        the main process reads every other's probe, the others read the main one's; the probes are removed and
        what failed is reported everywhere (a ``ValueError`` naming the folder and the processes).
        """
        if not self.enabled:
            return
        token = self.broadcast_object(secrets.token_hex(16) if self.is_main else None)

        def probe(rank: int) -> Path:
            return folder / f".shared-probe-{token}-{rank:05d}"

        problems = []
        try:
            probe(self.rank).write_text(token)
        except OSError as error:
            problems.append(f"process {self.rank} cannot write {probe(self.rank)} ({error})")
        self.barrier()
        for rank in range(1, self.world_size) if self.is_main else [0]:
            try:
                seen = probe(rank).read_text()
            except OSError:
                seen = None
            if seen != token:
                problems.append(f"process {self.rank} cannot read the probe file process {rank} wrote there")
        found = [problem for each in self.gather_object(problems) for problem in each]
        with suppress(OSError):
            probe(self.rank).unlink(missing_ok=True)
        if found:
            raise ValueError(
                f"the run folder {folder} is not the same folder for every training process: "
                + "; ".join(found)
                + ". Every process writes its part of each checkpoint there, so the run folder must be on storage "
                "every node shares, at the same path for every process (an absolute out=... if they start in "
                "different folders)"
            )

    def local_slice(self, batch: int) -> slice:
        """This rank's part of a global batch of ``batch`` samples (which the world size must divide)."""
        self.check_batch_size(batch)
        share = batch // self.world_size
        return slice(self.rank * share, (self.rank + 1) * share)

    def average(self, values: Tensor) -> Tensor:
        """The mean of a few numbers over the processes (one all-reduce), in float64."""
        total = values.detach().to(self.device, torch.float64)
        if not self.enabled:
            return total
        total = total.clone()
        self._collective(dist.all_reduce, total)  # a sum: gloo has no average
        return total / self.world_size

    def everywhere(self, action: Callable[[], object]):
        """Run ``action`` on every process; if it raises on any, every process raises (the first failure's
        exception, by rank), so that none goes on alone."""
        error: BaseException | None = None
        result = None
        try:
            result = action()
        except Exception as failure:  # handed to the other processes, then raised everywhere
            error = failure
        if self.enabled:
            errors: list[BaseException | None] = [None] * self.world_size
            self._collective(dist.all_gather_object, errors, error)
            error = next((failure for failure in errors if failure is not None), None)
        if error is not None:
            raise error
        return result

    def gather_object(self, value) -> list:
        """``value`` as every process has it, by rank (on every process)."""
        if not self.enabled:
            return [value]
        values: list = [None] * self.world_size
        self._collective(dist.all_gather_object, values, value)
        return values

    def broadcast_object(self, value):
        """``value`` as rank 0 has it."""
        if not self.enabled:
            return value
        holder = [value]
        self._collective(dist.broadcast_object_list, holder, src=0)
        return holder[0]

    def barrier(self) -> None:
        if self.enabled:
            self._collective(dist.barrier)

    def main_first(self, action: Callable[[], object]) -> None:
        """Run ``action`` on the main rank only; if it raises, every rank raises the same exception."""
        error = None
        if self.is_main:
            try:
                action()
            except Exception as failure:  # handed to the other ranks, then raised here too
                error = failure
        error = self.broadcast_object(error)
        if error is not None:
            raise error

    @contextmanager
    def peers_answering(self, what: str, *, any_error: bool = False) -> Iterator[None]:
        """Inside, a collective operation that fails raises :class:`PeerLost` naming ``what``: the objective's
        gathers and DDP's gradient buckets as much as this module's own agreements. Other errors pass unchanged
        (``any_error``: every ``RuntimeError`` is a failed collective, for code that runs nothing else)."""
        try:
            yield
        except PeerLost:
            raise
        except RuntimeError as error:
            if not (self.enabled and (any_error or _is_collective_failure(error))):
                raise
            problem = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
            raise PeerLost(
                f"rank {self.rank} of {self.world_size}: {what} failed ({problem}). Another training "
                f"process has probably died or stopped answering (dist_timeout = {self.timeout} s); this one "
                "stops too. Start all processes again with resume=true to continue from the last checkpoint."
            ) from error

    def _collective(self, operation: Callable, *args, **kwargs) -> None:
        with self.peers_answering(operation.__name__, any_error=True):
            operation(*args, **kwargs)


def _is_collective_failure(error: RuntimeError) -> bool:
    """Whether ``error`` came from a collective of torch.distributed's backends (gloo and NCCL name themselves in
    their messages; newer errors are ``DistError``)."""
    return isinstance(error, dist.DistError) or any(name in str(error) for name in ("gloo", "NCCL", "c10d"))


def setup(device: str = "auto", timeout: float = 600.0) -> Distributed:
    """Join the process group ``torchrun`` describes (gloo on CPU, NCCL on GPU), or run alone.

    ``timeout``: the seconds any collective operation may wait for the other processes.
    """
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    if world_size == 1:
        return Distributed(device=torch.device(device))
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    use_cuda = torch.device(device).type == "cuda"
    if use_cuda:
        torch.cuda.set_device(local_rank)
    if not dist.is_initialized():
        dist.init_process_group("nccl" if use_cuda else "gloo", timeout=datetime.timedelta(seconds=timeout))
    chosen = torch.device(f"cuda:{local_rank}") if use_cuda else torch.device(device)
    return Distributed(rank=dist.get_rank(), world_size=dist.get_world_size(), device=chosen, timeout=timeout)


def end_training_process(status: int | str | None) -> None:
    """Under ``torchrun``, end this process now with ``status``, skipping the interpreter's teardown.

    In about one two-process CPU run in six, a rank aborted after its run had
    finished and its files were written: gloo's C++ objects, destroyed at
    interpreter exit, call ``std::terminate`` ("terminate called without an
    active exception", SIGABRT, with no Python frame left). torchrun then
    reported the run as failed and killed the other rank, possibly before the
    main rank had written its evaluation. By the time the command returns the
    process group is destroyed and the run lock released, so there is nothing
    left to tear down: flush the output and leave. A single process is left
    alone (``status`` is then returned or raised as usual).
    """
    if int(os.environ.get("WORLD_SIZE", "1")) <= 1:
        return
    code = status if isinstance(status, int) else (0 if status is None else 1)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def teardown(context: Distributed) -> None:
    if context.enabled and dist.is_initialized():
        dist.destroy_process_group()
