"""The per-sample store of the global objectives: gather, all-or-nothing scatter, checks, save and load."""

import math

import pytest
import torch

from uncurated.state import SampleState


def store(**options):
    return SampleState({"a": 5, "b": 3}, {"log_u": -math.inf, "zeta": 0.5}, scalars={"xi_a": 0.0}, **options)


def test_fields_start_at_their_initial_values_and_gather_by_index():
    state = store()
    assert torch.equal(state.gather("zeta", "a", torch.tensor([4, 0])), torch.tensor([0.5, 0.5]))
    assert bool(torch.isneginf(state.gather("log_u", "b", torch.arange(3))).all())
    assert state.memory_bytes() == 4 * (5 + 3) * 2


def test_scatter_writes_all_updates_or_none():
    state = store()
    state.scatter([("zeta", "a", torch.tensor([1, 3]), torch.tensor([1.0, 2.0]))])
    assert state.gather("zeta", "a", torch.arange(5)).tolist() == [0.5, 1.0, 0.5, 2.0, 0.5]
    good = ("zeta", "b", torch.tensor([0]), torch.tensor([9.0]))
    bad = ("zeta", "a", torch.tensor([0]), torch.tensor([math.nan]))
    with pytest.raises(ValueError, match="new zeta values for side 'a' contain NaN or inf"):
        state.scatter([good, bad])
    assert state.gather("zeta", "b", torch.tensor([0])).item() == 0.5  # the good update was not written either
    state.scatter([("log_u", "a", torch.tensor([2]), torch.tensor([-math.inf]))])  # -inf where the field starts there


def test_indices_are_checked_by_side():
    state = store()
    with pytest.raises(ValueError, match=r"index_b must be in \[0, 3\)"):
        state.check_index("b", torch.tensor([0, 3]), "index_b")
    with pytest.raises(ValueError, match="must not repeat a sample"):
        state.check_index("a", torch.tensor([1, 1]))
    with pytest.raises(ValueError, match="1-D integer tensor"):
        state.check_index("a", torch.tensor([0.0]))


def test_the_state_follows_the_features_once_then_stays():
    state = store()
    state.follow(torch.zeros(2, dtype=torch.float64))
    assert state.tensors["zeta", "a"].dtype == torch.float64
    state.follow(torch.zeros(2, dtype=torch.float32))
    assert state.dtype == torch.float64
    assert store(dtype=torch.float64, device="cpu").dtype == torch.float64


def test_extra_state_round_trips_and_refuses_another_dataset():
    state = store()
    state.scatter([("zeta", "a", torch.tensor([2]), torch.tensor([-1.0]))])
    state.scalars["xi_a"] = 0.25
    restored = store()
    restored.set_extra_state(state.get_extra_state())
    assert torch.equal(restored.tensors["zeta", "a"], state.tensors["zeta", "a"])
    assert restored.scalars == {"xi_a": 0.25}
    other = SampleState({"a": 6, "b": 3}, {"log_u": -math.inf, "zeta": 0.5}, scalars={"xi_a": 0.0})
    with pytest.raises(ValueError, match="num_samples must match"):
        other.set_extra_state(state.get_extra_state())
    with pytest.raises(ValueError, match="num_samples must be an integer >= 2"):
        SampleState({"a": 1}, {"zeta": 0.0})
