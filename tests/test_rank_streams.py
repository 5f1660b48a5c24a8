"""Every process its own random stream, the draws that must agree alike on all, and streamed epochs in step.

The torchrun tests run ``uncurated train`` in two processes (gloo) through ``rank_streams.py``, which records what
each process drew and read at every step.
"""

import shutil
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from training import final_weights, torchrun, torchrun_train

from uncurated.data import webdataset
from uncurated.train.distributed import Distributed
from uncurated.train.random_state import loader_seed, process_seed

RECORDER = Path(__file__).with_name("rank_streams.py")

#: Digits with WPSE on the MLP's pooled features (one point a side): 5 steps of 128, a checkpoint every 2.
DIGITS = [
    "preset=digits",
    "progress=false",
    "probe_train_size=0",
    "widths=[32]",
    "epochs=0.4",
    "point_sets=true",
    "wpse_points=pooled",
    "wpse_features=16",
    "checkpoint_every=2",
    "keep_checkpoints=5",
]


def recorded(out: Path, *arguments: str, constant_images: bool = False, processes: int = 2):
    """Train ``arguments`` in ``processes`` processes; return what each recorded, by rank, and the finished
    command."""
    flag = ["--constant-images"] if constant_images else []
    finished = torchrun(str(RECORDER), str(out), *flag, f"out={out}", *arguments, processes=processes, timeout=180)
    return [torch.load(out / f"rank{rank}.pt") for rank in range(processes)], finished


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory):
    """Two processes fed one constant image (their views differ by their random draws alone): the run's folder and
    what each process drew."""
    out = tmp_path_factory.mktemp("uninterrupted")
    ranks, _ = recorded(out, "name=whole", *DIGITS, constant_images=True)
    return out / "whole", ranks


def test_each_process_augments_with_its_own_draws_and_all_draw_wpse_features_alike(uninterrupted):
    _, (first, second) = uninterrupted
    assert [step["step"] for step in first] == [step["step"] for step in second] == list(range(5))
    for mine, theirs in zip(first, second, strict=True):
        assert len(mine["views"]) == len(theirs["views"]) == 2
        for view, other in zip(mine["views"], theirs["views"], strict=True):
            # Sample k of one process against sample k of the other: no two alike.
            assert bool((view != other).flatten(1).any(1).all()), f"step {mine['step']}: a view drawn twice"
        assert len(mine["draws"]) == len(theirs["draws"]) == 1
        assert torch.equal(mine["draws"][0], theirs["draws"][0]), f"step {mine['step']}: WPSE's features differ"
    assert not torch.equal(first[0]["draws"][0], first[1]["draws"][0])  # drawn afresh each step


def test_three_processes_each_augment_with_their_own_draws(tmp_path):
    """Three processes fed one constant image, two steps: no view of one process is another's. With two, a process
    seeded as rank 0 would still differ from the main process, which keeps the generators that built the model."""
    run = [*DIGITS, "name=three", "batch_size=48", "epochs=0.05", "checkpoint_every=0", "point_sets=false"]
    ranks, _ = recorded(tmp_path, *run, constant_images=True, processes=3)
    assert [len(steps) for steps in ranks] == [2, 2, 2]
    for step in range(2):
        for one in range(3):
            for other in range(one + 1, 3):
                for view, other_view in zip(ranks[one][step]["views"], ranks[other][step]["views"], strict=True):
                    assert bool((view != other_view).flatten(1).any(1).all()), (step, one, other)


def test_a_run_resumed_under_another_process_count_seeds_its_generators_from_the_step(uninterrupted, tmp_path):
    """The two-process run resumed by one process from its checkpoints of steps 2 and 4: the process seeds its
    generators from ``process_seed(seed, 0, step)``, so the two resumed runs draw apart (without the step both
    would draw one stream, rank 0's of step 0)."""
    from uncurated.train import load_config, train
    from uncurated.train import run as run_module
    from uncurated.train.trainer import Trainer

    whole, _ = uninterrupted
    seeds, resume = {}, Trainer.resume

    def recording_resume(self):
        resumed = resume(self)
        seeds[self.position.step] = torch.initial_seed()
        return resumed

    with pytest.MonkeyPatch.context() as patched:
        patched.setattr(Trainer, "resume", recording_resume)
        patched.setattr(run_module, "evaluate", lambda *args, **kwargs: {})
        for step in (2, 4):
            shutil.copytree(whole, tmp_path / f"cut{step}")
            for later in (folder for folder in (tmp_path / f"cut{step}" / "checkpoints").glob("step-*")):
                if int(later.name.split("-")[1]) > step:
                    shutil.rmtree(later)
            train(load_config([*DIGITS, f"out={tmp_path}", f"name=cut{step}", "resume=true"]))
    assert seeds == {2: process_seed(0, 0, 2), 4: process_seed(0, 0, 4)}


def test_a_resumed_run_draws_what_the_uninterrupted_one_drew(uninterrupted, tmp_path):
    """The run resumed from its checkpoint of step 2 by as many processes: each process's views, WPSE's draws and
    the final weights are the uninterrupted run's, bit for bit."""
    whole, ranks = uninterrupted
    shutil.copytree(whole, tmp_path / "cut")
    for later in ("step-00000004", "step-00000005"):
        shutil.rmtree(tmp_path / "cut" / "checkpoints" / later)
    resumed, _ = recorded(tmp_path, "name=cut", "resume=true", *DIGITS, constant_images=True)
    for rank, (expected, got) in enumerate(zip(ranks, resumed, strict=True)):
        expected = [step for step in expected if step["step"] >= 2]
        assert [step["step"] for step in got] == [step["step"] for step in expected] == [2, 3, 4], rank
        for want, have in zip(expected, got, strict=True):
            for key in ("views", "draws"):
                assert all(map(torch.equal, want[key], have[key])), f"rank {rank}, step {want['step']}: {key}"
    weights, resumed_weights = final_weights(whole), final_weights(tmp_path / "cut")
    for name, values in weights.items():
        assert torch.equal(resumed_weights[name], values), name


