"""The one exception a run stops with, whatever stopped it.

Training and the commands on a run raise a :class:`RunStopped` (or one of
its kinds) for every condition they detect and name: a configuration that
cannot be built, a run folder in use, a checkpoint that cannot be read or
written, too many non-finite steps, too many unreadable items, a lost peer.
A command catches this one type and exits with the exception's own
``exit_status``: 2 for what the user asked (``error:``), 1 for a fault met
on the way (``stopped:``; the last checkpoint is intact and ``resume=true``
continues).
"""

from __future__ import annotations


class RunStopped(Exception):
    """A run stopped on a fault it detected; its last good checkpoint is intact."""

    exit_status = 1
    verdict = "stopped"
