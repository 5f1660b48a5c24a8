"""Checkpoints published in the background (``checkpoint_async=true``): the run is the synchronous one, bit for bit,
and a process killed while its checkpoint is being written loses nothing: the previous one is intact and resumes to
the uninterrupted run's end."""

import os
import re
import subprocess
import sys
import threading
import time

import pytest
import torch
from safetensors.torch import load_file
from training import PYTHONPATH, SMOKE, final_weights, logged_losses, torchrun_train

from uncurated.train import background_save, load_config, train, trainer
from uncurated.train.background_save import BackgroundWriter, snapshot
from uncurated.train.checkpoint import (
    FAULT_VARIABLE,
    WEIGHTS,
    latest_checkpoint,
    read_manifest,
    read_training_state,
    sharded_weights,
    verify_checkpoint,
)
from uncurated.train.distributed import Distributed

# An MLP without batch norm and no augmentation: 10 steps, checkpoints at steps 4, 8 and 10.
RUN = [*SMOKE, "augment=none", "norm=none", "batch_size=64", "train_subset=640", "epochs=1", "checkpoint_every=4"]


def test_a_snapshot_keeps_the_values_of_when_it_was_taken():
    weights = torch.ones(3)
    state = {"model": {"w": weights}, "groups": [{"lr": 0.1, "params": ["w"]}], "steps": (torch.tensor(2.0),)}
    copied = snapshot(state)
    weights.add_(1.0)
    assert torch.equal(copied["model"]["w"], torch.ones(3))
    assert copied["groups"] == [{"lr": 0.1, "params": ["w"]}] and isinstance(copied["steps"], tuple)


def test_a_write_that_failed_in_the_background_is_raised_when_finished(tmp_path):
    writer = BackgroundWriter(Distributed())

    def publish(described):
        raise OSError(28, "No space left on device")

    writer.start(4, tmp_path, publish)
    with pytest.raises(RuntimeError, match="still being written"):
        writer.start(8, tmp_path, publish)
    with pytest.raises(ValueError, match="step 4: .*No space left"):
        writer.finish(lambda step, error: ValueError(f"step {step}: {error}"))
    assert writer.finish(lambda step, error: error) is None  # nothing in flight any more


def test_the_main_process_publishes_with_the_checksums_its_writer_took_once_the_shards_are_written(tmp_path):
    """The thread waits for the shards, hashes what this process wrote (its objective file, its DCP file) and
    hands the checksums to the publish; a shard write that failed publishes nothing and removes the folder."""
    staging = tmp_path / ".step-00000004-x"
    (staging / "sharded").mkdir(parents=True)
    (staging / "objective-00000-of-00001.safetensors").write_bytes(b"objective")
    waited, published = [], []

    def shards_written():
        time.sleep(0.2)
        (staging / "sharded" / "__0_0.distcp").write_bytes(b"shards")
        waited.append(True)

    writer = BackgroundWriter(Distributed())
    writer.start(4, staging, lambda described: published.append(described) or staging, shards_written)
    assert writer.finish(lambda step, error: error) == staging and waited == [True]
    assert sorted(published[0]) == ["objective-00000-of-00001.safetensors", "sharded/__0_0.distcp"]
    assert published[0]["sharded/__0_0.distcp"]["bytes"] == len(b"shards")

    def shards_failed():
        raise OSError(28, "No space left on device (shards)")

    writer.start(8, staging, published.append, shards_failed)
    with pytest.raises(ValueError, match="step 8: .*No space left on device \\(shards\\)"):
        writer.finish(lambda step, error: ValueError(f"step {step}: {error}"))
    assert len(published) == 1 and not staging.exists()


class OneOfTwo(Distributed):
    """A process of two, its agreements over the training's group answered as if alone."""

    def everywhere(self, action):
        return action()

    def broadcast_object(self, value):
        return value


