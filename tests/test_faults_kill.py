"""Kill at any point: runs SIGKILLed at random steps and inside checkpoint writes, resumed, end bit for bit
like an uninterrupted run, and damaged checkpoints are passed over by checksum."""

import random
import shutil

import pytest
from faultutils import (
    OBJECTIVES,
    TWO_VIEW,
    assert_identical,
    final_state,
    image_text,
    kill_after_step,
    losses,
    start,
    train_here,
)
from torch import nn

from uncurated.train import ConfigError
from uncurated.train.checkpoint import (
    FAULT_STAGES,
    MANIFEST,
    STATE,
    WEIGHTS,
    CheckpointError,
    CheckpointWarning,
    latest_checkpoint,
    load_checkpoint,
    save_checkpoint,
    verify_checkpoint,
)

pytest_plugins = ["faults_summary"]

EPOCHS, STEPS_PER_EPOCH, CHECKPOINT_EVERY = 4, 10, 4


def kill_plan(seed: int, kills: int) -> list[tuple[str, int, str | None]]:
    """``kills`` faults, alternately ("step", s, None): SIGKILL once step s is logged, at a random s a little
    after the previous fault, and ("write", s, stage): SIGKILL inside the checkpoint write of step s, after
    ``stage``, s the second checkpoint after the previous fault (so the resumed run always reaches it)."""
    rng = random.Random(seed)
    plan, last = [], 0
    for number in range(kills):
        if number % 2 == 0:
            step = rng.randint(last + 1, last + CHECKPOINT_EVERY + 1)
            plan.append(("step", step, None))
        else:
            step = (last // CHECKPOINT_EVERY + 2) * CHECKPOINT_EVERY
            plan.append(("write", step, rng.choice(FAULT_STAGES)))
        last = step
    assert last < EPOCHS * STEPS_PER_EPOCH
    return plan


def killed_and_resumed(tmp_path, common: list[str], plan) -> int:
    """Run ``common`` as ``name=killed`` through the kills of ``plan``, then to the end; return the kills."""
    run_dir, log = tmp_path / "killed", tmp_path / "killed.log"
    for number, (kind, step, stage) in enumerate(plan):
        args = [*common, "name=killed", f"resume={'true' if number else 'false'}"]
        if kind == "step":
            status = kill_after_step(start(args, log), run_dir, step)
        else:
            status = start(args, log, fault=f"{step}:{stage}").wait(300)
        assert status == -9, f"fault {kind} {step} {stage} did not kill the run:\n{log.read_text()[-3000:]}"
        for folder in (run_dir / "checkpoints").glob("step-*"):
            verify_checkpoint(folder)  # nothing published is ever half-written
    finished = start([*common, "name=killed", "resume=true"], log)
    assert finished.wait(300) == 0, log.read_text()[-3000:]
    return len(plan)


def check_same_run(tmp_path) -> None:
    """The killed run ended with the uninterrupted one's weights, optimizer, objective state and generators."""
    (weights, state), (weights_whole, state_whole) = final_state(tmp_path / "killed"), final_state(tmp_path / "whole")
    assert_identical(weights_whole, weights, "weights")
    assert_identical(state_whole, state, "state")
    assert losses(tmp_path / "killed") == losses(tmp_path / "whole")  # every step logged once, with the same loss
    assert not list((tmp_path / "killed" / "checkpoints").glob(".step-*")), "temporary folders left behind"
    assert not (tmp_path / "killed" / "lock").exists()


def test_two_view_sogclr_survives_kills_at_random_steps_and_inside_checkpoint_writes(tmp_path, fault_record):
    common = [
        *TWO_VIEW,
        *OBJECTIVES["sogclr"],
        f"out={tmp_path}",
        f"epochs={EPOCHS}",
        f"checkpoint_every={CHECKPOINT_EVERY}",
    ]
    train_here([*common, "name=whole"])
    kills = killed_and_resumed(tmp_path, common, kill_plan(seed=7, kills=2))
    check_same_run(tmp_path)
    fault_record("kill", kills, kills)


@pytest.mark.slow
@pytest.mark.parametrize("pipeline", ["two_view", "image_text"])
@pytest.mark.parametrize("objective", ["infonce", "sogclr", "nuclr"])
def test_every_pipeline_and_objective_survives_repeated_kills(tmp_path, pipeline, objective, fault_record):
    data = TWO_VIEW if pipeline == "two_view" else image_text(tmp_path / "fashion")
    if pipeline == "image_text":
        data = [*data, "train_subset=320", "probe_layer=encoder"]
    common = [
        *data,
        *OBJECTIVES[objective],
        f"out={tmp_path}",
        f"epochs={EPOCHS}",
        f"checkpoint_every={CHECKPOINT_EVERY}",
    ]
    if pipeline == "image_text" and objective == "infonce":
        common[common.index("objective=simclr")] = "objective=clip"
    train_here([*common, "name=whole"])
    seed = sorted(OBJECTIVES).index(objective) + 10 * (pipeline == "image_text")
    kills = killed_and_resumed(tmp_path, common, kill_plan(seed=seed, kills=4))
    check_same_run(tmp_path)
    fault_record("kill", kills, kills)


# Damaged checkpoints -------------------------------------------------------------------------


def flip_byte(path):
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))


