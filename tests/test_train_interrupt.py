"""Preemption costs at most a step: SIGTERM or Ctrl-C stop `uncurated train` at a step boundary with a checkpoint and
exit 0, and the resumed run ends like the uninterrupted one; checkpoints at every epoch's end by default, and by the
clock."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from faultutils import TWO_VIEW, assert_identical, final_state, logged_steps, losses, train_here

from uncurated.train import ConfigError, load_config
from uncurated.train.checkpoint import read_manifest
from uncurated.train.trainer import Trainer

#: 60 steps of 32 (10 an epoch), each logged.
RUN = [*TWO_VIEW, "epochs=6", "keep_checkpoints=1"]


def command(tmp_path: Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "uncurated", "train", *RUN, f"out={tmp_path}", *extra]


#: One thread, as train_here: the same floats.
ONE_THREAD = {**os.environ, "OMP_NUM_THREADS": "1"}


def start(tmp_path: Path, *extra: str) -> subprocess.Popen:
    return subprocess.Popen(
        command(tmp_path, *extra), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=ONE_THREAD
    )


def signal_after(process: subprocess.Popen, run_dir: Path, step: int, number: int, timeout: float = 120) -> None:
    """Send ``number`` to ``process`` once it has logged ``step`` steps."""
    deadline = time.monotonic() + timeout
    while process.poll() is None and logged_steps(run_dir) < step:
        assert time.monotonic() < deadline, f"the run did not reach step {step}"
        time.sleep(0.002)
    assert process.poll() is None, "the run ended before it was signalled"
    process.send_signal(number)


def stopped_step(stderr: str, run_dir: Path) -> int:
    """The step of the one line an interrupted run ends with, checked against the checkpoint it names."""
    lines = [line for line in stderr.splitlines() if "interrupted:" in line]
    assert len(lines) == 1, stderr[-3000:]
    line = lines[0]
    assert "Traceback" not in stderr, stderr[-3000:]
    assert "continue with the same command and resume=true" in line, line
    step = int(line.split(" at step ")[1].split()[0])
    folder = run_dir / "checkpoints" / f"step-{step:08d}"
    assert f"the checkpoint is {folder};" in line, line
    assert read_manifest(folder)["step"] == step
    return step


@pytest.mark.slow
def test_sigterm_mid_epoch_checkpoints_exits_0_and_the_resumed_run_ends_like_the_uninterrupted_one(tmp_path):
    whole = train_here([*RUN, f"out={tmp_path}", "name=whole"])
    process = start(tmp_path, "name=cut")
    signal_after(process, tmp_path / "cut", 13, signal.SIGTERM)
    _, stderr = process.communicate(timeout=120)
    assert process.returncode == 0, stderr[-3000:]
    step = stopped_step(stderr, tmp_path / "cut")
    assert 13 <= step < 60
    assert not (tmp_path / "cut" / "report.json").exists()  # no evaluation of a stopped run

    # The same keys again, resume=true added.
    resumed = subprocess.run(
        command(tmp_path, "name=cut", "resume=true"), capture_output=True, text=True, timeout=300, env=ONE_THREAD
    )
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert f"from step {step}" in resumed.stderr
    assert losses(tmp_path / "cut") == losses(tmp_path / "whole")
    (weights, state), (weights_whole, state_whole) = final_state(tmp_path / "cut"), final_state(tmp_path / "whole")
    assert_identical(weights_whole, weights, "weights")
    assert_identical(state_whole, state, "state")
    assert whole["steps"] == 60


@pytest.mark.slow
def test_ctrl_c_stops_at_a_step_boundary_with_a_checkpoint_and_exits_0(tmp_path):
    process = start(tmp_path, "name=ctrl-c")
    signal_after(process, tmp_path / "ctrl-c", 5, signal.SIGINT)
    _, stderr = process.communicate(timeout=120)
    assert process.returncode == 0, stderr[-3000:]
    assert "KeyboardInterrupt" not in stderr
    assert 5 <= stopped_step(stderr, tmp_path / "ctrl-c") < 60


SIGNALLED = """
import os, signal
from uncurated.train.interruption import StopRequest

before = signal.getsignal(signal.SIGTERM)
request = StopRequest(alone=True)
with request.catching():
    os.kill(os.getpid(), signal.SIGTERM)
    assert request.requested and request.signal_name == "SIGTERM"
    os.kill(os.getpid(), signal.SIGTERM)  # a repeat is ignored
    try:  # a second Ctrl-C in one process stops at once
        os.kill(os.getpid(), signal.SIGINT)
        raise AssertionError("a second Ctrl-C did not stop at once")
    except KeyboardInterrupt:
        pass
assert signal.getsignal(signal.SIGTERM) is before
launched = StopRequest(alone=False)
with launched.catching():
    os.kill(os.getpid(), signal.SIGINT)
    os.kill(os.getpid(), signal.SIGINT)  # under torchrun a Ctrl-C arrives twice: never at once
assert launched.signal_name == "SIGINT"
print("checked")
"""


def test_a_stop_signal_sets_the_request_and_the_handlers_come_back():
    """In a process of its own: signals reach the main thread only, and the suite's workers run tests elsewhere."""
    checked = subprocess.run([sys.executable, "-c", SIGNALLED], capture_output=True, text=True, timeout=120)
    assert checked.returncode == 0 and checked.stdout.strip() == "checked", checked.stderr[-3000:]


