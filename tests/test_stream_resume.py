"""Streamed data (webdataset shards) shuffled per epoch and resumed exactly: a run cut mid-epoch and resumed draws
and trains what the uninterrupted run did, bit for bit, in one process and in two; the loaders' generators are a
function of the seed, the rank and the epoch."""

import shutil
from pathlib import Path

import pytest
import torch
from test_rank_streams import STREAMED, write_shards
from training import final_weights, logged_losses, torchrun_train

from uncurated.train import ConfigError, load_config, train
from uncurated.train.checkpoint import latest_checkpoint

#: Four shards of 6 samples, batches of 4, 5 steps an epoch (a reader's tail is left each epoch), 2 epochs, a
#: checkpoint every 3 steps: steps 3 and 6 are mid-epoch. Random augmentations, so that every draw shows.
RUN = [*STREAMED, "samples_per_shard=6", "steps_per_epoch=5", "epochs=2", "checkpoint_every=3", "keep_checkpoints=9"]
RUN = [*RUN, "augment=digits", "image_mode=L", "log_every=1"]


def cut_after(run: Path, copy: Path, step: int) -> None:
    """``copy``: the run folder as a kill right after its checkpoint of ``step`` would have left it."""
    shutil.copytree(run, copy)
    for folder in (copy / "checkpoints").glob("step-*"):
        if int(folder.name.split("-")[1]) > step:
            shutil.rmtree(folder)
    assert latest_checkpoint(copy / "checkpoints").name == f"step-{step:08d}"


def assert_bit_equal(expected: Path, got: Path) -> None:
    assert logged_losses(got) == logged_losses(expected)
    weights, resumed = final_weights(expected), final_weights(got)
    assert weights.keys() == resumed.keys()
    for name, values in weights.items():
        assert torch.equal(resumed[name], values), name


def test_a_streamed_run_resumed_mid_epoch_is_the_uninterrupted_run(tmp_path):
    """One process, shards shuffled (the defaults), cut after step 6 (epoch 1, batch 1): the resumed run's losses and
    weights are the uninterrupted run's, bit for bit. Before the loaders had generators of their own, starting the
    resumed epoch's loader drew once more from the process's generator, and every later augmentation differed."""
    pattern = write_shards(tmp_path / "shards", [6, 6, 6, 6])
    common = [*RUN, f"out={tmp_path}", f"data_dir={pattern}"]
    train(load_config([*common, "name=whole"]))
    cut_after(tmp_path / "whole", tmp_path / "cut", 6)
    train(load_config([*common, "name=cut", "resume=true"]))
    assert_bit_equal(tmp_path / "whole", tmp_path / "cut")


@pytest.mark.slow
def test_a_streamed_run_of_two_processes_resumed_mid_epoch_is_the_uninterrupted_run(tmp_path):
    """Two processes (torchrun, gloo), each reading its half of the shuffled shards: cut after step 3 (epoch 0,
    batch 3) and resumed by two, the losses and weights are the uninterrupted run's, bit for bit."""
    pattern = write_shards(tmp_path / "shards", [6, 6, 6, 6])
    common = [*RUN, f"out={tmp_path}", f"data_dir={pattern}"]
    torchrun_train(*common, "name=whole", timeout=180)
    cut_after(tmp_path / "whole", tmp_path / "cut", 3)
    torchrun_train(*common, "name=cut", "resume=true", timeout=180)
    assert_bit_equal(tmp_path / "whole", tmp_path / "cut")


def test_a_resume_into_another_shuffle_is_refused_naming_the_key(tmp_path):
    pattern = write_shards(tmp_path / "shards", [6, 6])
    common = [*RUN, f"out={tmp_path}", f"data_dir={pattern}", "name=run", "epochs=0.4"]
    train(load_config(common))
    for change in ("shard_shuffle=false", "shuffle_buffer=3", "resample_shards=true"):
        key = change.split("=")[0]
        with pytest.raises(ConfigError, match=rf"cannot resume .*\n  {key}: "):
            train(load_config([*common, "resume=true", change]))
