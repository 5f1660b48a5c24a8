"""Checks of values that live on the device, read together with the next read a call makes anyway.

Reading a value computed on a GPU (``.item()``, ``bool(t)``, ``.tolist()``)
makes the host wait until the device has run everything queued before it: a
*host synchronization*, which costs a step its overlap of launches and kernels.
An objective's argument checks (finite features, indices in range) each need
such a read, and so does the tiled engine (where the excluded entries fall, the
bounds of its fast path). Within :func:`pending_checks`, :func:`check_later`
does not read: it queues the check's values, and the next :func:`read` (the
engine's) fetches them with its own in one synchronization and runs the checks
first, so that a bad argument still raises its own error before anything uses
the values read. :meth:`PendingChecks.flush` reads what is left, at the latest
before the call changes any state or returns; outside :func:`pending_checks`,
:func:`check_later` reads at once.

``benchmarks/host_syncs.py`` counts the synchronizations of a training step.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import torch
from torch import Tensor

Check = Callable[[list[float]], None]
"""Takes the numbers of its values, read, and raises if they are bad."""


class PendingChecks:
    """Checks queued by :func:`check_later`, each its values (on the device, not read) and what to do with them."""

    def __init__(self) -> None:
        self.items: list[tuple[Tensor, Check]] = []

    def read(self, *values: Tensor) -> list[float]:
        """``values`` (flattened, as numbers) read with every queued check in one synchronization; the checks run
        first (and may raise), in the order they were queued.

        One ``cat`` of everything, which promotes the types: integers are made float64 first (exact below 2**53,
        as dataset indices are), floats and booleans go in as they are (no operator more per value).
        """
        items, self.items = self.items, []
        parts = [tensor.detach().reshape(-1) for tensor, _ in items] + [v.detach().reshape(-1) for v in values]
        if not parts:
            return []
        device = parts[0].device
        exact = [part if part.is_floating_point() or part.dtype == torch.bool else part.double() for part in parts]
        numbers = torch.cat([part.to(device) for part in exact]).tolist()
        start = 0
        for tensor, check in items:
            check(numbers[start : start + tensor.numel()])
            start += tensor.numel()
        return numbers[start:]

    def flush(self) -> None:
        """Read and run the checks still queued (nothing to read if none)."""
        if self.items:
            self.read()


_local = threading.local()


def _active() -> PendingChecks | None:
    stack = getattr(_local, "stack", None)
    return stack[-1] if stack else None


@contextmanager
def pending_checks() -> Iterator[PendingChecks]:
    """Queue the checks of :func:`check_later` within (this thread's); the caller flushes them. If the block
    raises while checks are queued, they are read first: a bad argument's error comes before what it caused.

    Nested in another, it shares the outer queue: a check its caller queued (the trainer's, of the embeddings)
    is read with the objective's reads.
    """
    pending = _active() or PendingChecks()
    stack = _local.__dict__.setdefault("stack", [])
    stack.append(pending)
    try:
        yield pending
    except Exception:
        stack.pop()
        pending.flush()
        raise
    else:
        stack.pop()


def check_later(values: Tensor, check: Check) -> None:
    """Run ``check`` on ``values`` read: with the next :func:`read` within :func:`pending_checks`, else now."""
    pending = _active()
    if pending is None:
        pending = PendingChecks()
        pending.items.append((values, check))
        pending.flush()
        return
    pending.items.append((values, check))


def read(*values: Tensor) -> list[float]:
    """``values`` read as float64 numbers, with the queued checks if any (one synchronization)."""
    pending = _active() or PendingChecks()
    return pending.read(*values)


def flush() -> None:
    """Read and run the checks queued within the innermost :func:`pending_checks` (nothing outside one)."""
    pending = _active()
    if pending is not None:
        pending.flush()
