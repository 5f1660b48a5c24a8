"""What the training tests share: a small, fast configuration, the weights and losses a run ends with, torchrun."""

import os
import socket
import subprocess
import sys
from pathlib import Path

import torch
from safetensors.torch import load_file

from uncurated.train.checkpoint import latest_checkpoint

# Small and fast: digits, an MLP without batch norm, no augmentation noise in the comparisons.
SMOKE = ["preset=digits", "progress=false", "log_every=1", "probe_train_size=0"]


def overrides(tmp_path: Path, *extra: str) -> list[str]:
    return [*SMOKE, f"out={tmp_path}", *extra]


def final_weights(run_dir: Path) -> dict[str, torch.Tensor]:
    return load_file(latest_checkpoint(run_dir / "checkpoints") / "model.safetensors")


def logged_losses(run_dir: Path) -> list[float]:
    """The losses a run logged in its metrics.csv, in order."""
    return [float(row.split(",")[2]) for row in (run_dir / "metrics.csv").read_text().splitlines()[1:]]


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def torchrun(
    *arguments: str, processes: int = 2, timeout: float = 300, environment: dict | None = None, succeed: bool = True
) -> subprocess.CompletedProcess:
    """``torchrun ARGUMENTS`` (a script or ``-m module`` and its arguments) in ``processes`` processes on this
    machine, one thread each, with ``environment`` added; fails the test if it fails and ``succeed``."""
    command = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        f"--nproc_per_node={processes}",
        "--master_addr=127.0.0.1",
        f"--master_port={free_port()}",
        *arguments,
    ]
    environment = {**os.environ, "OMP_NUM_THREADS": "1", **(environment or {})}
    finished = subprocess.run(command, capture_output=True, text=True, timeout=timeout, env=environment)
    if succeed:
        assert finished.returncode == 0, finished.stderr[-3000:]
    return finished


def torchrun_train(*arguments: str, processes: int = 2, **options) -> subprocess.CompletedProcess:
    """``uncurated train ARGUMENTS`` in ``processes`` processes on this machine, one thread each."""
    return torchrun("-m", "uncurated", "train", *arguments, processes=processes, **options)
