"""How the distributed tests start their processes, and how they fail when one hangs: within a minute, saying which
rank waited in which collective.

Two ways in: :func:`torchrun` (a script or ``-m module`` under ``torch.distributed.run``) and :func:`spawn` (a
function in ``torch.multiprocessing`` processes, which join their gloo group with :func:`join_gloo`). Either way:

* a process group the tests create gives up on a collective after :data:`COLLECTIVE_TIMEOUT`: gloo raises in the
  process left waiting, and its traceback (prefixed ``[rank{r}]`` under torchrun) names the collective;
* a run still going after ``timeout`` seconds (:data:`RUN_TIMEOUT` unless a test needs longer), a process that
  spins without waiting on anyone included, has every process's Python stack dumped by :mod:`faulthandler`, and
  the test fails naming, for each rank, the collective it was in (or its innermost frame) and the caller.
"""

from __future__ import annotations

import datetime
import faulthandler
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import torch.distributed as dist
import torch.multiprocessing as mp

COLLECTIVE_TIMEOUT = datetime.timedelta(seconds=30)
"""The longest a process of a test's process group waits in one collective."""
RUN_TIMEOUT = 60.0
"""Seconds a distributed test's processes may run, unless the test gives more (the whole matrix, slow runs)."""
_DUMP_WAIT = 30.0
"""Seconds the processes get to write their stacks and exit once signalled."""
_FRAME = re.compile(r'^\s*File "(?P<path>[^"]+)", line (?P<line>\d+) in (?P<function>\S+)', re.MULTILINE)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def join_gloo(rank: int, world: int, init_file: str) -> None:
    """Join the gloo group of ``world`` :func:`spawn` processes that meet at ``init_file``."""
    dist.init_process_group(
        "gloo", init_method=f"file://{init_file}", rank=rank, world_size=world, timeout=COLLECTIVE_TIMEOUT
    )


def torchrun(
    *arguments: str,
    processes: int = 2,
    timeout: float = RUN_TIMEOUT,
    environment: dict | None = None,
    succeed: bool = True,
) -> subprocess.CompletedProcess:
    """``torchrun ARGUMENTS`` (a script or ``-m module`` and its arguments) in ``processes`` processes on this
    machine, one thread each, with ``environment`` added; fails the test if it fails and ``succeed``, and always
    if it runs past ``timeout`` seconds (see the module's documentation).

    Each process writes its output to files of its own (``--redirects``); the result's ``stdout`` and ``stderr``
    are torchrun's, then each rank's in order.
    """
    with tempfile.TemporaryDirectory() as logs:
        command = [
            sys.executable,
            "-m",
            "torch.distributed.run",
            f"--nproc_per_node={processes}",
            "--master_addr=127.0.0.1",
            f"--master_port={free_port()}",
            "--redirects=3",
            f"--log-dir={logs}",
            *arguments,
        ]
        environment = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONFAULTHANDLER": "1", **(environment or {})}
        launcher = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=environment)
        hung = False
        try:
            stdout, stderr = launcher.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            hung = True
            workers = _workers(launcher.pid)
            for pid in workers.values():
                os.kill(pid, signal.SIGABRT)  # faulthandler (PYTHONFAULTHANDLER) writes the stack, then it aborts
            try:
                launcher.communicate(timeout=_DUMP_WAIT)
            except subprocess.TimeoutExpired:
                _kill(launcher.pid, *workers.values())
        outputs = _rank_outputs(Path(logs), processes)
        if hung:
            stacks = {rank: rank_stderr for rank, (_, rank_stderr) in outputs.items()}
            pytest.fail(hang_report(f"torchrun {' '.join(arguments)}", timeout, stacks), pytrace=False)
    finished = subprocess.CompletedProcess(
        command,
        launcher.returncode,
        stdout + "".join(out for out, _ in outputs.values()),
        stderr + "".join(err for _, err in outputs.values()),
    )
    if succeed:
        assert finished.returncode == 0, failure_report(finished.returncode, stderr, outputs)
    return finished


def spawn(worker: Callable, *args, processes: int = 2, timeout: float = RUN_TIMEOUT) -> None:
    """Run ``worker(rank, *args)`` in ``processes`` processes (``torch.multiprocessing``, one thread each); a
    process that raises fails the test with its traceback, and one still running after ``timeout`` seconds fails it
    with every process's stack (see the module's documentation)."""
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    with tempfile.TemporaryDirectory() as folder:
        context = mp.start_processes(
            _traced, args=(worker, folder, *args), nprocs=processes, join=False, start_method="spawn"
        )
        deadline = time.monotonic() + timeout
        while not context.join(timeout=max(deadline - time.monotonic(), 0.0)):
            if time.monotonic() < deadline:
                continue
            for process in context.processes:
                if process.is_alive():
                    os.kill(process.pid, signal.SIGABRT)
            for process in context.processes:
                process.join(_DUMP_WAIT)
                if process.is_alive():
                    process.kill()
            stacks = {rank: (Path(folder) / f"rank{rank}.stack").read_text() for rank in range(processes)}
            pytest.fail(hang_report(f"spawn {worker.__name__}", timeout, stacks), pytrace=False)