def test_the_main_process_publishes_every_writer_s_checksums_over_the_writers_group_and_raises_any_one_s_error(
    tmp_path, monkeypatch
):
    """Two processes: the checksums process 1 reports (gathered over the writers' own group, not the training's)
    reach the publish beside the main process's own, not hashed again; a failure process 1 reports publishes
    nothing, removes the folder and is raised."""
    staging = tmp_path / ".step-00000004-x"
    staging.mkdir()
    (staging / "objective-00000-of-00002.safetensors").write_bytes(b"objective 0")
    others = [({"objective-00001-of-00002.safetensors": {"bytes": 11, "sha256": "1" * 64}}, None)]
    groups = []

    def all_gather_object(value, host_group=None):
        groups.append(host_group)
        return [value, *others]

    monkeypatch.setattr(background_save.group, "new_host_group", lambda timeout: "the writers' group")
    monkeypatch.setattr(background_save.group, "all_gather_object", all_gather_object)
    published = []
    writer = BackgroundWriter(OneOfTwo(rank=0, world_size=2))
    writer.start(4, staging, lambda described: published.append(described) or staging)
    assert writer.finish(lambda step, error: error) == staging and groups == ["the writers' group"]
    assert published[0]["objective-00001-of-00002.safetensors"] == {"bytes": 11, "sha256": "1" * 64}
    assert published[0]["objective-00000-of-00002.safetensors"]["bytes"] == 11
    others[:] = [({}, OSError(28, "No space left on device (process 1)"))]
    writer.start(8, staging, published.append)
    with pytest.raises(ValueError, match="step 8: .*process 1"):
        writer.finish(lambda step, error: ValueError(f"step {step}: {error}"))
    assert len(published) == 1 and not staging.exists()


def test_a_writer_that_is_not_the_main_process_hashes_and_reports_only_the_files_it_wrote(tmp_path, monkeypatch):
    """Process 1's thread reports its own objective file and DCP file, not process 0's, and publishes nothing."""
    staging = tmp_path / ".step-00000004-x"
    (staging / "sharded").mkdir(parents=True)
    for rank in (0, 1):
        (staging / f"objective-0000{rank}-of-00002.safetensors").write_bytes(b"objective %d" % rank)
        (staging / "sharded" / f"__{rank}_0.distcp").write_bytes(b"shards of %d" % rank)
    reported = []

    def all_gather_object(value, host_group=None):
        reported.append(value)
        return [({}, None), value]

    monkeypatch.setattr(background_save.group, "new_host_group", lambda timeout: "the writers' group")
    monkeypatch.setattr(background_save.group, "all_gather_object", all_gather_object)
    writer = BackgroundWriter(OneOfTwo(rank=1, world_size=2))
    writer.start(4, staging, None)
    assert writer.finish(lambda step, error: error) is None
    files, error = reported[0]
    assert error is None and sorted(files) == ["objective-00001-of-00002.safetensors", "sharded/__1_0.distcp"]
    assert files["sharded/__1_0.distcp"]["bytes"] == len(b"shards of 1")


@pytest.mark.slow  # two short runs: about 50 s on 2 busy cores
def test_a_run_that_saves_in_the_background_trains_as_one_that_waits(tmp_path, monkeypatch):
    common = [*RUN, f"out={tmp_path}", "checkpoint_every=5"]  # the last step's checkpoint is written in the background
    train(load_config([*common, "name=waits"]))
    fit, in_flight = trainer.Trainer.fit, []

    def fit_then_look(self, *args, **kwargs):
        log = fit(self, *args, **kwargs)
        in_flight.append(self.writer.step)
        return log

    monkeypatch.setattr(trainer.Trainer, "fit", fit_then_look)
    train(load_config([*common, "name=background", "checkpoint_async=true"]))
    assert in_flight == [None], "the run ended with its last checkpoint still being written"
    expected, got = final_weights(tmp_path / "waits"), final_weights(tmp_path / "background")
    for name in expected:
        assert torch.equal(got[name], expected[name]), name
    assert logged_losses(tmp_path / "background") == logged_losses(tmp_path / "waits")
    kept = sorted(path.name for path in (tmp_path / "background" / "checkpoints").glob("step-*"))
    assert kept == ["step-00000005", "step-00000010"]


@pytest.mark.slow  # three short runs: about 40 s on 2 busy cores
def test_a_process_killed_in_a_background_save_resumes_from_the_previous_checkpoint_to_the_same_end(tmp_path):
    common = [*RUN, f"out={tmp_path}", "checkpoint_async=true"]
    train(load_config([*common, "name=whole"]))
    environment = {**os.environ, "PYTHONPATH": PYTHONPATH, FAULT_VARIABLE: "8:manifest"}  # killed mid-publish
    command = [sys.executable, "-m", "uncurated", "train", *common, "name=cut"]
    killed = subprocess.run(command, env=environment, capture_output=True, text=True)
    assert killed.returncode != 0
    checkpoints = tmp_path / "cut" / "checkpoints"
    assert latest_checkpoint(checkpoints).name == "step-00000004"
    assert list(checkpoints.glob(".step-00000008-*")), "the killed write's temporary folder"
    train(load_config([*common, "name=cut", "resume=true"]))
    expected, got = final_weights(tmp_path / "whole"), final_weights(tmp_path / "cut")
    for name in expected:
        assert torch.equal(got[name], expected[name]), name
    assert logged_losses(tmp_path / "cut") == logged_losses(tmp_path / "whole")
    assert not list(checkpoints.glob(".step-*"))


