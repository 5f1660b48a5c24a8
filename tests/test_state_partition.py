"""The per-sample state split by index ranges: each process's rows, checkpoints of several processes read back by
another number of them with the same values, and the shards that do not fit refused."""

import json
import math

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from launch import join_gloo, spawn
from torch import nn

from uncurated.objectives import NUCLR, SogCLR
from uncurated.state import SampleState
from uncurated.state.store import owned_range
from uncurated.train.checkpoint import (
    MANIFEST,
    CheckpointError,
    load_objective_state,
    objective_file,
    prepare_checkpoint,
    publish_checkpoint,
    verify_checkpoint,
    write_objective_state,
)

SIZES = {"a": 11, "b": 7}


def store(rank: int = 0, world: int = 1) -> SampleState:
    return SampleState(SIZES, {"log_u": -math.inf, "zeta": 0.5}, scalars={"xi_a": 0.0}, place=lambda: (rank, world))


def filled(rank: int, world: int) -> SampleState:
    """Process ``rank``'s store whose rows hold their own index (and -inf at even indices of log_u)."""
    state = store(rank, world)
    for (field, side), tensor in state.tensors.items():
        start, stop = state.range(side)
        values = torch.arange(start, stop, dtype=tensor.dtype) + (0.5 if field == "zeta" else 0.0)
        if field == "log_u":
            values[torch.arange(start, stop) % 2 == 0] = -math.inf
        tensor.copy_(values)
    state.scalars["xi_a"] = 0.25
    return state


def test_each_process_holds_its_range_of_every_side():
    for world in (1, 2, 3, 4):
        for _side, size in SIZES.items():
            ranges = [owned_range(size, rank, world) for rank in range(world)]
            assert ranges[0][0] == 0 and ranges[-1][1] == size
            assert all(left[1] == right[0] for left, right in zip(ranges, ranges[1:], strict=False))
            assert max(stop - start for start, stop in ranges) - min(stop - start for start, stop in ranges) <= 1
    assert store(1, 2).tensors["zeta", "a"].shape == (6,) and store(0, 2).tensors["zeta", "a"].shape == (5,)
    assert store(3, 4).memory_bytes() == 4 * 2 * (3 + 2)  # 11 * 4 // 4 - 11 * 3 // 4 and 7 - 5


