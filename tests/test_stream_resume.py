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


def trained_indices(monkeypatch, config, epochs: list | None = None) -> list[list[int]]:
    """Train ``config`` in this process; each step's dataset indices, by step (and its epoch into ``epochs``)."""
    from uncurated.train import run as run_module
    from uncurated.train.trainer import Trainer

    steps, step = [], Trainer.step

    def recorded(self, batch):
        steps.append(batch["index"].tolist())
        if epochs is not None:
            epochs.append(self.position.epoch)
        return step(self, batch)

    monkeypatch.setattr(Trainer, "step", recorded)
    monkeypatch.setattr(run_module, "evaluate", lambda *args, **kwargs: {})
    train(config)
    return steps


def test_each_epoch_draws_new_batches_and_leaves_another_tail(tmp_path, monkeypatch):
    """Two shards of 6 samples, 2 steps of 4 an epoch (4 of 12 samples left each epoch), 3 epochs: shuffled (the
    defaults), every epoch's batches differ and the epochs leave different samples; read in order, every epoch
    repeats the first (the same 4 samples never trained)."""
    pattern = write_shards(tmp_path / "shards", [6, 6])
    common = [*STREAMED, f"out={tmp_path}", f"data_dir={pattern}", "samples_per_shard=6", "steps_per_epoch=2"]
    common = [*common, "epochs=3", "augment=none"]
    shuffled = trained_indices(monkeypatch, load_config([*common, "name=shuffled", "shuffle_buffer=4"]))
    epochs = [sorted(sum(shuffled[2 * epoch : 2 * epoch + 2], [])) for epoch in range(3)]
    assert len(shuffled) == 6 and len({tuple(epoch) for epoch in epochs}) == 3, epochs
    assert len(set(sum(epochs, []))) > 8  # samples one epoch left, another trained on
    in_order = load_config([*common, "name=in-order", "shard_shuffle=false", "shuffle_buffer=0"])
    ordered = trained_indices(monkeypatch, in_order)
    assert ordered == [[0, 1, 2, 3], [4, 5, 6, 7]] * 3


@pytest.mark.slow  # about 20-45 s: torchrun launches
def test_resampled_shards_fill_every_epoch_and_resume_exactly(tmp_path, monkeypatch):
    """resample_shards=true: shards drawn with replacement (3 shards, not split over processes), so an epoch never
    runs out, whatever the shards hold: 4 steps of 4 from shards of 3 samples; cut mid-epoch and resumed, the run
    is the uninterrupted one, bit for bit."""
    pattern = write_shards(tmp_path / "shards", [3, 3, 3])
    common = [*RUN, f"out={tmp_path}", f"data_dir={pattern}", "samples_per_shard=3", "steps_per_epoch=4"]
    common = [*common, "resample_shards=true", "shuffle_buffer=5"]
    epochs: list[int] = []
    steps = trained_indices(monkeypatch, load_config([*common, "name=whole"]), epochs)
    assert epochs == [0] * 4 + [1] * 4 and all(len(indices) == 4 for indices in steps)
    assert set(sum(steps, [])) <= set(range(9)) and len(set(sum(steps, []))) > 3
    cut_after(tmp_path / "whole", tmp_path / "cut", 6)
    train(load_config([*common, "name=cut", "resume=true"]))
    assert_bit_equal(tmp_path / "whole", tmp_path / "cut")


def test_the_shuffle_keys_are_checked_and_earlier_streamed_runs_keep_their_order(tmp_path):
    """A negative buffer is named with its range. A webdataset run saved before the streams were shuffled read its
    shards in order: its config.yaml and checkpoints lack the shuffle keys. Resuming it with today's defaults
    given on the command line is refused, naming the keys; resumed as saved, it keeps its order."""
    import yaml

    with pytest.raises(ConfigError, match=r"shuffle_buffer must be in \[0, inf\], got -1"):
        load_config(["shuffle_buffer=-1"])
    pattern = write_shards(tmp_path / "shards", [6, 6])
    common = [*RUN, f"out={tmp_path}", f"data_dir={pattern}", "name=run", "epochs=0.4"]
    train(load_config([*common, "shard_shuffle=false", "shuffle_buffer=0"]))
    shuffle_keys = ("shard_shuffle", "shuffle_buffer", "resample_shards")
    path = tmp_path / "run" / "checkpoints"
    for manifest in path.glob("step-*/manifest.json"):  # what an earlier version saved: no shuffle keys
        text = manifest.read_text()
        for key in shuffle_keys:
            text = text.replace(f'"{key}"', f'"earlier_{key}"')
        manifest.write_text(text)
    config_yaml = tmp_path / "run" / "config.yaml"
    saved = yaml.safe_load(config_yaml.read_text())
    assert saved["shard_shuffle"] is False
    config_yaml.write_text(yaml.safe_dump({key: value for key, value in saved.items() if key not in shuffle_keys}))
    today = ["shard_shuffle=true", "shuffle_buffer=1000"]
    with pytest.raises(ConfigError, match=r"shard_shuffle: False -> True\n  shuffle_buffer: 0 -> 1000"):
        train(load_config([*common, *today, "resume=true"]))
    resumed = load_config([*common, "resume=true"])
    assert (resumed.shard_shuffle, resumed.shuffle_buffer, resumed.resample_shards) == (False, 0, False)
    train(resumed)


