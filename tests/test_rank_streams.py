"""Every process its own random stream, and the draws that must agree alike on all.

The torchrun tests run ``uncurated train`` in two processes (gloo) through ``rank_streams.py``, which records what
each process drew and read at every step.
"""

import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from training import final_weights, torchrun

from uncurated.train.random_state import process_seed

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


def recorded(out: Path, *arguments: str, constant_images: bool = False):
    """Train ``arguments`` in two processes; return what each recorded, by rank, and the finished command."""
    flag = ["--constant-images"] if constant_images else []
    finished = torchrun(str(RECORDER), str(out), *flag, f"out={out}", *arguments)
    return [torch.load(out / f"rank{rank}.pt") for rank in range(2)], finished


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


def test_process_seeds_are_a_documented_function_of_seed_rank_and_step():
    assert process_seed(7, 1, 0) == int(np.random.SeedSequence([7, 1, 0]).generate_state(1)[0])
    seeds = {process_seed(seed, rank, step) for seed in range(3) for rank in range(64) for step in (0, 100)}
    assert len(seeds) == 3 * 64 * 2
    assert all(0 <= seed < 2**32 for seed in seeds)