def _traced(rank: int, worker: Callable, folder: str, *args) -> None:
    """``worker(rank, *args)`` with faulthandler writing this process's stack to ``folder/rank{rank}.stack`` on
    SIGABRT."""
    with open(Path(folder) / f"rank{rank}.stack", "w") as stack:
        faulthandler.enable(file=stack, all_threads=True)
        worker(rank, *args)


def hang_report(what: str, timeout: float, stacks: dict[int, str]) -> str:
    """Where each rank was, from the stacks faulthandler dumped (``stacks[rank]``), and the stacks themselves."""
    lines = [f"{what} did not finish within {timeout:g} s; where each process was:"]
    lines += [f"  rank {rank}: {where(stack)}" for rank, stack in sorted(stacks.items())]
    for rank, stack in sorted(stacks.items()):
        dump = [line for line in stack.strip().splitlines() if not line.startswith("Extension modules:")]
        lines += [f"--- rank {rank}'s stack ---", "\n".join(dump) or "(none written)"]
    return "\n".join(lines)


def where(stack: str) -> str:
    """The collective a faulthandler dump shows its process in (the innermost ``torch.distributed`` frame), or its
    innermost frame when it was in none, and the three callers outside torch nearest to it."""
    threads = [block for block in stack.split("most recent call first):")[1:] if _FRAME.search(block)]
    if not threads:
        return "no Python stack was written (the process had exited or could not be signalled)"
    frames = [[m.groupdict() for m in _FRAME.finditer(block)] for block in threads]
    collective = [thread for thread in frames if any(_in_collective(frame) for frame in thread)]
    thread = (collective or frames)[0]
    inner = next((frame for frame in thread if _in_collective(frame)), None)
    outside = [frame for frame in thread[1:] if "/torch/" not in frame["path"]][:3]
    called = f", called from {' <- '.join(_frame(frame) for frame in outside)}" if outside else ""
    if inner is None:
        return f"in no collective: in {_frame(thread[0])}{called}"
    return f"waiting in the collective {inner['function']} ({_frame(inner)}){called}"


def _in_collective(frame: dict) -> bool:
    return "/torch/distributed/" in frame["path"] and frame["function"] != "wrapper"


def _frame(frame: dict) -> str:
    return f"{frame['function']} at {frame['path']}:{frame['line']}"


def failure_report(status: int, launcher_stderr: str, outputs: dict[int, tuple[str, str]]) -> str:
    """A failed torchrun: each rank's last lines of output (a traceback names the rank and what failed), then
    torchrun's summary."""
    parts = [f"torchrun exited with {status}"]
    for rank, (_, stderr) in sorted(outputs.items()):
        parts.append(f"--- rank {rank}'s stderr (end) ---\n" + "\n".join(stderr.strip().splitlines()[-40:]))
    return "\n".join([*parts, "--- torchrun (end) ---", launcher_stderr[-1500:]])


def _workers(launcher: int) -> dict[int, int]:
    """The processes torchrun started, by rank (Linux's /proc: its children and their ``RANK``)."""
    children = []
    for task in Path(f"/proc/{launcher}/task").glob("*/children"):
        children += [int(pid) for pid in task.read_text().split()]
    workers = {}
    for pid in children:
        try:
            environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        except OSError:  # it has exited meanwhile
            continue
        rank = next((entry[5:] for entry in environ if entry.startswith(b"RANK=")), None)
        if rank is not None:
            workers[int(rank)] = pid
    return workers


def _kill(*pids: int) -> None:
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def _rank_outputs(logs: Path, processes: int) -> dict[int, tuple[str, str]]:
    """Each rank's ``(stdout, stderr)`` as torchrun's ``--redirects`` wrote them under ``logs``."""

    def read(rank: int, stream: str) -> str:
        files = sorted(logs.glob(f"*/attempt_*/{rank}/{stream}.log"))
        return "".join(path.read_text(errors="replace") for path in files)

    return {rank: (read(rank, "stdout"), read(rank, "stderr")) for rank in range(processes)}
