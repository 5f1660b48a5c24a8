"""Host synchronizations per training step (``benchmarks/host_syncs.py``): at most two for every objective and
engine (the loss value and the finite check), the counter sees a planted read, and the checks that moved off the
hot path keep their errors."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import pytest
import torch

from uncurated import host_reads, objectives
from uncurated.objectives import base

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import host_syncs  # noqa: E402  (a script of benchmarks/, imported by path)

BACKWARD_READS = {("nuclr", "tiled"): 3}
"""NUCLR learning its popularities on tiles writes them in the backward pass, which recomputes the tiles: it reads
there whether each direction's column statistic takes the fast path (2) and the update's check with xi (1)."""


@pytest.mark.parametrize("engine", ["dense", "tiled"])
@pytest.mark.parametrize("name", list(objectives.OBJECTIVES))
def test_a_loop_step_reads_the_device_at_most_twice(name, engine):
    counters = host_syncs.count_loop(name, engine, batch=16, dim=8)
    extra = BACKWARD_READS.get((name, engine), 0)
    assert counters["objective"].total == 1 + extra, counters["objective"].by_site()
    assert counters["objective"].total + counters["loss value"].total <= host_syncs.TARGET + extra


def test_a_trainer_step_reads_the_device_twice(tmp_path):
    """The embeddings' finiteness with the objective's read (SogCLR's indices checked on the host), then the loss with
    the gradients' finiteness."""
    counter = host_syncs.count_trainer("sogclr", "dense", tmp_path)
    assert counter.total == host_syncs.TARGET, counter.by_site()
    assert any(site.startswith("tolist at uncurated/train/trainer.py:") for site in counter.by_site())


@pytest.mark.parametrize("name", ["infonce", "nuclr"])
def test_a_planted_read_in_the_forward_pass_is_counted_with_its_site(name, monkeypatch):
    original = base.l2_normalize

    def planted(*tensors, **options):
        float(tensors[0].detach().sum())  # what a debugging print of a tensor's value would do
        return original(*tensors, **options)

    clean = host_syncs.count_loop(name, "dense", batch=16, dim=8)["objective"]
    monkeypatch.setattr(base, "l2_normalize", planted)
    dirty = host_syncs.count_loop(name, "dense", batch=16, dim=8)["objective"]
    assert dirty.total == clean.total + 1 > host_syncs.TARGET - 1
    assert any(site.startswith("_local_scalar_dense at uncurated/objectives/base.py:") for site in dirty.by_site())


def test_the_counter_knows_each_kind_of_read_and_leaves_host_tensors_out():
    x = torch.arange(6.0)
    host = torch.arange(3)
    with host_syncs.SyncCounter(host=[host]) as counter:
        _ = x[x > 2]  # a boolean mask: its size is read
        torch.nonzero(x)
        x.tolist()
        bool(x.sum() > 0)
        torch._assert_async(x.sum() > 0)  # the device checks, the host goes on: not a read
        _ = x * 2
        host.sort().values.tolist()  # computed from a host tensor alone: stays on the host
    kinds = [kind for kind, _ in counter.events]
    assert kinds == ["index (boolean mask)", "nonzero", "tolist", "_local_scalar_dense"]
    assert [kind for kind, _ in counter.host_reads] == ["tolist"]
    assert all(site.startswith("test_host_syncs.py:") for _, site in counter.events)


def test_checks_queued_in_a_call_are_read_with_the_next_read_and_raise_first():
    seen = []
    with host_reads.pending_checks() as pending:
        host_reads.check_later(torch.tensor([1.0, 2.0]), seen.append)
        assert seen == []  # queued, not read
        assert host_reads.read(torch.tensor(5.0)) == [5.0]
        assert seen == [[1.0, 2.0]]
        host_reads.check_later(torch.tensor(3.0), seen.append)
        pending.flush()
    assert seen == [[1.0, 2.0], [3.0]]

    def refuse(values):
        raise ValueError(f"bad {values}")

    with pytest.raises(ValueError, match=r"bad \[7.0\]"), host_reads.pending_checks():
        host_reads.check_later(torch.tensor(7.0), refuse)
        raise RuntimeError("what the bad value caused")  # the queued check's error comes first


@pytest.mark.parametrize("tiling", ["never", "always"])
def test_bad_inputs_raise_their_errors_on_either_engine_before_the_state_changes(tiling):
    loss = objectives.build("nuclr", num_samples=8, freeze_epochs=0, tiling=tiling, block_size=2)
    loss.set_epoch(0.0)
    a, b = torch.randn(4, 3), torch.randn(4, 3)
    before = {key: tensor.clone() for key, tensor in loss.state.tensors.items()}
    for index, message in (
        (torch.tensor([0, 1, 2, 8]), r"index must be in \[0, 8\)"),
        (torch.tensor([0, 1, 1, 3]), "must not repeat a sample"),
    ):
        loss.begin_step()
        with pytest.raises(ValueError, match=message):
            loss(a, b, index=index)
    loss.begin_step()
    with pytest.raises(ValueError, match="b contains non-finite values"):
        loss(a, b * math.inf, index=torch.arange(4))
    for key, tensor in loss.state.tensors.items():
        assert torch.equal(tensor, before[key])


@pytest.mark.parametrize("tiling", ["never", "always"])
def test_a_state_update_with_nan_raises_before_anything_is_written(tiling, monkeypatch):
    """Read with the call's checks (dense) or in the backward pass (tiled, where NUCLR's popularities are written)."""
    loss = objectives.build("nuclr", num_samples=8, freeze_epochs=0, tiling=tiling, block_size=2)
    loss.set_epoch(0.0)
    original = type(loss).zeta_updates

    def poisoned(self, *args):
        return {name: values * math.nan for name, values in original(self, *args).items()}

    monkeypatch.setattr(type(loss), "zeta_updates", poisoned)
    before = {key: tensor.clone() for key, tensor in loss.state.tensors.items()}
    xi = dict(loss.state.scalars)
    loss.begin_step()
    with pytest.raises(ValueError, match=r"new zeta values for side '[ab]' contain NaN or inf"):
        a = torch.randn(4, 3, requires_grad=True)
        loss(a, torch.randn(4, 3), index=torch.arange(4)).backward()
    for key, tensor in loss.state.tensors.items():
        assert torch.equal(tensor, before[key])
    assert loss.state.scalars == xi


def test_a_bad_state_update_after_the_engines_read_is_refused_on_the_device_and_makes_the_loss_nan(monkeypatch):
    """SogCLR on tiles writes within the call, after the plan's read: nothing left to read it with."""
    loss = objectives.build("sogclr", num_samples=8, tiling="always", block_size=2)
    loss.set_epoch(0.0)
    original = type(loss).direction_loss

    def poisoned(self, direction):
        result = original(self, direction)
        result.row_updates = {name: values * math.nan for name, values in result.row_updates.items()}
        return result

    loss.begin_step()
    loss(torch.randn(4, 3), torch.randn(4, 3), index=torch.arange(4, 8))  # the first call records the engine's work
    monkeypatch.setattr(type(loss), "direction_loss", poisoned)
    before = {key: tensor.clone() for key, tensor in loss.state.tensors.items()}
    loss.begin_step()
    with host_syncs.SyncCounter() as counter:
        value = loss(torch.randn(4, 3), torch.randn(4, 3), index=torch.arange(4))
    assert counter.total == 1 and math.isnan(float(value))
    for key, tensor in loss.state.tensors.items():
        assert torch.equal(tensor, before[key])


def test_a_fixed_temperature_is_read_again_only_after_it_changes():
    loss = objectives.build("sogclr", num_samples=8, temperature=0.2)
    assert loss.temperature.fixed_value() == float(loss.temperature())
    other = objectives.build("sogclr", num_samples=8, temperature=0.5)
    loss.load_state_dict(other.state_dict())
    assert loss.temperature.fixed_value() == pytest.approx(0.5)
    with pytest.raises(ValueError, match="learnable"):
        objectives.build("infonce", learnable=True).temperature.fixed_value()