def test_a_checkpoint_published_after_training_moved_on_keeps_the_step_it_was_taken_at(tmp_path, monkeypatch):
    """The background thread publishes late, once the trainer has stepped past the save: the folder, the manifest
    and the training state still name the step whose state it holds, and its weights are that step's (those of a
    run that waited for each save), copied before training went on."""
    publish = trainer.Trainer._publish

    def publish_late(self, *args, **kwargs):
        if threading.current_thread() is not threading.main_thread():
            taken, deadline = self.position.step, time.monotonic() + 60
            while self.position.step == taken and time.monotonic() < deadline:
                time.sleep(0.01)
        return publish(self, *args, **kwargs)

    common = [*RUN, f"out={tmp_path}", "keep_checkpoints=3"]
    train(load_config([*common, "name=waits"]))
    monkeypatch.setattr(trainer.Trainer, "_publish", publish_late)
    train(load_config([*common, "name=late", "checkpoint_async=true"]))
    folders = sorted((tmp_path / "late" / "checkpoints").glob("step-*"))
    assert [folder.name for folder in folders] == ["step-00000004", "step-00000008", "step-00000010"]
    for folder, step in zip(folders, (4, 8, 10), strict=True):
        assert read_manifest(folder)["step"] == step
        assert read_training_state(folder)["position"]["step"] == step
        waited = load_file(tmp_path / "waits" / "checkpoints" / folder.name / WEIGHTS)
        published = load_file(folder / WEIGHTS)  # the weights of its step, not those training moved on to
        assert all(torch.equal(published[name], waited[name]) for name in waited), folder.name


#: A parallel=fsdp run of two processes saving in the background: 11 steps, checkpoints at steps 4 and 8 (DCP's
#: async_save), then 11 (the run's end, waited for).
SHARDED_RUN = [*SMOKE, "augment=none", "norm=none", "batch_size=64", "epochs=0.5", "checkpoint_every=4"]
SHARDED_RUN += ["pipeline=two_view", "parallel=fsdp", "checkpoint_async=true"]


@pytest.mark.slow  # three short runs under torchrun: about 60 s on 2 busy cores
def test_a_process_killed_while_its_shards_are_written_in_the_background_loses_nothing(tmp_path):
    """Process 1 is killed once its shards of step 8 are written by DCP's thread, before DCP's metadata and before
    any process hashed its files: step 4's checkpoint stays the latest, intact, and a resumed run ends with the
    uninterrupted run's weights, bit for bit."""
    common = [*SHARDED_RUN, f"out={tmp_path}"]
    torchrun_train(*common, "name=whole")
    kept = sorted((tmp_path / "whole" / "checkpoints").glob("step-*"))
    assert [folder.name for folder in kept] == ["step-00000008", "step-00000011"]
    for folder in kept:
        verify_checkpoint(folder)
        assert sharded_weights(folder) is not None and read_training_state(folder)["position"]["step"] == int(
            folder.name[5:]
        )
    cut = torchrun_train(*common, "name=cut", environment={FAULT_VARIABLE: "8:shards"}, succeed=False)
    assert cut.returncode != 0
    assert re.search(r"rank\s*: 1 \(local_rank: 1\)\s*exitcode\s*: -9\b", cut.stderr), cut.stderr[-3000:]  # SIGKILL
    assert "uncurated train: stopped: rank 0 of 2: " in cut.stderr  # the main process, training on, lost its peer
    checkpoints = tmp_path / "cut" / "checkpoints"
    assert latest_checkpoint(checkpoints).name == "step-00000004"
    verify_checkpoint(checkpoints / "step-00000004")
    [unfinished] = checkpoints.glob(".step-00000008-*")
    assert (unfinished / "sharded" / "__1_0.distcp").is_file(), "process 1 was killed before its write"
    assert not (unfinished / "sharded" / ".metadata").exists() and not (unfinished / "manifest.json").exists()
    torchrun_train(*common, "name=cut", "resume=true")
    assert latest_checkpoint(checkpoints).name == "step-00000011" and not list(checkpoints.glob(".step-*"))
    expected, got = final_weights(tmp_path / "whole"), final_weights(tmp_path / "cut")
    for name in expected:
        assert torch.equal(got[name], expected[name]), name
    assert logged_losses(tmp_path / "cut") == logged_losses(tmp_path / "whole")
