"""Resource trouble: a full disk while checkpointing, two runs in one folder, a resume that changed what the
saved state depends on."""

import errno
import socket
import subprocess

import pytest
from faultutils import OBJECTIVES, TWO_VIEW, assert_identical, final_state, train_here

from uncurated.train import ConfigError
from uncurated.train import checkpoint as checkpoint_module
from uncurated.train.checkpoint import latest_checkpoint, verify_checkpoint
from uncurated.train.lock import RunLock, RunLocked
from uncurated.train.trainer import CheckpointWriteError

pytest_plugins = ["faults_summary"]


def filling_disk(real_save, fail_from_call: int):
    """A writer of the training state (``save_state``) that, from its ``fail_from_call``-th call on, writes
    half the file and fails: disk full."""
    calls = {"count": 0}

    def save(obj, path, *args, **kwargs):
        calls["count"] += 1
        if calls["count"] < fail_from_call:
            return real_save(obj, path, *args, **kwargs)
        with open(path, "wb") as file:
            file.write(b"\0" * 1000)
        raise OSError(errno.ENOSPC, "No space left on device")

    return save


def test_a_full_disk_stops_the_run_with_the_previous_checkpoint_valid_and_the_run_resumes(
    tmp_path, monkeypatch, fault_record
):
    common = [*TWO_VIEW, *OBJECTIVES["sogclr"], f"out={tmp_path}", "epochs=1.5", "checkpoint_every=4"]
    common.append("checkpoint_each_epoch=false")  # checkpoints at steps 4, 8, 12 and 15 only
    train_here([*common, "name=whole"])
    # Two files per checkpoint (the objective state of the one process, then the training state): the third fails.
    monkeypatch.setattr(checkpoint_module, "save_state", filling_disk(checkpoint_module.save_state, 5))
    with pytest.raises(
        CheckpointWriteError,
        match=r"checkpoint of step 12 .*No space left on device.*"
        r"previous checkpoint \(.*step-00000008\) is intact",
    ):
        train_here([*common, "name=full"])
    checkpoints = tmp_path / "full" / "checkpoints"
    assert latest_checkpoint(checkpoints).name == "step-00000008"
    verify_checkpoint(checkpoints / "step-00000008")
    assert not list(checkpoints.glob(".step-*")), "the failed write left its temporary folder"
    monkeypatch.undo()  # space freed
    train_here([*common, "name=full", "resume=true"])
    (weights, state), (expected_weights, expected_state) = (
        final_state(tmp_path / "full"),
        final_state(tmp_path / "whole"),
    )
    assert_identical(expected_weights, weights, "weights")
    assert_identical(expected_state, state, "state")
    fault_record("resource", 1, 1)


@pytest.fixture
def other_process():
    """A live process that is not this one (its pid stands for another training run)."""
    process = subprocess.Popen(["sleep", "60"])
    yield process
    process.kill()
    process.wait()


def test_a_run_folder_in_use_is_refused_and_a_stale_lock_is_taken_over(tmp_path, other_process, fault_record):
    common = [*TWO_VIEW, *OBJECTIVES["infonce"], f"out={tmp_path}", "epochs=0.3", "name=run"]
    lock = tmp_path / "run" / "lock"
    lock.parent.mkdir()
    host = socket.gethostname()
    lock.write_text(f"{other_process.pid} {host}\n")
    with pytest.raises(RunLocked, match=rf"in use by process {other_process.pid} on {host}"):
        train_here(common)
    assert not (tmp_path / "run" / "checkpoints").exists()
    lock.write_text(f"{other_process.pid} another-host\n")  # a process that cannot be checked counts as alive
    with pytest.raises(RunLocked, match="in use by process .* on another-host"):
        train_here(common)
    lock.write_text("garbage")
    with pytest.raises(RunLocked, match="does not name a process"):
        train_here(common)
    other_process.kill()
    other_process.wait()
    lock.write_text(f"{other_process.pid} {host}\n")  # killed: the lock is stale
    with pytest.warns(UserWarning, match=f"stale lock .* of process {other_process.pid}"):
        train_here(common)
    assert not lock.exists()  # released at the end
    assert isinstance(RunLocked("x"), ConfigError)  # the command line reports it as a usage error
    fault_record("resource", 4, 4)


def test_two_locks_on_one_folder_exclude_each_other(tmp_path):
    first, second = RunLock(tmp_path), RunLock(tmp_path)
    first.acquire()
    second.owner = f"{first.owner.split()[0]}0 {socket.gethostname()}"  # as if another process
    with pytest.raises(RunLocked):
        second.acquire()
    second.release()  # not its lock: nothing happens
    assert (tmp_path / "lock").read_text().strip() == first.owner
    first.release()
    second.acquire()
    assert (tmp_path / "lock").read_text().strip() == second.owner