def steps_checkpointed(run_dir: Path) -> list[int]:
    return sorted(int(folder.name.split("-")[1]) for folder in (run_dir / "checkpoints").glob("step-*"))


def test_every_epoch_ends_with_a_checkpoint_by_default(tmp_path):
    base = [*TWO_VIEW, "epochs=3", "keep_checkpoints=10", f"out={tmp_path}"]
    train_here([*base, "name=default"])
    assert steps_checkpointed(tmp_path / "default") == [10, 20, 30]
    train_here([*base, "name=steps", "checkpoint_each_epoch=false", "checkpoint_every=7"])
    assert steps_checkpointed(tmp_path / "steps") == [7, 14, 21, 28, 30]


def test_checkpoint_minutes_saves_by_the_main_process_clock(tmp_path, monkeypatch):
    """A clock that moves 61 s at each reading: with checkpoint_minutes=1 a checkpoint is due before every step."""
    now = {"seconds": 0.0}

    def clock() -> float:
        now["seconds"] += 61.0
        return now["seconds"]

    monkeypatch.setattr(Trainer, "clock", staticmethod(clock))
    base = [*TWO_VIEW, "epochs=1", "keep_checkpoints=100", f"out={tmp_path}", "checkpoint_each_epoch=false"]
    train_here([*base, "name=clocked", "checkpoint_minutes=1"])
    assert set(range(10)) <= set(steps_checkpointed(tmp_path / "clocked"))
    with pytest.raises(ConfigError, match="checkpoint_minutes"):
        load_config(["checkpoint_minutes=-1"])


@pytest.mark.slow
def test_under_torchrun_a_signal_to_one_process_stops_every_process_at_the_same_step(tmp_path):
    from launch import _rank_outputs, _workers, free_port

    logs, run_dir = tmp_path / "logs", tmp_path / "three"
    launcher = subprocess.Popen(
        [
            *(sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=3", "--master_addr=127.0.0.1"),
            *(f"--master_port={free_port()}", "--redirects=3", f"--log-dir={logs}"),
            *command(tmp_path, "name=three", "batch_size=30", "train_subset=300", "dist_timeout=30")[1:],
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=ONE_THREAD,
    )
    try:
        deadline = time.monotonic() + 120
        while logged_steps(run_dir) < 3:
            assert launcher.poll() is None and time.monotonic() < deadline, "the run did not reach step 3"
            time.sleep(0.01)
        os.kill(_workers(launcher.pid)[1], signal.SIGTERM)  # process 1 alone is asked
        launcher.communicate(timeout=120)
    finally:
        if launcher.poll() is None:
            launcher.kill()
    outputs = _rank_outputs(logs, 3)
    assert launcher.returncode == 0, outputs
    steps = {stopped_step(stderr, run_dir) for _, stderr in outputs.values()}
    assert len(steps) == 1 and 3 <= steps.pop() < 60
    assert "stopped by SIGTERM" in outputs[1][1] and "stopped by a signal to another process" in outputs[0][1]


def test_a_resumed_runs_train_seconds_count_the_part_before_it_was_stopped(tmp_path, monkeypatch):
    """A clock that moves 1000 s at each reading: the part before the stop trains for many thousand seconds on it,
    and the resumed run's report counts them with its own."""
    from uncurated.train.checkpoint import checkpoint_metadata, latest_checkpoint
    from uncurated.train.interruption import RunInterrupted

    now = {"seconds": 0.0}

    def clock() -> float:
        now["seconds"] += 1000.0
        return now["seconds"]

    original = Trainer.step

    def asked_to_stop(self, batch):
        if self.position.step == 4:
            self.stop_request.signal_name = "SIGTERM"
        return original(self, batch)

    monkeypatch.setattr(Trainer, "clock", staticmethod(clock))
    monkeypatch.setattr(Trainer, "step", asked_to_stop)
    args = [*TWO_VIEW, "epochs=1", f"out={tmp_path}", "name=timed"]
    with pytest.raises(RunInterrupted):
        train_here(args)
    before = checkpoint_metadata(latest_checkpoint(tmp_path / "timed" / "checkpoints"))["train_seconds"]
    assert before >= 5000  # five steps, each reading the clock
    monkeypatch.setattr(Trainer, "step", original)
    now["seconds"] = 0.0  # a new process's clock
    report = train_here([*args, "resume=true"])
    assert report["train_seconds"] > before  # the resumed part alone would be less
    assert report["train_seconds"] == pytest.approx(before + now["seconds"] - 2000.0)  # its first and last readings


def test_ctrl_c_outside_the_steps_ends_with_one_line_and_status_130(monkeypatch, capsys):
    import uncurated.train.run as run
    from uncurated.cli import main

    def interrupted(config, notes=()):
        raise KeyboardInterrupt  # while the data loads, say, where no handler is installed

    monkeypatch.setattr(run, "train", interrupted)
    try:
        main(["train", "progress=false"])
    except KeyboardInterrupt:
        pytest.fail("Ctrl-C escaped the command as a KeyboardInterrupt (a traceback)")
    except SystemExit as stopped:
        assert stopped.code == 130
    else:
        pytest.fail("the command did not exit")
    err = capsys.readouterr().err
    assert err.strip().splitlines() == [
        "uncurated train: interrupted: the last checkpoint is intact; resume=true continues"
    ]