@pytest.mark.parametrize("saved, resumed", [(2, 4), (4, 1), (1, 3), (3, 2)])
def test_states_saved_by_some_processes_load_into_another_number_with_the_same_values(saved, resumed):
    states = {rank: filled(rank, saved).get_extra_state() for rank in range(saved)}
    whole = filled(0, 1)
    for rank in range(resumed):
        target = store(rank, resumed)
        needed = target.saved_ranks(saved)
        target.set_extra_state(target.merged_extra_state({k: states[k] for k in needed}, saved))
        for (field, side), tensor in target.tensors.items():
            start, stop = target.range(side)
            assert torch.equal(tensor, whole.tensors[field, side][start:stop]), (field, side, rank)
        assert target.scalars == {"xi_a": 0.25}
        assert len(needed) <= -(-saved // resumed) + 1  # only the files that overlap its rows


def test_a_state_that_does_not_hold_its_process_rows_is_refused():
    states = {rank: filled(rank, 2).get_extra_state() for rank in range(2)}
    target = store()
    wrong = {0: states[0], 1: states[0]}
    with pytest.raises(ValueError, match=r"process 1 of 2 holds the indices \[0, 5\] of side 'a'; .* holds \[5, 11\]"):
        target.merged_extra_state(wrong, 2)
    with pytest.raises(ValueError, match="the processes disagree"):
        target.merged_extra_state({0: states[0], 1: {**states[1], "scalars": {"xi_a": 1.0}}}, 2)
    with pytest.raises(ValueError, match=r"consecutive processes .* got those of processes \[0, 2\]"):
        store().merged_extra_state({0: states[0], 2: states[1]}, 3)
    with pytest.raises(ValueError, match=r"the saved rows of side 'a' are the indices \[0, 5\); process 0 of 1 holds"):
        store().set_extra_state(states[0])


def objectives_of(processes: int, cls=SogCLR) -> list[nn.Module]:
    """The objective of each of ``processes`` processes after one step on its share (their stores placed by
    hand, as an initialized process group would place them)."""
    made = []
    for rank in range(processes):
        objective = cls(12, distributed=False, **({"freeze_epochs": 0} if cls is NUCLR else {}))
        objective.state._place = lambda rank=rank: (rank, processes)
        for (_field, side), tensor in objective.state.tensors.items():
            start, _ = objective.state.range(side)
            tensor.copy_(torch.arange(tensor.shape[0], dtype=tensor.dtype) + start)
        made.append(objective)
    return made


def checkpoint_of(tmp_path, processes: int):
    staging = prepare_checkpoint(tmp_path, 1)
    for rank, objective in enumerate(objectives_of(processes)):
        write_objective_state(staging, rank, processes, objective.state_dict(), run="run", step=1)
    return publish_checkpoint(
        tmp_path, staging, 1, nn.Linear(1, 1).state_dict(), {"position": 1}, processes=processes, run="run"
    )


def test_a_checkpoint_of_two_processes_loads_into_one(tmp_path):
    folder = checkpoint_of(tmp_path, 2)
    objective = SogCLR(12, distributed=False)
    load_objective_state(folder, objective, {})
    assert torch.equal(objective.state.tensors["log_u", "a"], torch.arange(12.0))


def test_a_missing_objective_file_makes_the_checkpoint_incomplete(tmp_path):
    folder = checkpoint_of(tmp_path, 2)
    (folder / objective_file(1, 2)).unlink()
    with pytest.raises(
        CheckpointError,
        match=r"objective-00001-of-00002.safetensors is missing, the objective state of "
        r"process 1 of the 2 that wrote it \(the files of processes 0 to 1 are all needed\)",
    ):
        verify_checkpoint(folder)


def test_an_objective_file_of_another_process_is_refused_naming_both_ranges(tmp_path):
    folder = checkpoint_of(tmp_path, 2)
    (folder / objective_file(1, 2)).write_bytes((folder / objective_file(0, 2)).read_bytes())
    manifest = json.loads((folder / MANIFEST).read_text())
    manifest["files"][objective_file(1, 2)] = manifest["files"][objective_file(0, 2)]  # a consistent manifest
    (folder / MANIFEST).write_text(json.dumps(manifest))
    with pytest.raises(
        CheckpointError,
        match=r"process 1 of 2 holds the indices \[0, 6\] of side 'a'; process 1 of 2 "
        r"holds \[6, 12\]",
    ):
        load_objective_state(folder, SogCLR(12, distributed=False), {})


def _index_worker(rank, world, init_file, results):
    join_gloo(rank, world, init_file)
    try:
        objective = SogCLR(8)
        a, b = torch.randn(4, 3), torch.randn(4, 3)
        index = torch.arange(4) + 4 * rank
        if rank == 1:
            index[2] = 8  # outside [0, 8)
        try:
            objective(a, b, index=index)
            results[rank] = "accepted"
        except ValueError as error:
            results[rank] = str(error)
    finally:
        dist.destroy_process_group()


def test_an_index_outside_the_dataset_on_one_process_is_refused_on_every_process(tmp_path):
    with mp.Manager() as manager:
        results = manager.dict()
        spawn(_index_worker, 2, str(tmp_path / "init"), results)
        results = dict(results)
    for message in results.values():
        assert message.startswith("rank 1 of 2: ValueError: index must be in [0, 8)")
        assert "got 8" in message and "nothing was written" in message


def test_sample_values_hands_out_this_process_rows_with_their_first_index():
    for rank, objective in enumerate(objectives_of(3, NUCLR)):
        for side in ("a", "b"):
            start, values = objective.sample_values("zeta", side)
            assert start == owned_range(12, rank, 3)[0]
            assert torch.equal(values, torch.arange(start, start + values.shape[0], dtype=torch.float32))
            values.add_(1)  # a copy: the objective's own rows stay as they were
            assert torch.equal(objective.sample_values("zeta", side)[1], values - 1)
    with pytest.raises(
        ValueError,
        match="sample_values takes a field of log_u, zeta, zeta_momentum and a side a or b, got 'eta' and 'a'",
    ):
        objectives_of(1, NUCLR)[0].sample_values("eta", "a")
