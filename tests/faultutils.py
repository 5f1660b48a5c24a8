"""Helpers of the fault tests: tiny training runs in this process or in a subprocess that can be killed."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import torch
from safetensors.torch import load_file

import uncurated.train.run as run
from uncurated.train import load_config, train
from uncurated.train.checkpoint import FAULT_VARIABLE, latest_checkpoint, read_objective_states, read_training_state

#: A two-view run of a few seconds: 320 digits, batches of 32 (10 steps an epoch), an MLP with batch norm.
TWO_VIEW = [
    "preset=digits",
    "progress=false",
    "log_every=1",
    "probe_train_size=0",
    "widths=[32]",
    "projection_dim=16",
    "batch_size=32",
    "train_subset=320",
    "warmup_epochs=0.5",
]

#: Objective settings: a batch objective, and two global ones with per-sample state.
OBJECTIVES = {
    "infonce": ["objective=simclr"],
    "sogclr": ["objective=sogclr"],
    "nuclr": ["objective=nuclr", "objective.freeze_epochs=0.5", "objective.temperature=0.2"],
}

#: What the subprocess runs: training without the final evaluation, which the fault tests do not need.
RUNNER = (
    "import sys; import uncurated.train.run as run; from uncurated.train import load_config; "
    "run.evaluate = lambda *args, **kwargs: {}; run.train(load_config(sys.argv[1:]))"
)


def image_text(data_dir: Path) -> list[str]:
    """An image-text run on generated captions of a small fake Fashion-MNIST written to ``data_dir``.

    The text tower is the trained transformer, not the preset's frozen MiniLM: MiniLM embeds the captions
    a process has not cached yet in batches whose padding depends on what is cached, so its floats differ
    in the last bits between an uninterrupted process and a resumed one, and these tests compare bit for bit.
    """
    from fakedata import write_fake_fashion_mnist

    if not data_dir.exists():
        write_fake_fashion_mnist(data_dir, sizes={"train": 320, "test": 20})
    return [
        "preset=fashion-captions",
        "progress=false",
        "log_every=1",
        "probe_train_size=0",
        f"data_dir={data_dir}",
        "image_encoder=mlp",
        "widths=[32]",
        "projection_dim=16",
        "text_encoder=transformer",
        "text_width=16",
        "text_heads=2",
        "text_layers=1",
        "max_caption_length=12",
        "batch_size=32",
        "warmup_epochs=0.5",
        "augment=digits",
    ]


def train_here(args: list[str]) -> dict:
    """Train in this process on one thread (as the subprocesses do, so that results agree bit for bit),
    without the final evaluation."""
    threads, evaluate = torch.get_num_threads(), run.evaluate
    torch.set_num_threads(1)
    run.evaluate = lambda *args, **kwargs: {}
    try:
        return train(load_config(args))
    finally:
        torch.set_num_threads(threads)
        run.evaluate = evaluate


def start(args: list[str], log: Path, fault: str | None = None) -> subprocess.Popen:
    """Start a training subprocess on one thread; ``fault`` sets the checkpoint fault hook."""
    environment = {**os.environ, "OMP_NUM_THREADS": "1"}
    environment.pop(FAULT_VARIABLE, None)
    if fault is not None:
        environment[FAULT_VARIABLE] = fault
    with open(log, "ab") as output:
        return subprocess.Popen([sys.executable, "-c", RUNNER, *args], stdout=output, stderr=output, env=environment)


def logged_steps(run_dir: Path) -> int:
    """The number of steps metrics.csv holds (log_every=1)."""
    try:
        return max(len((run_dir / "metrics.csv").read_text().splitlines()) - 1, 0)
    except FileNotFoundError:
        return 0


def kill_after_step(process: subprocess.Popen, run_dir: Path, step: int, timeout: float = 300) -> int:
    """SIGKILL ``process`` as soon as it has logged ``step`` steps; return its exit status."""
    deadline = time.monotonic() + timeout
    while process.poll() is None and logged_steps(run_dir) < step:
        if time.monotonic() > deadline:
            process.kill()
            raise TimeoutError(f"the run did not reach step {step} in {timeout} s")
        time.sleep(0.002)
    if process.poll() is None:
        process.send_signal(signal.SIGKILL)
    return process.wait(timeout)


def final_state(run_dir: Path) -> tuple[dict, dict]:
    """The weights and the training state of the run's latest checkpoint, the objective states of its processes
    under ``"objective"``."""
    folder = latest_checkpoint(run_dir / "checkpoints")
    return load_file(folder / "model.safetensors"), {
        **read_training_state(folder),
        "objective": read_objective_states(folder),
    }


def assert_identical(expected, actual, where: str = "state") -> None:
    """Recursive bitwise equality of tensors, arrays, mappings, sequences and plain values."""
    if isinstance(expected, torch.Tensor):
        assert isinstance(actual, torch.Tensor) and expected.dtype == actual.dtype, where
        assert torch.equal(expected, actual), f"{where} differs"
    elif isinstance(expected, np.ndarray):
        assert np.array_equal(expected, actual), f"{where} differs"
    elif isinstance(expected, dict):
        assert expected.keys() == actual.keys(), (
            f"{where}: keys {sorted(map(str, expected))} != {sorted(map(str, actual))}"
        )
        for key in expected:
            assert_identical(expected[key], actual[key], f"{where}[{key!r}]")
    elif isinstance(expected, (list, tuple)):
        assert len(expected) == len(actual), f"{where}: length"
        for number, (left, right) in enumerate(zip(expected, actual, strict=True)):
            assert_identical(left, right, f"{where}[{number}]")
    else:
        assert expected == actual, f"{where}: {expected!r} != {actual!r}"


def losses(run_dir: Path) -> list[str]:
    """The loss column of metrics.csv, as written."""
    rows = (run_dir / "metrics.csv").read_text().splitlines()
    column = rows[0].split(",").index("loss")
    return [row.split(",")[column] for row in rows[1:]]
