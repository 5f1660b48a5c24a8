"""A run folder under torchrun: one the processes do not share is refused before training, on every process; a
checkpoint write that fails on one process (its objective file, or its DCP shards under parallel=fsdp) stops every
process and leaves nothing behind."""

import os

import pytest
from training import torchrun_with_rank_view, traceback_in_uncurated

from uncurated.train.checkpoint import latest_checkpoint, sharded_weights


def test_a_run_folder_another_process_cannot_see_is_refused_at_the_start_on_every_process(tmp_path, monkeypatch):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(tmp_path)  # out= is relative: process 1, started in elsewhere/, names another folder
    finished = torchrun_with_rank_view(
        "out=runs", "name=unshared", environment={"RANK_VIEW_CWD": str(elsewhere)}, succeed=False
    )
    assert finished.returncode != 0
    message = "uncurated train: error: the run folder runs/unshared is not the same folder for every training process"
    assert finished.stderr.count(message) == 2, finished.stderr[-3000:]  # once by each process
    assert finished.stderr.count("process 1 cannot write runs/unshared/.shared-probe-") == 2
    assert finished.stderr.count("must be on storage every node shares") == 2
    assert not traceback_in_uncurated(finished.stderr)
    assert sorted(os.listdir(tmp_path / "runs" / "unshared")) == [], "something was written, the probes included"
    assert os.listdir(elsewhere) == []


def test_a_checkpoint_write_that_fails_on_one_process_stops_both_and_leaves_no_temporary_folder(tmp_path):
    environment = {"RANK_VIEW_LOST_STAGING": "4"}  # process 1 cannot see the folder of step 4's checkpoint
    finished = torchrun_with_rank_view(f"out={tmp_path}", "name=lost", environment=environment, succeed=False)
    assert finished.returncode != 0
    message = "uncurated train: stopped: writing the checkpoint of step 4 into "
    assert finished.stderr.count(message) == 2, finished.stderr[-3000:]  # CheckpointWriteError, by each process
    assert "(SafetensorError: " in finished.stderr and not traceback_in_uncurated(finished.stderr)
    checkpoints = tmp_path / "lost" / "checkpoints"
    assert not list(checkpoints.glob(".step-*")), "the failed write left its temporary folder"
    assert latest_checkpoint(checkpoints).name == "step-00000002"


@pytest.mark.slow  # two short runs under torchrun: 15 to 35 s on 2 shared cores
@pytest.mark.parametrize("background", [False, True])
def test_a_sharded_checkpoint_write_that_fails_on_one_process_stops_both_and_the_previous_one_resumes(
    tmp_path, background
):
    """parallel=fsdp: process 1's DCP write of step 4's shards fails (a full disk) after both planned the save.
    Every process stops with CheckpointWriteError, no temporary folder is left, the checkpoint of step 2 stays the
    latest, and a resumed run continues from it to the end. ``background`` (checkpoint_async=true): the write runs in
    DCP's thread while training goes on, and its failure is raised at the next save, step 6's."""
    environment = {"RANK_VIEW_FULL_SHARDS": "4"}
    run = [f"out={tmp_path}", "name=full", "parallel=fsdp", "norm=none"]
    if background:
        run += ["checkpoint_async=true", "epochs=0.3"]  # 7 steps: checkpoints at 2 and 4 in the background, 6, 7
    finished = torchrun_with_rank_view(*run, environment=environment, succeed=False)
    assert finished.returncode != 0
    message = "uncurated train: stopped: writing the checkpoint of step 4 into "
    assert finished.stderr.count(message) == 2, finished.stderr[-3000:]  # CheckpointWriteError, by each process
    assert "No space left on device (planted)" in finished.stderr and not traceback_in_uncurated(finished.stderr)
    checkpoints = tmp_path / "full" / "checkpoints"
    assert not list(checkpoints.glob(".step-*")), "the failed write left its temporary folder"
    assert sharded_weights(latest_checkpoint(checkpoints)) is not None  # step 2's, written as shards
    assert latest_checkpoint(checkpoints).name == "step-00000002"
    resumed = torchrun_with_rank_view(*run, "resume=true")
    assert "steps of 64 from step 2\n" in resumed.stderr, resumed.stderr[-3000:]
    assert latest_checkpoint(checkpoints).name == ("step-00000007" if background else "step-00000004")
