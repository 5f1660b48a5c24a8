"""A run asked to stop (SIGTERM from a scheduler, SIGINT from Ctrl-C) ends at the next step boundary, checkpointed.

While :meth:`StopRequest.catching` is active (the trainer's loop), SIGTERM and SIGINT only note the request; the
loop finishes the step it is in, the processes agree to stop at the boundary (a request seen by one process stops
them all, :mod:`.trainer`), the checkpoint of that step is written and the run ends with :class:`RunInterrupted`,
whose exit status is 0: the run was stopped as asked, nothing is lost, and ``resume=true`` continues it.

Repeated signals while the stop is pending are ignored, except a second SIGINT in a process not started by
``torchrun``, which stops at once (``KeyboardInterrupt``; the last checkpoint is intact). Under ``torchrun`` a
Ctrl-C reaches each process twice (from the terminal, then forwarded by torchrun), so there every repeat is
ignored; torchrun kills its processes 30 s after it forwarded a signal, which a step and a checkpoint must fit.
Outside the loop (building the run, evaluating it) the signals keep their usual effect.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager

from ..errors import RunStopped

#: The signals that ask a run to stop at the next step boundary.
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


class RunInterrupted(RunStopped):
    """The run stopped at a step boundary because it was asked to (a signal), its checkpoint written."""

    exit_status = 0
    verdict = "interrupted"


class StopRequest:
    """Whether this process was asked to stop, and by which signal (a flag set by the handlers; reading it costs
    nothing). ``alone``: the process was not started by torchrun (a second Ctrl-C then stops at once)."""

    def __init__(self, *, alone: bool) -> None:
        self.alone = alone
        self.signal_name: str | None = None

    @property
    def requested(self) -> bool:
        return self.signal_name is not None

    def _handle(self, number: int, frame) -> None:
        if self.requested and number == signal.SIGINT and self.alone:
            raise KeyboardInterrupt
        if not self.requested:
            self.signal_name = signal.Signals(number).name

    @contextmanager
    def catching(self) -> Iterator[StopRequest]:
        """Inside, the stop signals set this request instead of ending the process; the previous handlers are put
        back on leaving. Outside the main thread, where Python delivers no signal, nothing is installed."""
        if threading.current_thread() is not threading.main_thread():
            yield self
            return
        previous = {number: signal.signal(number, self._handle) for number in STOP_SIGNALS}
        try:
            yield self
        finally:
            for number, handler in previous.items():
                signal.signal(number, handler)
