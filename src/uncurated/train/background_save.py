"""Checkpoints written while training goes on: each process finishes its share in a thread of its own.

With ``checkpoint_async=true`` the checkpoints a run writes as it trains
(``checkpoint_every``, ``checkpoint_minutes``, each epoch's) cost the step
only copies: each process writes its objective file; under ``parallel=fsdp``
each hands its shards to DCP's ``async_save``, which copies them to the host
and writes them from a thread of its own
(:func:`~.parallel.save_shards_in_background`); the main process copies the
weights and the training state (:func:`snapshot`); and the steps go on.
Meanwhile each process's :class:`BackgroundWriter` thread waits for its
shards, hashes the files it wrote, and reports them to the main process's
(a gather over a gloo group of the writers' own, never the training's); once
every process has reported, the main process's thread publishes
(:func:`~.checkpoint.publish_checkpoint`: the weights' file, the training
state's, the manifest with the writers' checksums, ``fsync``, the rename into
place), reading no shard. The publish is the same atomic one: a process
killed at any moment of this leaves a temporary folder, which the next
checkpoint removes, and the previous checkpoint stays the latest, intact
(torchtitan keeps the same order: copy, then write beside training). One
write at a time: the next checkpoint, the end of the run and a stop wait for
the one in flight first, and an error it met on any process (a full disk) is
raised then, on every process.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError

from ..errors import RunStopped
from ..process import group
from .checkpoint import SHARDS, abandon_checkpoint, describe_written, fault_armed, fault_point
from .distributed import Distributed
from .parallel import save_shards_in_background


class CheckpointWriteError(RunStopped, RuntimeError):
    """A checkpoint could not be written (e.g. the disk is full); the previous one is intact."""

    @classmethod
    def of(cls, step: int, checkpoints: Path, previous: str, error: BaseException) -> CheckpointWriteError:
        """The error of the checkpoint of ``step`` into ``checkpoints`` failing with ``error``."""
        return cls(
            f"writing the checkpoint of step {step} into {checkpoints} failed ({type(error).__name__}: {error}); "
            f"the previous checkpoint ({previous}) is intact. Free space or fix the folder, then continue with "
            "resume=true."
        )


def snapshot(value: Any) -> Any:
    """``value`` with every tensor copied (detached, on the host): what training goes on changing after the call
    (the weights, the optimizer's moments) is left behind. Dicts, lists and tuples are copied through."""
    if isinstance(value, torch.Tensor):
        return value.detach().to("cpu", copy=True)
    if isinstance(value, dict):
        return {key: snapshot(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(snapshot(item) for item in value)
    return value


class BackgroundWriter:
    """One checkpoint at a time finished in a thread of each process (see the module); every process knows its
    step."""

    def __init__(self, context: Distributed) -> None:
        self.context = context
        self.step: int | None = None
        """The step of the checkpoint in flight (every process), ``None`` when none is."""
        self._executor: ThreadPoolExecutor | None = None
        self._pending: Future | None = None
        self._host_group: Any = None  # the writers' gloo group, made at the first save that needs it

    def write_shards(self, tensors: dict, staging: Path, step: int) -> Callable[[], None]:
        """Start writing this process's shards of the checkpoint of ``step`` into ``staging`` (DCP's
        ``async_save``, copied to the host first); returns the wait for the write, for :meth:`start` (every process
        must call)."""
        last = self.context.rank == self.context.world_size - 1
        written = (lambda: fault_point(step, "shards")) if last and fault_armed(step, "shards") else None
        return save_shards_in_background(tensors, staging / SHARDS, self._group(), written)

    def start(
        self,
        step: int,
        staging: Path,
        publish: Callable[[dict], Path] | None,
        shards_written: Callable[[], None] | None = None,
    ) -> None:
        """Finish the checkpoint of ``step`` in ``staging`` in the thread: wait for ``shards_written`` (the wait
        :meth:`write_shards` returned, if any), hash this process's files, gather every process's checksums, then,
        on the main process, ``publish(checksums)`` (``None`` on the others). The one before must have been
        finished (every process must call)."""
        if self.step is not None:
            raise RuntimeError(f"the checkpoint of step {self.step} is still being written: finish() it first")
        host_group = self._group()
        self.step = step
        if self._executor is None:
            self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="checkpoint")
        self._pending = self._executor.submit(self._finish_share, staging, publish, shards_written, host_group)

    def _finish_share(self, staging: Path, publish, shards_written, host_group) -> Path | None:
        """What :meth:`start` runs in the thread; a failure on any process is raised by every one."""
        context, described, error = self.context, {}, None
        try:
            if shards_written is not None:
                shards_written()
            described = describe_written(staging, context.rank, context.world_size)
        except (OSError, SafetensorError) as failure:
            error = failure
        reports = group.all_gather_object((described, error), host_group) if context.enabled else [(described, error)]
        failed = next((failure for _, failure in reports if failure is not None), None)
        if failed is not None:
            if publish is not None:
                abandon_checkpoint(staging)
            raise failed
        return (
            None if publish is None else publish({name: entry for files, _ in reports for name, entry in files.items()})
        )

    def _group(self) -> Any:
        """The writers' gloo group (every process must call), ``None`` for one process."""
        if self.context.enabled and self._host_group is None:
            self._host_group = group.new_host_group(self.context.timeout)
        return self._host_group

    def finish(self, failed: Callable[[int, BaseException], Exception]) -> Path | None:
        """Wait for the checkpoint in flight and return its folder on every process (``None`` if none was in
        flight); a write error it met is raised on every process as ``failed(step, error)`` (every process must
        call)."""
        step, self.step = self.step, None
        if step is None:
            return None
        pending, self._pending = self._pending, None

        def wait() -> Path | None:
            try:
                return None if pending is None else pending.result()
            except (OSError, SafetensorError) as error:  # the publish removed its temporary folder
                raise failed(step, error) from error

        return self.context.broadcast_object(self.context.everywhere(wait))