def test_an_epoch_of_shards_that_outlast_it_ends_at_steps_per_epoch(tmp_path):
    """Shards holding 6 batches, an epoch of 3: batches 0 .. 2 are read (from ``start`` on), never a fourth."""
    from uncurated.data import WebDatasetShards
    from uncurated.train.batches import stream_batches
    from uncurated.train.distributed import Distributed

    shards = WebDatasetShards(write_shards(tmp_path / "shards", [6, 6]), size=8, samples_per_shard=6)
    for start in (0, 1):
        batches = list(stream_batches(shards, 2, 3, 0, start, Distributed()))
        assert [batch["index"].tolist() for batch in batches] == [[0, 1], [2, 3], [4, 5]][start:]


def test_every_reader_of_every_rank_shuffles_with_its_own_generator(tmp_path, monkeypatch):
    """Two ranks of two workers: readers 0 .. 3 (rank * workers + worker), each reading one shard of 6 through a
    buffer of 3; the four orders (positions within the shard) differ, as do their resampled shards."""
    from types import SimpleNamespace

    from uncurated.data import WebDatasetShards, webdataset

    pattern = write_shards(tmp_path / "shards", [6, 6, 6, 6])
    dataset = WebDatasetShards(pattern, size=8, samples_per_shard=6, shuffle_buffer=3, seed=3)
    resampled = WebDatasetShards(pattern, size=8, samples_per_shard=6, resampled=True, seed=3)
    monkeypatch.setenv("WORLD_SIZE", "2")
    orders, readers, draws = {}, {}, {}
    for rank in range(2):
        monkeypatch.setenv("RANK", str(rank))
        for worker in range(2):
            info = SimpleNamespace(id=worker, num_workers=2)
            monkeypatch.setattr(webdataset, "get_worker_info", lambda info=info: info)
            readers[rank, worker] = webdataset._reader()
            orders[rank, worker] = tuple(sample["index"] % 6 for sample in dataset)
            stream = iter(resampled)
            draws[rank, worker] = tuple(next(stream)["index"] // 6 for _ in range(36))
    assert readers == {(0, 0): 0, (0, 1): 1, (1, 0): 2, (1, 1): 3}
    assert all(sorted(order) == list(range(6)) for order in orders.values())
    assert len(set(orders.values())) == 4, orders
    assert len(set(draws.values())) == 4, draws


class WorkerSeeds(torch.utils.data.Dataset):
    """Twelve items, each the seed of the loader worker that read it."""

    def __len__(self) -> int:
        return 12

    def __getitem__(self, index: int) -> dict:
        info = torch.utils.data.get_worker_info()
        return {"index": index, "worker": info.id, "seed": info.seed}


def test_loader_workers_have_seeds_of_their_own_per_rank_worker_and_epoch():
    """Three ranks, two epochs, two workers each: twelve distinct worker seeds, the same again when an epoch is
    loaded again (a resumed run's workers draw what the uninterrupted run's did)."""
    from uncurated.train.batches import BatchPlan, load_batches
    from uncurated.train.distributed import Distributed

    plan = BatchPlan(12, 6, seed=4)  # two batches an epoch (one a worker), two items a rank

    def seeds(rank: int, epoch: int) -> dict[int, int]:
        batches = load_batches(WorkerSeeds(), plan, epoch, 0, Distributed(rank=rank, world_size=3), workers=2)
        pairs = (zip(batch["worker"].tolist(), batch["seed"].tolist(), strict=True) for batch in batches)
        return dict(pair for batch_pairs in pairs for pair in batch_pairs)

    drawn = {(rank, epoch): seeds(rank, epoch) for rank in range(3) for epoch in range(2)}
    everyone = [seed for by_worker in drawn.values() for seed in by_worker.values()]
    assert len(everyone) == len(set(everyone)) == 12, drawn
    assert seeds(2, 1) == drawn[2, 1]


@pytest.mark.slow
def test_resampled_shards_need_not_divide_over_the_processes(tmp_path):
    """Three shards over two processes, refused when each process reads its share, train when every process
    resamples from all of them: every epoch is steps_per_epoch steps on both."""
    from test_rank_streams import recorded

    pattern = write_shards(tmp_path / "shards", [3, 3, 3])
    run = [*STREAMED, f"data_dir={pattern}", "samples_per_shard=3", "steps_per_epoch=3", "epochs=2"]
    ranks, _ = recorded(tmp_path, *run, "resample_shards=true", "name=resampled")
    for steps in ranks:
        assert [(step["epoch"], step["batch"]) for step in steps] == [(e, b) for e in range(2) for b in range(3)]
