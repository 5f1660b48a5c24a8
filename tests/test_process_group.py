"""The process group's view, in one process: the places it reports, the index ranges, and failed collectives as
PeerLost (the collectives themselves run under torchrun in test_distributed_values.py and the others)."""

import gc
import weakref

import pytest

from uncurated.objectives import SogCLR
from uncurated.process.group import (
    ALONE,
    PeerLost,
    Place,
    launched_place,
    peers_answering,
    place_or_alone,
    process_place,
)


def test_without_a_process_group_every_part_is_alone_unless_it_requires_one():
    assert process_place(None) is None and process_place(False) is None
    assert place_or_alone(None) == ALONE == (0, 1)
    with pytest.raises(RuntimeError, match="distributed=True needs an initialized torch.distributed process group"):
        process_place(True)


def _one_process_group_places(rank, init_file, results):
    import torch.distributed as dist
    from launch import join_gloo

    join_gloo(rank, 1, init_file)
    try:
        results["required"] = tuple(process_place(True))
        results["if_several"] = process_place(None)
        results["never"] = process_place(False)
    finally:
        dist.destroy_process_group()


def test_a_group_of_one_process_is_a_place_where_one_is_required(tmp_path):
    """distributed=True with a one-process group: its place, (0, 1), not "no group"; None splits nothing there."""
    import torch.multiprocessing as mp
    from launch import spawn

    with mp.Manager() as manager:
        results = manager.dict()
        spawn(_one_process_group_places, str(tmp_path / "init"), results, processes=1)
        results = dict(results)
    assert results == {"required": (0, 1), "if_several": None, "never": None}


def test_the_readers_place_comes_from_torchrun_before_the_group_exists(monkeypatch):
    monkeypatch.setenv("RANK", "2")
    monkeypatch.setenv("WORLD_SIZE", "3")
    assert launched_place() == Place(2, 3)
    monkeypatch.delenv("RANK")
    monkeypatch.delenv("WORLD_SIZE")
    assert launched_place() == ALONE


def test_the_ranges_of_a_partition_cover_every_index_once_in_rank_order():
    for size, world in ((10, 3), (7, 7), (5, 8), (12, 1)):
        ranges = [Place(rank, world).range(size) for rank in range(world)]
        assert ranges[0][0] == 0 and ranges[-1][1] == size
        assert all(stop == start for (_, stop), (start, _) in zip(ranges, ranges[1:], strict=False))
        assert max(b - a for a, b in ranges) - min(b - a for a, b in ranges) <= 1
    assert Place(1, 3).range(10) == (3, 6)


def test_a_failed_collective_is_a_lost_peer_naming_the_place_and_the_timeout():
    dropped = "[third_party/gloo/gloo/transport/tcp/pair.cc:553] Connection closed by peer [127.0.0.1]:15754."
    with pytest.raises(PeerLost, match=r"rank 1 of 3: a gather failed \(\[third_party.*dist_timeout = 30.0 s"):
        with peers_answering(Place(1, 3), "a gather", 30.0):
            raise RuntimeError(dropped)
    with pytest.raises(PeerLost, match="rank 0 of 2: a barrier failed"):  # any error, where nothing else runs
        with peers_answering(Place(0, 2), "a barrier", None, any_error=True):
            raise RuntimeError("timed out")
    with pytest.raises(RuntimeError, match="shapes") as other:
        with peers_answering(Place(0, 2), "a step", None):
            raise RuntimeError("shapes cannot be multiplied")
    assert not isinstance(other.value, PeerLost)


def test_an_objective_and_its_state_do_not_hold_each_other():
    """The state asks the process module for its place, not its objective: dropping the objective frees it at
    once (no reference cycle waiting for the garbage collector)."""
    gc.disable()
    try:
        objective = SogCLR(12)
        assert objective.state.world_size == 1
        dropped = weakref.ref(objective)
        del objective
        assert dropped() is None
    finally:
        gc.enable()
