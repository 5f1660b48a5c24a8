"""The per-sample state is updated once per step, and each sample by one process."""

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from launch import join_gloo, spawn

from uncurated.objectives import NUCLR, ISogCLR, SogCLR


def batch(n=8, seed=0):
    generator = torch.Generator().manual_seed(seed)
    return torch.randn(n, 4, generator=generator), torch.randn(n, 4, generator=generator)


def snapshot(objective):
    return {key: tensor.clone() for key, tensor in objective.state.tensors.items()}, dict(objective.state.scalars)


def assert_unchanged(objective, saved):
    tensors, scalars = saved
    for key, tensor in objective.state.tensors.items():
        assert torch.equal(tensor, tensors[key]), key
    assert objective.state.scalars == scalars


@pytest.mark.parametrize("cls", [SogCLR, ISogCLR, NUCLR])
def test_a_second_call_in_a_step_is_refused_and_changes_nothing(cls):
    n = 8
    a, b = batch(n)
    objective = cls(n, **({"freeze_epochs": 0} if cls is NUCLR else {}))
    objective.begin_step()
    objective(a, b, index=torch.arange(n))
    saved = snapshot(objective)
    with pytest.raises(
        RuntimeError,
        match=r"beyond those begin_step\(\) allowed: .* Call objective.begin_step\(\) "
        r"before each optimizer step",
    ):
        objective(a[:4], b[:4], index=torch.arange(4, 8))  # another batch, still the same step
    assert_unchanged(objective, saved)
    objective.begin_step()
    objective(a, b, index=torch.arange(n))
    objective.eval()  # eval-mode calls read the state and never count
    objective(a, b, index=torch.arange(n))


def test_without_begin_step_the_same_batch_twice_is_refused():
    n = 8
    a, b = batch(n)
    objective = SogCLR(n)
    index = torch.tensor([3, 1, 6, 0])
    objective(a[:4], b[:4], index=index)
    saved = snapshot(objective)
    with pytest.raises(RuntimeError, match=r"second training-mode call on the same batch in one step: .*begin_step"):
        objective(a[:4], b[:4], index=index.flip(0))
    assert_unchanged(objective, saved)
    objective(a[4:], b[4:], index=torch.tensor([2, 4, 5, 7]))  # the next batch
    objective(a[:4], b[:4], index=index)
    objective.set_epoch(1)  # a new epoch is a new step: full-batch loops that call set_epoch keep working
    objective(a[:4], b[:4], index=index)


def test_gradient_accumulation_opts_in_to_several_calls_per_step():
    n = 8
    a, b = batch(n)
    whole, pieces = SogCLR(n), SogCLR(n)
    whole.begin_step()
    whole(a, b, index=torch.arange(n))
    pieces.begin_step(calls=2)
    pieces(a[:4], b[:4], index=torch.arange(4))
    pieces(a[4:], b[4:], index=torch.arange(4, 8))
    with pytest.raises(RuntimeError, match=r"begin_step\(calls=k\)"):
        pieces(a[:4], b[:4], index=torch.arange(4))
    with pytest.raises(ValueError, match=r"calls must be an integer >= 1"):
        pieces.begin_step(calls=0)


def _ranks_worker(rank, world, init_file, results):
    join_gloo(rank, world, init_file)
    try:
        n = 8
        a, b = batch(n)
        objective = SogCLR(n)
        outcome = {}
        local = slice(rank * n // world, (rank + 1) * n // world)
        objective.begin_step()
        objective(a[local], b[local], index=torch.arange(n)[local])  # each process's share: accepted
        before = objective.state.tensors["log_u", "a"].tolist()
        objective.begin_step()
        try:
            objective(a[: n // world], b[: n // world], index=torch.arange(n // world))  # the same samples everywhere
            outcome["shared"] = "accepted"
        except ValueError as error:
            outcome["shared"] = str(error)
        outcome["unchanged"] = objective.state.tensors["log_u", "a"].tolist() == before
        results[rank] = outcome
    finally:
        dist.destroy_process_group()


@pytest.mark.parametrize("world", [1, 2])
def test_a_sample_passed_by_two_processes_is_refused_on_every_rank(world, tmp_path):
    """Each process passes its own pairs; one sample from two processes in a step would be written twice."""
    with mp.Manager() as manager:
        results = manager.dict()
        spawn(_ranks_worker, world, str(tmp_path / "init"), results, processes=world)
        results = dict(results)
    if world == 1:  # one process's samples are the whole batch
        assert results[0]["shared"] == "accepted"
        return
    for rank in range(world):
        assert "sample 0 of side 'a' was passed by the processes [0, 1] in one step" in results[rank]["shared"]
        assert results[rank]["unchanged"]
