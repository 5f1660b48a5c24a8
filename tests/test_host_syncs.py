"""Host synchronizations per training step (``benchmarks/host_syncs.py``): at most two for every objective and
engine (the loss value and the finite check), the counter sees a planted read, and the checks that moved off the
hot path keep their errors."""

from __future__ import annotations

import math
import os
import sys
from pathlib import Path

import pytest
import torch

from uncurated import host_reads, objectives
from uncurated.objectives import base

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import host_syncs  # noqa: E402  (a script of benchmarks/, imported by path)


@pytest.mark.parametrize("engine", ["dense", "tiled"])
@pytest.mark.parametrize("name", list(objectives.OBJECTIVES))
def test_a_loop_step_reads_the_device_at_most_twice(name, engine):
    """NUCLR learning its popularities included: on the Python tiles under the CUDA policy its column statistics
    take the running maximum, which needs no read of their row offsets' spread."""
    counters = host_syncs.count_loop(name, engine, batch=16, dim=8)
    assert counters["objective"].total == 1, counters["objective"].by_site()
    assert counters["objective"].total + counters["loss value"].total <= host_syncs.TARGET


@pytest.mark.parametrize("name", ["sogclr", "nuclr"])
def test_under_the_cpu_policy_only_nuclr_reads_once_more_for_its_column_statistics(name, monkeypatch):
    """The CPU policy, where a read stalls nothing: NUCLR's column statistics read their row offsets' spread (both
    directions at once) to take the shared exponentials; nothing else reads more than under the CUDA policy."""
    monkeypatch.setitem(host_syncs.ENGINES, "tiled", {**host_syncs.ENGINES["tiled"], "tile_policy": "cpu"})
    counters = host_syncs.count_loop(name, "tiled", batch=16, dim=8)
    assert counters["objective"].total == 1 + (name == "nuclr"), counters["objective"].by_site()


@pytest.mark.parametrize("name", ["sogclr", "nuclr"])
def test_a_loop_step_on_the_kernels_reads_the_device_twice(name):
    """The Triton kernels (under Triton's interpreter without CUDA): NUCLR's update, written in the backward pass,
    reads nothing there (its xi stays on the device)."""
    pytest.importorskip("triton")
    if not torch.cuda.is_available() and os.environ.get("TRITON_INTERPRET") != "1":
        pytest.skip("the kernels need CUDA or Triton's interpreter")
    counters = host_syncs.count_loop(name, "triton", batch=16, dim=8)
    assert counters["objective"].total == 1, counters["objective"].by_site()
    assert counters["objective"].total + counters["loss value"].total == host_syncs.TARGET


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


def _poison_zeta_updates(loss, monkeypatch) -> None:
    original = type(loss).zeta_updates

    def poisoned(self, *args):
        return {name: values * math.nan for name, values in original(self, *args).items()}

    monkeypatch.setattr(type(loss), "zeta_updates", poisoned)


def _nuclr_state(loss) -> tuple[dict, dict]:
    tensors = {key: tensor.clone() for key, tensor in loss.state.tensors.items()}
    return tensors, loss.state.scalar_values()


def _assert_state(loss, before: tuple[dict, dict]) -> None:
    tensors, scalars = before
    for key, tensor in loss.state.tensors.items():
        assert torch.equal(tensor, tensors[key]), key
    assert loss.state.scalar_values() == scalars


def test_a_state_update_with_nan_raises_before_anything_is_written(monkeypatch):
    """Dense: read with the call's checks."""
    loss = objectives.build("nuclr", num_samples=8, freeze_epochs=0, tiling="never")
    loss.set_epoch(0.0)
    _poison_zeta_updates(loss, monkeypatch)
    before = _nuclr_state(loss)
    loss.begin_step()
    with pytest.raises(ValueError, match=r"new zeta values for side '[ab]' contain NaN or inf"):
        a = torch.randn(4, 3, requires_grad=True)
        loss(a, torch.randn(4, 3), index=torch.arange(4)).backward()
    _assert_state(loss, before)


def test_a_state_update_with_nan_written_in_the_backward_pass_is_refused_there_and_raised_by_the_next_call(
    monkeypatch,
):
    """Tiles, where NUCLR's popularities are written in the backward pass: nothing is read there; the rows and xi
    keep their values, and the next training call raises with its first read."""
    loss = objectives.build("nuclr", num_samples=8, freeze_epochs=0, tiling="always", block_size=2, tile_policy="cuda")
    loss.set_epoch(0.0)
    loss.begin_step()
    loss(torch.randn(4, 3, requires_grad=True), torch.randn(4, 3), index=torch.arange(4, 8)).backward()
    assert isinstance(loss.state.scalars["xi_b"], torch.Tensor)  # xi moved on the device, not read
    _poison_zeta_updates(loss, monkeypatch)
    before = _nuclr_state(loss)
    loss.begin_step()
    a = torch.randn(4, 3, requires_grad=True)
    with host_syncs.SyncCounter() as counter:
        loss(a, torch.randn(4, 3), index=torch.arange(4)).backward()
    assert counter.total == 1, counter.by_site()  # the engine's read, with the call's checks
    assert bool(loss.refused_after_backward)
    _assert_state(loss, before)
    monkeypatch.undo()
    loss.begin_step()
    with pytest.raises(ValueError, match="state update of the previous training call, .* was refused"):
        loss(torch.randn(4, 3), torch.randn(4, 3), index=torch.arange(4))
    loss.begin_step()
    loss(torch.randn(4, 3), torch.randn(4, 3), index=torch.arange(4))  # raised once