def write_shards(folder: Path, counts: list[int]) -> str:
    """Tar shards of ``counts`` image-caption samples each; the brace pattern that names them."""
    from imagefiles import write_tar
    from test_real_sets import solid

    folder.mkdir()
    for shard, count in enumerate(counts):
        members = []
        for number in range(count):
            colour = ("red", "green", "blue")[(shard + number) % 3]
            members += [(f"{number:03d}.png", solid(colour)), (f"{number:03d}.txt", f"a {colour} picture".encode())]
        write_tar(folder / f"shard-{shard}.tar", members)
    return str(folder / f"shard-{{0..{len(counts) - 1}}}.tar")


STREAMED = [
    "progress=false",
    "probe_train_size=0",
    "pipeline=image_text",
    "dataset=webdataset",
    "samples_per_shard=10",
    "steps_per_epoch=10",
    "batch_size=4",
    "image_size=8",
    "image_encoder=mlp",
    "widths=[16]",
    "probe_layer=encoder",
    "text_width=16",
    "text_heads=2",
]


def test_shards_the_processes_cannot_share_evenly_are_refused_on_every_process(tmp_path):
    """Three shards over two processes: one would read two, the other one, and run out of batches first."""
    pattern = write_shards(tmp_path / "shards", [8, 8, 8])
    finished = torchrun_train(*STREAMED, f"out={tmp_path}", f"data_dir={pattern}", "name=odd", succeed=False)
    assert finished.returncode != 0
    message = (
        "the shards of data_dir must divide evenly over the processes, or some would run out of batches before the "
        "others: got 3 shards over 2 processes (accepted: 2, 4, 6, ... shards)"
    )
    assert finished.stderr.count(message) == 2, finished.stderr[-3000:]
    assert not (tmp_path / "odd").exists()


def test_processes_whose_shards_differ_in_length_end_each_epoch_together(tmp_path):
    """Shards of 8 and 4 samples, 2 a process per batch, read in order: the second process's shard holds 2 batches,
    so every epoch ends after 2 steps on both, however many the first process's shard holds."""
    pattern = write_shards(tmp_path / "shards", [8, 4])
    in_order = ["shard_shuffle=false", "shuffle_buffer=0"]
    (first, second), finished = recorded(
        tmp_path, *STREAMED, *in_order, f"data_dir={pattern}", "epochs=0.6", "name=uneven"
    )
    positions = [[(step["epoch"], step["batch"]) for step in rank] for rank in (first, second)]
    assert positions[0] == positions[1] == [(0, 0), (0, 1), (1, 0), (1, 1), (2, 0), (2, 1)]
    assert [step["index"].tolist() for step in first[:2]] == [[0, 1], [2, 3]]
    assert [step["index"].tolist() for step in second[:2]] == [[10, 11], [12, 13]]
    notice = "epoch 0: the shards ran out after 2 of steps_per_epoch = 10 batches on a process; every process ends"
    assert finished.stderr.count(notice) == 1, finished.stderr[-3000:]


def test_every_rank_reads_as_many_shards_whatever_its_workers(tmp_path, monkeypatch):
    """Six shards, two ranks of two workers: each rank reads three (every second shard), split among its workers."""
    dataset = webdataset.WebDatasetShards([str(tmp_path / f"{shard}.tar") for shard in range(6)])
    monkeypatch.setenv("WORLD_SIZE", "2")
    read = {}
    for rank in range(2):
        monkeypatch.setenv("RANK", str(rank))
        for worker in range(2):
            info = SimpleNamespace(id=worker, num_workers=2)
            monkeypatch.setattr(webdataset, "get_worker_info", lambda info=info: info)
            read[rank, worker] = dataset.reader_shards()
    assert read == {(0, 0): [0, 4], (0, 1): [2], (1, 0): [1, 5], (1, 1): [3]}


def test_a_shard_count_the_processes_cannot_share_is_named_with_what_is_accepted():
    Distributed(world_size=2).check_shard_count(4)
    with pytest.raises(ValueError, match=r"got 3 shards over 2 processes \(accepted: 2, 4, 6, \.\.\. shards\)"):
        Distributed(world_size=2).check_shard_count(3)


def test_process_seeds_are_a_documented_function_of_seed_rank_and_step():
    assert process_seed(7, 1, 0) == int(np.random.SeedSequence([7, 1, 0]).generate_state(1)[0])
    seeds = {process_seed(seed, rank, step) for seed in range(3) for rank in range(64) for step in (0, 100)}
    assert len(seeds) == 3 * 64 * 2
    assert all(0 <= seed < 2**32 for seed in seeds)


def test_loader_seeds_are_a_documented_stream_apart_from_the_process_seeds():
    expected = np.random.SeedSequence([7, 1, 3], spawn_key=(1,)).generate_state(1, np.uint64)[0]
    assert loader_seed(7, 1, 3) == int(expected)
    loaders = {loader_seed(seed, rank, epoch) % 2**32 for seed in range(3) for rank in range(8) for epoch in range(4)}
    processes = {process_seed(seed, rank, step) for seed in range(3) for rank in range(8) for step in range(4)}
    assert len(loaders) == 3 * 8 * 4 and not loaders & processes