DAMAGE = {
    "truncated weights": lambda folder: (folder / WEIGHTS).write_bytes((folder / WEIGHTS).read_bytes()[:100]),
    "flipped byte in the state": lambda folder: flip_byte(folder / STATE),
    "zero-byte state": lambda folder: (folder / STATE).write_bytes(b""),
    "missing weights": lambda folder: (folder / WEIGHTS).unlink(),
    "garbage manifest": lambda folder: (folder / MANIFEST).write_text("{not json"),
    "flipped byte in the weights": lambda folder: flip_byte(folder / WEIGHTS),
}


@pytest.mark.parametrize("damage", DAMAGE)
def test_a_damaged_latest_checkpoint_falls_back_to_the_previous_one_with_a_warning(tmp_path, damage, fault_record):
    model = nn.Linear(4, 3)
    for step in (1, 2):
        save_checkpoint(tmp_path, step, model, {"step": step}, keep=3)
    DAMAGE[damage](tmp_path / "step-00000002")
    with pytest.warns(
        CheckpointWarning, match="step-00000002.*falling back to the checkpoint of step 1, .*step-00000001"
    ):
        assert latest_checkpoint(tmp_path).name == "step-00000001"
    with pytest.raises(CheckpointError, match="step-00000002"):
        load_checkpoint(tmp_path / "step-00000002", nn.Linear(4, 3))
    DAMAGE[damage](tmp_path / "step-00000001")
    with pytest.raises(CheckpointError, match="no valid checkpoint"):
        latest_checkpoint(tmp_path)
    fault_record("corrupt checkpoint", 2, 2)


def test_a_resumed_run_falls_back_over_a_corrupt_checkpoint_and_still_ends_like_an_uninterrupted_one(
    tmp_path, fault_record
):
    common = [*TWO_VIEW, *OBJECTIVES["nuclr"], f"out={tmp_path}", "epochs=1", "checkpoint_every=4"]
    train_here([*common, "name=whole"])
    train_here([*common, "name=killed"])
    folders = sorted((tmp_path / "killed" / "checkpoints").glob("step-*"))
    assert [folder.name for folder in folders] == ["step-00000008", "step-00000010"]
    flip_byte(folders[1] / STATE)  # the finished run's last checkpoint damaged on disk
    with pytest.warns(
        CheckpointWarning, match="step-00000010 is corrupt.*falling back to the checkpoint of step 8, .*step-00000008"
    ):
        train_here([*common, "name=killed", "resume=true"])
    check_same_run(tmp_path)
    fault_record("corrupt checkpoint", 1, 1)


def test_a_run_whose_checkpoints_are_all_corrupt_refuses_to_start_over_silently(tmp_path, fault_record):
    common = [*TWO_VIEW, *OBJECTIVES["infonce"], f"out={tmp_path}", "epochs=0.3", "name=run"]
    train_here(common)
    for folder in (tmp_path / "run" / "checkpoints").glob("step-*"):
        flip_byte(folder / WEIGHTS)
    with pytest.raises(CheckpointError, match="no valid checkpoint"):
        train_here([*common, "resume=true"])
    shutil.rmtree(tmp_path / "run")
    fault_record("corrupt checkpoint", 1, 1)


def test_a_config_change_that_breaks_the_state_is_refused_naming_the_key(tmp_path, fault_record):
    common = [*TWO_VIEW, *OBJECTIVES["sogclr"], f"out={tmp_path}", "epochs=0.3", "name=run"]
    train_here(common)
    saved = (tmp_path / "run" / "config.yaml").read_text()
    for change, named in [
        ("batch_size=16", "batch_size: 32 -> 16"),
        ("objective=nuclr", "objective: 'sogclr'"),
        ("widths=[64]", "widths: [32] -> [64]"),
        ("train_subset=288", "the dataset size: 320 -> 288"),
    ]:
        with pytest.raises(ConfigError, match=rf"(?s)cannot resume .*{named.replace('[', '.').replace(']', '.')}"):
            train_here([*common, "resume=true", change])
        assert (tmp_path / "run" / "config.yaml").read_text() == saved  # left describing the saved state
    train_here([*common, "resume=true", "log_every=3", "keep_checkpoints=1"])  # how the run is watched may change
    fault_record("resource", 4, 4)