def test_xi_on_the_device_is_saved_as_a_number_and_a_saved_number_loads():
    """NUCLR keeps xi as a 0-d tensor on the device once it learns; its checkpoints hold a number, as before."""
    trained = objectives.build("nuclr", num_samples=8, freeze_epochs=0, tiling="never", zeta_lr=5.0)
    trained.set_epoch(0.0)
    for start in (0, 4):
        trained.begin_step()
        a = torch.randn(4, 3, requires_grad=True)
        trained(a, torch.randn(4, 3), index=torch.arange(start, start + 4)).backward()
    assert isinstance(trained.state.scalars["xi_a"], torch.Tensor)
    saved = trained.state_dict()["state._extra_state"]["scalars"]
    assert all(type(value) is float for value in saved.values()) and saved["xi_a"] > 0.05
    fresh = objectives.build("nuclr", num_samples=8, freeze_epochs=0, tiling="never", zeta_lr=5.0)
    fresh.load_state_dict(trained.state_dict())
    assert fresh.state.scalars == saved
    fresh.set_epoch(0.0)
    fresh.begin_step()
    fresh(torch.randn(4, 3), torch.randn(4, 3), index=torch.arange(4))  # a number loaded, then learned on
    assert float(fresh.state.scalars["xi_a"]) >= saved["xi_a"]


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


def _trainer(out, *keys: str):
    """A ``Trainer`` of ``host_syncs.TRAINER`` with the configuration ``keys``, its model and its objective."""
    from uncurated.train import load_config
    from uncurated.train.builders import TrainingParts, build_augmentation, build_model, build_objective, build_splits
    from uncurated.train.distributed import Distributed
    from uncurated.train.random_state import seed_everything
    from uncurated.train.trainer import Trainer

    config = load_config([*host_syncs.TRAINER, f"out={out}", "epochs=1", *keys])
    splits = build_splits(config)
    seed_everything(config.seed)
    model, objective = build_model(config, splits.train), build_objective(config, splits.train)
    parts = TrainingParts(model, objective, splits.train, build_augmentation(config), config.pipeline)
    return Trainer(config, parts, Distributed(), out / "run"), splits, model, objective


def test_the_trainer_asks_every_objective_for_its_indices_check_and_its_refusal(tmp_path, monkeypatch):
    """No branch on the objective's kind: a batch objective's hooks are called too (no-ops of ``Objective``), and a
    refusal it hands over skips the step as a global objective's does."""
    trainer, splits, model, objective = _trainer(tmp_path, "objective=infonce")
    checked = []
    monkeypatch.setattr(objective, "check_indices", lambda index, batch: checked.append(batch))
    monkeypatch.setattr(objective, "take_backward_refusal", lambda: torch.tensor(True))
    weights = {name: value.clone() for name, value in model.state_dict().items()}
    trainer.step(splits.train.batch(trainer.plan.epoch(0)[0]))
    assert checked == [32]
    assert trainer.nonfinite == {"total": 1, "in_a_row": 1}
    for name, value in model.state_dict().items():
        assert torch.equal(value, weights[name]), name  # the optimizer did not step


def test_a_trainer_step_whose_update_was_refused_in_the_backward_pass_is_skipped_with_its_one_read(
    tmp_path, monkeypatch
):
    """NUCLR on tiles under ``Trainer.step``: the refusal is read with the loss and the gradients' finiteness, the
    step is skipped and counted, the state is left as it was, and the next step does not raise it again."""
    tiles = [f"objective.{key}={value}" for key, value in host_syncs.ENGINES["tiled"].items()]
    trainer, splits, model, objective = _trainer(tmp_path, "objective=nuclr", "objective.freeze_epochs=0", *tiles)
    batches = trainer.plan.epoch(0)
    objective.set_epoch(0.5)  # mid-run: at the end of its one epoch, zeta's cosine step size is 0
    trainer.step(splits.train.batch(batches[0]))
    _poison_zeta_updates(objective, monkeypatch)
    before = _nuclr_state(objective)
    weights = {name: value.clone() for name, value in model.state_dict().items()}
    with host_syncs.SyncCounter() as counter:
        trainer.step(splits.train.batch(batches[1]))
    assert trainer.nonfinite == {"total": 1, "in_a_row": 1}
    assert objective.refused_after_backward is None
    _assert_state(objective, before)
    for name, value in model.state_dict().items():
        assert torch.equal(value, weights[name]), name  # the optimizer did not step
    assert sum(site.startswith("tolist at uncurated/train/trainer.py:") for site in counter.by_site()) == 1
    monkeypatch.undo()
    trainer.step(splits.train.batch(batches[2]))
    assert trainer.nonfinite["in_a_row"] == 0
