"""Recovery without a person: under ``torchrun --max-restarts``, ``resume=auto`` continues a run one of whose
processes was killed mid-run from its last checkpoint, and ends where the same run resumed by hand ends."""

import pytest
import torch
from launch import torchrun
from training import COLLECTIVE_TIMEOUT, PYTHONPATH, RANK_VIEW, SMOKE, final_weights, logged_losses

from uncurated.train import load_config
from uncurated.train.checkpoint import latest_checkpoint

# gloo on CPU; an MLP without batch norm and no augmentation: 15 steps, checkpoints every 4.
RUN = [*SMOKE, "augment=none", "norm=none", "batch_size=64", "epochs=0.7", "checkpoint_every=4"]
KILLED = {"PYTHONPATH": PYTHONPATH, "RANK_VIEW_RANK": "1", "RANK_VIEW_KILL_AT_STEP": "6"}
"""Process 1 dies as it starts step 6, on torchrun's first attempt: the last checkpoint is step 4's."""


def train(tmp_path, name: str, *arguments: str, kill: bool = True, restarts: int = 0, succeed: bool = True):
    """The run ``name`` in two processes under ``torchrun --max-restarts=restarts``, process 1 killed at step 6 on
    the first attempt if ``kill``."""
    timeout = f"dist_timeout={COLLECTIVE_TIMEOUT.total_seconds():g}"
    common = [RANK_VIEW, "train", timeout, *RUN, f"out={tmp_path}", f"name={name}", *arguments]
    environment = KILLED if kill else {"PYTHONPATH": PYTHONPATH}
    return torchrun(f"--max-restarts={restarts}", *common, environment=environment, succeed=succeed)


def test_resume_auto_is_resume_true():
    assert load_config(["resume=auto"]).resume is True
    assert load_config(["resume=latest"]).resume is True


@pytest.mark.slow  # three torchruns of two processes: about 80 s on 2 busy cores
def test_a_killed_process_restarted_by_torchrun_continues_as_a_run_resumed_by_hand(tmp_path):
    by_hand = train(tmp_path, "by-hand", "resume=auto", succeed=False)
    assert by_hand.returncode != 0
    assert latest_checkpoint(tmp_path / "by-hand" / "checkpoints").name == "step-00000004"
    train(tmp_path, "by-hand", "resume=true", kill=False)
    restarted = train(tmp_path, "restarted", "resume=auto", restarts=1)
    assert "holds no checkpoint; training from the start" in restarted.stderr  # the first attempt started the run
    expected, got = final_weights(tmp_path / "by-hand"), final_weights(tmp_path / "restarted")
    assert expected.keys() == got.keys()
    for name in expected:
        assert torch.equal(got[name], expected[name]), name
    assert logged_losses(tmp_path / "restarted") == logged_losses(tmp_path / "by-hand")
