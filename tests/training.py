"""What the training tests share: a small, fast configuration, the weights and losses a run ends with, torchrun (also
with one process's view of the file system changed)."""

import os
import re
import subprocess
from pathlib import Path

import torch
from launch import COLLECTIVE_TIMEOUT, torchrun
from safetensors.torch import load_file

from uncurated.train.checkpoint import latest_checkpoint, sharded_weights

# Small and fast: digits, an MLP without batch norm, no augmentation noise in the comparisons.
SMOKE = ["preset=digits", "progress=false", "log_every=1", "probe_train_size=0"]


def overrides(tmp_path: Path, *extra: str) -> list[str]:
    return [*SMOKE, f"out={tmp_path}", *extra]


def final_weights(run_dir: Path) -> dict[str, torch.Tensor]:
    """The model's tensors in the run's latest checkpoint: its model.safetensors, or its shards (parallel=fsdp) read
    whole into the run's model, rebuilt."""
    checkpoint = latest_checkpoint(run_dir / "checkpoints")
    assert checkpoint is not None, f"{run_dir} has no checkpoint"
    if sharded_weights(checkpoint) is None:
        return load_file(checkpoint / "model.safetensors")
    from uncurated.train.restore import load_run

    return {name: value for name, value in load_run(run_dir).model.state_dict().items() if torch.is_tensor(value)}


def logged_losses(run_dir: Path) -> list[float]:
    """The losses a run logged in its metrics.csv, in order."""
    return [float(row.split(",")[2]) for row in (run_dir / "metrics.csv").read_text().splitlines()[1:]]


def torchrun_train(*arguments: str, processes: int = 2, **options) -> subprocess.CompletedProcess:
    """``uncurated train ARGUMENTS`` in ``processes`` processes on this machine, one thread each (see
    :func:`launch.torchrun`); a collective gives up after :data:`launch.COLLECTIVE_TIMEOUT` unless ARGUMENTS set
    ``dist_timeout``."""
    timeout = f"dist_timeout={COLLECTIVE_TIMEOUT.total_seconds():g}"
    return torchrun("-m", "uncurated", "train", timeout, *arguments, processes=processes, **options)


RANK_VIEW = str(Path(__file__).resolve().parent / "rank_view.py")
#: Absolute, so that the processes import this checkout's package from any working directory.
PYTHONPATH = os.pathsep.join(
    filter(None, [str(Path(__file__).resolve().parents[1] / "src"), os.environ.get("PYTHONPATH")])
)
RANK_VIEW_RUN = [*SMOKE, "augment=none", "batch_size=64", "epochs=0.15", "checkpoint_every=2"]


def torchrun_with_rank_view(*arguments: str, environment: dict | None = None, **options):
    """``uncurated train`` (a short run, checkpoints at steps 2 and 4, then ARGUMENTS) in two processes, process 1's
    view of the file system changed as ``environment`` says (``rank_view.py``); ``options`` as :func:`torchrun`'s."""
    environment = {"PYTHONPATH": PYTHONPATH, **(environment or {})}
    timeout = f"dist_timeout={COLLECTIVE_TIMEOUT.total_seconds():g}"
    return torchrun(RANK_VIEW, "train", timeout, *RANK_VIEW_RUN, *arguments, environment=environment, **options)


def traceback_in_uncurated(stderr: str) -> bool:
    """Whether a process printed a traceback through this package (torchrun's own report of the exit is one of
    torch's)."""
    return re.search(r'File ".*/uncurated/', stderr) is not None
