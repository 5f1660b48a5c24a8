"""A run resumes under any number of processes, in any order: the optimizer's state is saved and loaded by parameter
name in every format (whole in one process, gathered or sharded under torchrun), and checkpoints keyed by position,
as earlier versions wrote them, still load."""

import pytest
import torch
from test_stream_resume import cut_after
from test_train_parallel import fsdp_cut_run_settings
from training import final_weights, logged_losses, torchrun_train

from uncurated.train import load_config, train
from uncurated.train import run as run_module
from uncurated.train import trainer as trainer_module
from uncurated.train.checkpoint import FAULT_VARIABLE, read_checkpoint, sharded_weights


@pytest.fixture(autouse=True)
def no_evaluation(monkeypatch):
    """The in-process runs skip the evaluation at the end: these tests read what training wrote."""
    monkeypatch.setattr(run_module, "evaluate", lambda *args, **kwargs: {})


def settings(tmp_path) -> list[str]:
    """The resharding tests' parallel=fsdp run (11 steps, checkpoints at 4 and 8), every checkpoint kept."""
    return [*fsdp_cut_run_settings(tmp_path), "keep_checkpoints=9"]


def assert_same_run(tmp_path, expected: str, got: str) -> None:
    """Within the round-off that separates one process's sums from two processes' (the resharding tests' bound)."""
    one, other = final_weights(tmp_path / expected), final_weights(tmp_path / got)
    assert one.keys() == other.keys()
    for name in one:
        torch.testing.assert_close(other[name], one[name], rtol=1e-5, atol=1e-6, msg=name)
    assert logged_losses(tmp_path / got) == pytest.approx(logged_losses(tmp_path / expected), rel=1e-5)


def test_the_optimizer_state_of_one_process_is_saved_by_parameter_name(tmp_path):
    common = settings(tmp_path)
    train(load_config([*common, "name=one", "epochs=0.2"]))
    _, state = read_checkpoint(tmp_path / "one" / "checkpoints" / "step-00000004")
    optimizer = state["optimizer"]
    names = [name for group in optimizer["param_groups"] for name in group["params"]]
    assert names and all(isinstance(name, str) for name in names)
    assert sorted(optimizer["state"]) == sorted(names)
    assert all(name.startswith(("model.", "objective.")) for name in names)


def test_a_checkpoint_keyed_by_position_still_resumes(tmp_path, monkeypatch):
    """A run whose checkpoint holds the optimizer's state by position (as earlier versions wrote it) resumes to the
    uninterrupted run's weights, bit for bit."""
    common = settings(tmp_path)
    train(load_config([*common, "name=whole"]))
    with monkeypatch.context() as patched:
        patched.setattr(
            trainer_module, "whole_optimizer_state", lambda modules, optimizer, sharded: optimizer.state_dict()
        )
        train(load_config([*common, "name=earlier"]))
    cut_after(tmp_path / "earlier", tmp_path / "cut", 8)
    _, state = read_checkpoint(tmp_path / "cut" / "checkpoints" / "step-00000008")
    assert isinstance(state["optimizer"]["param_groups"][0]["params"][0], int)
    train(load_config([*common, "name=cut", "resume=true"]))
    whole, resumed = final_weights(tmp_path / "whole"), final_weights(tmp_path / "cut")
    for name, values in whole.items():
        assert torch.equal(resumed[name], values), name


@pytest.mark.slow  # about 20-45 s: torchrun launches
def test_a_one_process_run_resumes_sharded_in_two(tmp_path):
    """parallel=fsdp trained in one process (a whole checkpoint), then resumed by two processes, which shard it:
    the run ends as the uninterrupted one-process run. Loaded by name from a state saved by position, this failed
    with ``KeyError: 'state.0.step'``."""
    common = settings(tmp_path)
    train(load_config([*common, "name=one"]))
    cut_after(tmp_path / "one", tmp_path / "grown", 4)
    torchrun_train(*common, "name=grown", "resume=true", timeout=180)
    assert sharded_weights(tmp_path / "grown" / "checkpoints" / "step-00000008") is not None
    assert_same_run(tmp_path, "one", "grown")


@pytest.mark.slow
def test_a_run_goes_from_two_processes_to_one_and_back_to_two(tmp_path):
    """Sharded by two up to step 4 (killed after its checkpoint), whole in one up to step 8, sharded by two again to
    the end: the weights and losses of the uninterrupted one-process run."""
    common = settings(tmp_path)
    train(load_config([*common, "name=one"]))
    cut = torchrun_train(*common, "name=moved", environment={FAULT_VARIABLE: "4:pointer"}, succeed=False, timeout=180)
    assert cut.returncode != 0
    assert sharded_weights(tmp_path / "moved" / "checkpoints" / "step-00000004") is not None
    train(load_config([*common, "name=moved", "resume=true"]))
    cut_after(tmp_path / "moved", tmp_path / "back", 8)
    assert sharded_weights(tmp_path / "back" / "checkpoints" / "step-00000008") is None  # one process: whole
    torchrun_train(*common, "name=back", "resume=true", timeout=180)
    assert_same_run(tmp_path, "one", "back")


def test_whole_optimizer_state_names_each_parameter_whatever_the_groups_order():
    """Groups that list the parameters in another order than the modules name them (the projections after every
    encoder, as the trainer's AdamW groups them): each name holds its own parameter's moments, and the state loads
    back into a fresh optimizer, from names or from positions."""
    from torch import nn

    from uncurated.train.parallel import load_whole_optimizer_state, whole_optimizer_state

    torch.manual_seed(0)
    modules = nn.ModuleDict({"image": nn.Linear(3, 4), "head": nn.Linear(4, 2), "text": nn.Linear(5, 6)})

    def optimizer():
        order = [modules["image"].weight, modules["image"].bias, modules["text"].weight, modules["text"].bias]
        groups = [{"params": order}, {"params": list(modules["head"].parameters()), "lr": 0.5}]
        return torch.optim.AdamW(groups)

    trained = optimizer()
    loss = modules["head"](modules["image"](torch.randn(2, 3))).sum() + modules["text"](torch.randn(2, 5)).sum()
    loss.backward()
    trained.step()
    state = whole_optimizer_state(modules, trained, False)
    for name, parameter in modules.named_parameters():
        assert torch.equal(state["state"][name]["exp_avg"], trained.state[parameter]["exp_avg"]), name
    assert state["param_groups"][1]["params"] == ["head.weight", "head.bias"]
    for saved in (state, trained.state_dict()):
        fresh = optimizer()
        load_whole_optimizer_state(modules, fresh, saved, False)
        for parameter in modules.parameters():
            assert torch.equal(fresh.state[parameter]["exp_avg_sq"], trained.state[parameter]["exp_avg_sq"])
        assert fresh.param_groups[1]["lr"] == 0.5
