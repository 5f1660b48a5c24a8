"""The training state's on-disk encoding: exact round trips of every type it takes, and refusals of the rest."""

import json
import math
import random
from collections import OrderedDict

import numpy as np
import pytest
import torch
from safetensors.torch import save_file

from uncurated.data import SkipCounts, SkipReport
from uncurated.train import random_state
from uncurated.train.state_codec import FORMAT, VERSION, StateFormatError, load_state, save_state


def test_every_type_it_takes_round_trips_exactly(tmp_path):
    optimizer = torch.optim.AdamW([torch.nn.Parameter(torch.randn(3, 2)), torch.nn.Parameter(torch.randn(2))])
    optimizer.zero_grad()
    sum(p.sum() for group in optimizer.param_groups for p in group["params"]).backward()
    optimizer.step()
    state = {
        "plain": [None, True, 0, -3, 2**70, 1.0, -0.0, 1e-310, "text", ""],
        "non_finite": [math.inf, -math.inf],
        "nested": {"tuple": (1, (2.5, "x")), "size": torch.Size([3, 4]), "empty": {}, "list": [[], ()]},
        "tensors": {
            "half": torch.randn(3).half(),
            "bf16": torch.randn(2, 2).bfloat16(),
            "scalar": torch.tensor(7),
            "bytes": torch.arange(5, dtype=torch.uint8),
            "empty": torch.zeros(0, 4),
        },
        "optimizer": optimizer.state_dict(),  # keyed by parameter index, with tuples (betas) in its groups
        "ordered": OrderedDict([("b", 1), ("a", torch.ones(2))]),
    }
    save_state(state, tmp_path / "state.safetensors")
    loaded = load_state(tmp_path / "state.safetensors")
    assert_same(state, loaded)
    assert math.isnan(save_and_load(tmp_path, {"nan": math.nan})["nan"])
    assert isinstance(loaded["nested"]["size"], tuple) and isinstance(loaded["ordered"], dict)
    assert list(loaded["optimizer"]["state"]) == [0, 1]  # int keys stay ints: load_state_dict matches them


def test_a_restored_optimizer_continues_bit_for_bit(tmp_path):
    def make():
        torch.manual_seed(0)
        parameter = torch.nn.Parameter(torch.randn(4))
        return parameter, torch.optim.AdamW([parameter], lr=0.1)

    def step(parameter, optimizer):
        optimizer.zero_grad()
        (parameter**2).sum().backward()
        optimizer.step()

    parameter, optimizer = make()
    step(parameter, optimizer)
    saved = save_and_load(tmp_path, {"parameter": parameter.detach().clone(), "optimizer": optimizer.state_dict()})
    step(parameter, optimizer)
    other, restored = make()
    with torch.no_grad():
        other.copy_(saved["parameter"])
    restored.load_state_dict(saved["optimizer"])
    step(other, restored)
    assert torch.equal(other, parameter)


def test_random_generators_continue_where_they_were_captured(tmp_path):
    random.seed(1)
    np.random.seed(1)
    torch.manual_seed(1)
    np.random.normal()  # leaves a cached gaussian in NumPy's state
    random.gauss(0, 1)
    captured = save_and_load(tmp_path, {"rng": random_state.capture()})["rng"]
    expected = (random.random(), np.random.normal(), torch.rand(2))
    random.seed(2)
    np.random.seed(2)
    torch.manual_seed(2)
    random_state.restore(captured)
    drawn = (random.random(), np.random.normal(), torch.rand(2))
    assert drawn[:2] == expected[:2] and torch.equal(drawn[2], expected[2])
    assert json.dumps(captured["numpy"]) and json.dumps(captured["python"])  # plain values only


def test_skip_counts_round_trip_and_refuse_an_unknown_reason(tmp_path):
    report = SkipReport(max_fraction=1.0)
    report.record_good(5)
    report.record("corrupt", "a.png", index=3, detail="bad header")
    report.record("missing", "b.png")
    saved = save_and_load(tmp_path, {"skips": report.state_dict()})["skips"]
    assert SkipCounts.from_state_dict(saved) == report
    with pytest.raises(ValueError, match="reason"):
        SkipCounts.from_state_dict({**saved, "counts": {"exploded": 1}})


@pytest.mark.parametrize(
    "value, named",
    [
        (np.zeros(3), r"state\['a'\]\[1\] is a numpy.ndarray"),
        (object(), r"state\['a'\]\[1\] is a builtins.object"),
        ({1.5: 0}, r"state\['a'\]\[1\] is a dict with keys of type float"),
        ({True: 0}, r"keys of type bool"),
    ],
)
def test_a_value_without_an_encoding_is_refused_naming_where_it_is(tmp_path, value, named):
    with pytest.raises(TypeError, match=named):
        save_state({"a": [0, value]}, tmp_path / "state.safetensors")
    assert not (tmp_path / "state.safetensors").exists()


