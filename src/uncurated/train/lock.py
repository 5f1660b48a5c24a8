"""One training process per run folder: a lock file holding the owner's pid and host.

Two runs pointed at the same folder would overwrite each other's checkpoints
and metrics. :class:`RunLock` claims a folder by creating ``lock`` in it
atomically (the file is written in full under a temporary name, then linked
into place, which fails if a lock exists). A lock whose process is gone (same
host, pid no longer running: the run was killed) is stale and is taken over
with a warning; a live one, or one from another host whose process cannot be
checked, makes the new run refuse with :class:`RunLocked`.
"""

from __future__ import annotations

import os
import socket
import tempfile
import warnings
from pathlib import Path

from .config import ConfigError

LOCK = "lock"


class RunLocked(ConfigError):
    """The run folder is in use by another process."""


class RunLock:
    """The claim of this process on the run folder ``folder``; use :meth:`acquire` and :meth:`release`."""

    def __init__(self, folder: Path) -> None:
        self.folder = Path(folder)
        self.path = self.folder / LOCK
        self.owner = f"{os.getpid()} {socket.gethostname()}"

    def acquire(self) -> None:
        """Claim the folder (creating it), taking over a stale lock; raise :class:`RunLocked` if it is in use."""
        self.folder.mkdir(parents=True, exist_ok=True)
        if self._create():
            return
        holder = self._holder()
        if holder is None:
            raise RunLocked(
                f"{self.folder} is locked by {self.path}, which does not name a process (pid host); "
                "remove it if no run uses this folder"
            )
        if _alive(*holder):
            raise RunLocked(
                f"{self.folder} is in use by process {holder[0]} on {holder[1]} (lock file {self.path}); wait for "
                "it to finish, stop it, or use another name=...; if that process is gone, remove the lock file"
            )
        warnings.warn(
            f"taking over the stale lock {self.path} of process {holder[0]}, which is no longer running", stacklevel=2
        )
        self.path.unlink(missing_ok=True)
        if not self._create():
            raise RunLocked(f"{self.folder} was claimed by another process while its stale lock was removed")

    def release(self) -> None:
        """Give the folder up, if this process holds it."""
        try:
            if self.path.read_text().strip() == self.owner:
                self.path.unlink()
        except FileNotFoundError:
            pass

    def _create(self) -> bool:
        """Create the lock file with this process as its owner; ``False`` if one exists."""
        handle, temporary = tempfile.mkstemp(prefix=".lock-", dir=self.folder)
        try:
            with os.fdopen(handle, "w") as file:
                file.write(self.owner + "\n")
            os.link(temporary, self.path)
            return True
        except FileExistsError:
            return False
        finally:
            os.unlink(temporary)

    def _holder(self) -> tuple[int, str] | None:
        """(pid, host) of the lock's owner; ``None`` if the file cannot be read as one."""
        try:
            pid, host = self.path.read_text().split()
            return int(pid), host
        except (OSError, ValueError):
            return None


def _alive(pid: int, host: str) -> bool:
    """Whether process ``pid`` may still run: always for another host, where it cannot be checked."""
    if host != socket.gethostname():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # it exists, under another user
        return True
    return True
