"""The ``torchrun`` command line the distributed benchmarks launch themselves with."""

from __future__ import annotations

import socket
import sys


def torchrun_command(processes: int) -> list[str]:
    """``python -m torch.distributed.run`` for ``processes`` processes on this machine, on a free port (torchrun's
    default 29500 may be another run's); the script and its arguments follow."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    return [
        *(sys.executable, "-m", "torch.distributed.run", f"--nproc_per_node={processes}"),
        *("--master_addr=127.0.0.1", f"--master_port={port}"),
    ]