def structure_file(path, structure, tensors=None, **header):
    metadata = {"format": FORMAT, "version": VERSION, "structure": json.dumps(structure), **header}
    save_file(tensors or {}, path, metadata=metadata)
    return path


@pytest.mark.parametrize(
    "structure, tensors, problem",
    [
        ({"object": "os.system"}, None, "invalid"),
        ({"dict": {"a": {"tensor": "0"}}}, None, "invalid"),
        ({"dict": {"a": {"tensor": "0"}, "b": {"tensor": "0"}}}, {"0": torch.ones(1)}, "repeated"),
        ({"dict": {}}, {"0": torch.ones(1)}, "does not use"),
        ({"items": [[1.5, 0]]}, None, "invalid"),
        ({"float": "1e400"}, None, "invalid"),
        ([1, 2], None, "not a dict"),
        ({"a": 1, "b": 2}, None, "one-key object"),
    ],
)
def test_an_invalid_structure_is_refused(tmp_path, structure, tensors, problem):
    with pytest.raises(StateFormatError, match=problem):
        load_state(structure_file(tmp_path / "state.safetensors", structure, tensors))


def test_a_file_of_another_kind_is_refused_naming_it(tmp_path):
    pickled = tmp_path / "pickled.safetensors"
    torch.save({"a": 1}, pickled)
    with pytest.raises(StateFormatError, match=r"pickled.safetensors is not a safetensors file"):
        load_state(pickled)
    weights = tmp_path / "weights.safetensors"
    save_file({"w": torch.ones(2)}, weights)  # a safetensors file, but not a training state
    with pytest.raises(StateFormatError, match=r"not a training-state file of version 1.*format None"):
        load_state(weights)
    nested = "[" * 100_000 + "]" * 100_000
    save_file({}, tmp_path / "nested.safetensors", metadata={"format": FORMAT, "version": VERSION, "structure": nested})
    with pytest.raises(StateFormatError, match="invalid structure"):
        load_state(tmp_path / "nested.safetensors")


def save_and_load(tmp_path, state):
    save_state(state, tmp_path / "round-trip.safetensors")
    return load_state(tmp_path / "round-trip.safetensors")


def assert_same(expected, actual, where="state"):
    """Equality that also compares types (tuple vs list, int vs float) and tensors bit for bit."""
    if isinstance(expected, torch.Tensor):
        assert expected.dtype == actual.dtype and torch.equal(expected, actual), where
    elif isinstance(expected, dict):
        assert list(expected) == list(actual), where
        for key in expected:
            assert_same(expected[key], actual[key], f"{where}[{key!r}]")
    elif isinstance(expected, list | tuple):
        assert isinstance(actual, tuple if isinstance(expected, tuple) else list), where
        assert len(expected) == len(actual), where
        for number, (left, right) in enumerate(zip(expected, actual, strict=True)):
            assert_same(left, right, f"{where}[{number}]")
    else:
        assert type(expected) is type(actual) and expected == actual, where
        if isinstance(expected, float):
            assert math.copysign(1, expected) == math.copysign(1, actual), where  # -0.0 stays -0.0


def test_tensors_are_named_by_where_they_sit_and_files_with_numbered_tensors_still_load(tmp_path):
    from safetensors import safe_open

    from uncurated import objectives

    nuclr = objectives.build("nuclr", num_samples=8, freeze_epochs=0)
    nuclr.set_epoch(0)
    nuclr.begin_step()
    features = [torch.randn(8, 4, requires_grad=True) for _ in range(2)]
    nuclr(*features, index=torch.arange(8)).backward()
    save_state(nuclr.state_dict(), tmp_path / "objective.safetensors")
    with safe_open(tmp_path / "objective.safetensors", framework="pt") as file:
        names = set(file.keys())
    assert not any(name.isdigit() for name in names), names
    assert {"zeta/a", "zeta/b"} <= {name.rsplit(".", 1)[-1] for name in names}, names  # the fields, by side
    state = {"a.b": torch.ones(1), "a": {"b": torch.zeros(1)}, "list": [torch.full((2,), 3.0)]}
    save_state(state, tmp_path / "dotted.safetensors")
    with safe_open(tmp_path / "dotted.safetensors", framework="pt") as file:
        assert set(file.keys()) == {"a.b", "a.b#2", "list.0"}
    assert_same(state, load_state(tmp_path / "dotted.safetensors"))
    # As every earlier version wrote it: tensors named 0, 1, ... in the order met.
    structure = {"dict": {"zeta": {"tensor": "0"}, "rows": [{"tensor": "1"}]}}
    metadata = {"format": FORMAT, "version": VERSION, "structure": json.dumps(structure)}
    save_file({"0": torch.arange(3.0), "1": torch.ones(2)}, tmp_path / "numbered.safetensors", metadata=metadata)
    assert_same({"zeta": torch.arange(3.0), "rows": [torch.ones(2)]}, load_state(tmp_path / "numbered.safetensors"))
