"""Two processes of half the batch each train exactly as one process of the whole batch."""

import os
import socket
import subprocess
import sys

import pytest
import torch

from training import SMOKE, final_weights
from uncurated.train import load_config, train


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.mark.parametrize("objective", ["simclr", "sogclr"])
def test_two_processes_of_half_the_batch_match_one_process(tmp_path, objective):
    """gloo on CPU; an MLP without batch norm and no augmentation, so every sample's embedding is exact."""
    common = [
        *SMOKE,
        f"out={tmp_path}",
        "augment=none",
        "norm=none",
        "projection_layers=1",
        "epochs=0.3",
        "batch_size=64",
        f"objective={objective}",
    ]
    train(load_config([*common, "name=one"]))
    command = [
        sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2", "--master_addr=127.0.0.1",
        f"--master_port={free_port()}", "-m", "uncurated", "train", *common, "name=two",
    ]
    environment = {**os.environ, "OMP_NUM_THREADS": "1"}
    finished = subprocess.run(command, capture_output=True, text=True, timeout=300, env=environment)
    assert finished.returncode == 0, finished.stderr[-3000:]
    one, two = final_weights(tmp_path / "one"), final_weights(tmp_path / "two")
    for name in one:
        torch.testing.assert_close(two[name], one[name], rtol=1e-5, atol=1e-6, msg=name)
    losses = [
        [float(row.split(",")[2]) for row in (tmp_path / run / "metrics.csv").read_text().splitlines()[1:]]
        for run in ("one", "two")
    ]
    assert losses[0] == pytest.approx(losses[1], rel=1e-5)
