"""Distributed: one of two gloo processes killed, the other exits with a clear error instead of hanging, and the
two started again resume from the last checkpoint and end like one process trained without interruption."""

import os
import signal
import socket
import subprocess
import sys
import time

import pytest
import torch
from faultutils import RUNNER, TWO_VIEW, final_state, kill_after_step, train_here

pytest_plugins = ["faults_summary"]

TIMEOUT = 30  # dist_timeout: the longest a process may wait for the other


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def start_ranks(args: list[str], log_dir) -> list[subprocess.Popen]:
    """Two training processes joined as torchrun would join them, each on one thread, logging to files."""
    port, processes = free_port(), []
    for rank in range(2):
        environment = {
            **os.environ,
            "OMP_NUM_THREADS": "1",
            "WORLD_SIZE": "2",
            "RANK": str(rank),
            "LOCAL_RANK": str(rank),
            "MASTER_ADDR": "127.0.0.1",
            "MASTER_PORT": str(port),
        }
        with open(log_dir / f"rank{rank}.log", "ab") as log:
            processes.append(
                subprocess.Popen([sys.executable, "-c", RUNNER, *args], stdout=log, stderr=log, env=environment)
            )
    return processes


@pytest.mark.slow
def test_a_dead_peer_stops_the_other_process_which_resumes_with_it_later(tmp_path, fault_record):
    common = [
        *TWO_VIEW,
        "objective=sogclr",
        "norm=none",
        "augment=none",
        "projection_layers=1",
        "epochs=3",
        "checkpoint_every=4",
        f"out={tmp_path}",
        f"dist_timeout={TIMEOUT}",
    ]
    train_here([*common, "name=one"])
    run = [*common, "name=two"]
    main, other = start_ranks(run, tmp_path)
    kill_after_step(other, tmp_path / "two", 10)  # rank 1 dies; rank 0 holds the run folder and the metrics
    killed_at = time.monotonic()
    try:
        status = main.wait(TIMEOUT + 30)
    except subprocess.TimeoutExpired:
        main.send_signal(signal.SIGKILL)
        pytest.fail("the surviving process hung after its peer died")
    log = (tmp_path / "rank0.log").read_text()
    assert status != 0 and time.monotonic() - killed_at < TIMEOUT + 30
    assert "PeerLost: rank 0 of 2" in log and "resume=true" in log, log[-2000:]
    assert not (tmp_path / "two" / "lock").exists()  # released on the way out

    processes = start_ranks([*run, "resume=true"], tmp_path)
    statuses = [process.wait(300) for process in processes]
    assert statuses[0] == 0, (tmp_path / "rank0.log").read_text()[-3000:]
    # These ranks call train() directly, not the CLI, so gloo may still abort at interpreter exit after the run
    # finished (see end_training_process, which `uncurated train` calls to avoid it).
    assert statuses[1] == 0 or "terminate called" in (tmp_path / "rank1.log").read_text(), statuses
    assert "resuming two" in (tmp_path / "rank0.log").read_text()
    (weights, state), (expected, expected_state) = final_state(tmp_path / "two"), final_state(tmp_path / "one")
    for name in expected:
        torch.testing.assert_close(weights[name], expected[name], rtol=1e-5, atol=1e-6, msg=name)
    assert state["position"] == expected_state["position"]
    fault_record("distributed", 1, 1)


def test_a_failed_collective_inside_a_step_is_a_lost_peer_and_other_errors_are_not():
    from uncurated.train.distributed import Distributed, PeerLost

    context = Distributed(rank=0, world_size=2)
    dropped = "[third_party/gloo/gloo/transport/tcp/pair.cc:553] Connection closed by peer [127.0.0.1]:15754."
    with pytest.raises(PeerLost, match=r"rank 0 of 2: a training step failed \(\[third_party/gloo.*resume=true"):
        with context.peers_answering("a training step"):
            raise RuntimeError(dropped)
    with pytest.raises(RuntimeError, match="mat1 and mat2 shapes cannot be multiplied") as raised:
        with context.peers_answering("a training step"):
            raise RuntimeError("mat1 and mat2 shapes cannot be multiplied (4x3 and 4x3)")
    assert not isinstance(raised.value, PeerLost)
    with pytest.raises(RuntimeError, match="Connection closed") as alone:  # one process has no peers to lose
        with Distributed().peers_answering("a training step"):
            raise RuntimeError(dropped)
    assert not isinstance(alone.value, PeerLost)
