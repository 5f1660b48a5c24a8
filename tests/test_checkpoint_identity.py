"""Checkpoints know whose they are: every file carries the run and the step, and a file of another run or step is
refused naming both, never passed over as damage is."""

import hashlib
import json
import shutil
import warnings
from pathlib import Path

import pytest
import torch
from training import torchrun_with_rank_view, traceback_in_uncurated

from uncurated.train.checkpoint import (
    MANIFEST,
    CheckpointIdentityError,
    CheckpointWarning,
    checkpoint_run,
    latest_checkpoint,
    objective_file,
    save_checkpoint,
    verify_checkpoint,
)
from uncurated.train.state_codec import load_state, save_state


def checkpoint(directory: Path, step: int, run: str, fill: float) -> Path:
    model = torch.nn.Linear(2, 2)
    torch.nn.init.constant_(model.weight, fill)
    state = {"rows": torch.full((3,), fill)}
    return save_checkpoint(directory, step, model, {"position": step}, keep=3, objective_state=state, run=run)


def plant(source: Path, folder: Path, name: str) -> None:
    """Copy ``source`` over ``folder/name`` and re-hash it in the manifest, as whoever mixes folders would."""
    shutil.copyfile(source, folder / name)
    manifest = json.loads((folder / MANIFEST).read_text())
    data = (folder / name).read_bytes()
    manifest["files"][name] = {"bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}
    (folder / MANIFEST).write_text(json.dumps(manifest))


@pytest.mark.parametrize("name", ["model.safetensors", "state.safetensors", objective_file(0, 1)])
def test_a_file_of_another_run_is_refused_naming_both_runs_not_passed_over(tmp_path, name):
    checkpoint(tmp_path / "a", 1, "aaaa", 1.0)
    ours = checkpoint(tmp_path / "a", 2, "aaaa", 2.0)
    theirs = checkpoint(tmp_path / "b", 2, "bbbb", 3.0)
    plant(theirs / name, ours, name)
    expected = (
        rf"checkpoint .*step-00000002 holds a file of another run or step: {name} says run bbbb, step 2; "
        rf"its {MANIFEST} says run aaaa, step 2"
    )
    with pytest.raises(CheckpointIdentityError, match=expected):
        verify_checkpoint(ours)
    with warnings.catch_warnings():
        warnings.simplefilter("error", CheckpointWarning)  # refused, not fallen back from
        with pytest.raises(CheckpointIdentityError, match=expected):
            latest_checkpoint(tmp_path / "a")


def test_a_file_of_another_step_of_the_run_is_refused_naming_both_steps(tmp_path):
    earlier = checkpoint(tmp_path, 1, "aaaa", 1.0)
    later = checkpoint(tmp_path, 2, "aaaa", 2.0)
    name = objective_file(0, 1)
    plant(earlier / name, later, name)
    with pytest.raises(
        CheckpointIdentityError, match=rf"{name} says run aaaa, step 1; its {MANIFEST} says run aaaa, step 2"
    ):
        latest_checkpoint(tmp_path)


def test_a_checkpoint_written_before_the_identity_is_still_read(tmp_path):
    folder = checkpoint(tmp_path, 1, "aaaa", 1.0)
    manifest = json.loads((folder / MANIFEST).read_text())
    del manifest["run"]
    (folder / MANIFEST).write_text(json.dumps(manifest))
    verify_checkpoint(folder)
    assert latest_checkpoint(tmp_path) == folder


def test_a_missing_file_falls_back_naming_the_file_and_the_step(tmp_path):
    earlier = checkpoint(tmp_path, 1, "aaaa", 1.0)
    later = checkpoint(tmp_path, 2, "aaaa", 2.0)
    (later / objective_file(0, 1)).unlink()
    with pytest.warns(
        CheckpointWarning,
        match=rf"step-00000002 is incomplete: {objective_file(0, 1)} is missing.*; falling back to the checkpoint "
        r"of step 1, .*step-00000001",
    ):
        assert latest_checkpoint(tmp_path) == earlier


def test_a_resumed_run_refuses_a_file_of_another_run_on_every_process_and_writes_nothing(tmp_path):
    torchrun_with_rank_view(f"out={tmp_path}", "name=mixed")
    run_dir = tmp_path / "mixed"
    folder = latest_checkpoint(run_dir / "checkpoints")
    name = objective_file(1, 2)
    other = tmp_path / name  # process 1's file as another run would have written it at this step
    save_state(load_state(folder / name), other, label={"run": "0123456789abcdef", "step": "4"})
    plant(other, folder, name)
    before = {path: path.stat().st_mtime_ns for path in run_dir.rglob("*")}
    finished = torchrun_with_rank_view(f"out={tmp_path}", "name=mixed", "resume=true", succeed=False)
    assert finished.returncode != 0
    message = (
        f"holds a file of another run or step: {name} says run 0123456789abcdef, step 4; its {MANIFEST} says run "
        f"{checkpoint_run(folder)}, step 4"
    )
    assert finished.stderr.count(message) == 2, finished.stderr[-3000:]  # by each process
    assert not traceback_in_uncurated(finished.stderr)
    assert {path: path.stat().st_mtime_ns for path in run_dir.rglob("*")} == before, "the refused resume wrote"
