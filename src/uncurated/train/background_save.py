"""Checkpoints written while training goes on: the main process publishes a snapshot in a thread of its own.

With ``checkpoint_async=true`` the checkpoints a run writes as it trains
(``checkpoint_every``, ``checkpoint_minutes``, each epoch's) cost the step
only what every process must do together: each process writes its objective
file and its shards and hashes them, the main process copies the weights and
the training state (:func:`snapshot`), and the steps go on. The main process's
share, the weights' file, the training state's, the checksums, the manifest,
``fsync`` and the rename into place (:func:`~.checkpoint.publish_checkpoint`),
runs in a :class:`BackgroundWriter` thread meanwhile. The publish is the same
atomic one: a process killed while it runs leaves a temporary folder, which the
next checkpoint removes, and the previous checkpoint stays the latest, intact
(torchtitan's and DCP's ``async_save`` keep the same order: copy, then write
beside training). One write at a time: the next checkpoint, and the end of the
run, wait for the one in flight first, and an error it met is raised then, on
every process.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError

from ..errors import RunStopped
from .distributed import Distributed


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
    """One checkpoint publish at a time, in a thread of the main process; every process knows its step."""

    def __init__(self, context: Distributed) -> None:
        self.context = context
        self.step: int | None = None
        """The step of the checkpoint in flight (every process), ``None`` when none is."""
        self._executor: ThreadPoolExecutor | None = None
        self._pending: Future | None = None

    def start(self, step: int, publish: Callable[[], Path] | None) -> None:
        """Run ``publish`` (the main process's; ``None`` on the others) in the thread, as the checkpoint of
        ``step``; the one before must have been finished (every process must call)."""
        if self.step is not None:
            raise RuntimeError(f"the checkpoint of step {self.step} is still being written: finish() it first")
        self.step = step
        if publish is not None:
            if self._executor is None:
                self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="checkpoint")
            self._pending = self._executor.submit(publish)

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
