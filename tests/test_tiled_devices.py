"""The tile policy per device and the compiled per-tile functions: same values, gradients and state."""

from __future__ import annotations

import math
import warnings

import pytest
import torch

from uncurated import objectives
from uncurated.objectives.tiled import MAX_AUTO_BLOCK, Tiling, compiled_tiles, policy, positives, tile_bytes

STATEFUL = ("sogclr", "isogclr", "nuclr")


def build(name, num_samples=40, **options):
    if name in STATEFUL:
        options["num_samples"] = num_samples
    objective = objectives.build(name, **options)
    objective.set_epoch(0.0)
    objective.begin_step()
    return objective


def step(objective, a, b, labels=None):
    """Value, feature gradients and the per-sample state after one training call."""
    a, b = a.detach().clone().requires_grad_(), b.detach().clone().requires_grad_()
    extra = {"labels": labels} if labels is not None else {}
    value = objective(a, b, index=torch.arange(a.shape[0]), **extra)
    value.backward()
    state = getattr(objective, "state", None)
    tensors = [] if state is None else [state.tensors[key].clone() for key in sorted(state.tensors)]
    return [value.detach(), a.grad, b.grad, *tensors]


def assert_close(expected, got, tolerance):
    for want, have in zip(expected, got, strict=True):
        finite = torch.isfinite(want)
        assert torch.equal(finite, torch.isfinite(have))  # log u starts at -inf for samples not yet seen
        scale = max(1.0, float(want[finite].abs().max())) if finite.any() else 1.0
        torch.testing.assert_close(have[finite], want[finite], rtol=tolerance, atol=tolerance * scale)


def features(batch, dim=6, dtype=torch.float64, seed=0):
    generator = torch.Generator().manual_seed(seed)
    return tuple(torch.randn(batch, dim, generator=generator, dtype=dtype) for _ in range(2))


# -- the tile policy ---------------------------------------------------------------------------------


def test_auto_follows_the_features_device_and_the_other_policies_are_forced():
    assert Tiling().device_policy("cpu") == "cpu"
    assert Tiling().device_policy(torch.device("cuda", 0)) == "cuda"
    assert Tiling().device_policy(None) == "cpu"
    assert Tiling(policy="cpu").device_policy("cuda") == "cpu"
    assert Tiling(policy="cuda").device_policy("cpu") == "cuda"


def test_the_cpu_policy_keeps_its_budget_and_cap():
    tiling = Tiling(policy="cpu")
    assert tiling.budget("cpu") == policy.DEFAULT_MEMORY_BUDGET
    assert tiling.block_shape(65_536, 65_536, 256, torch.float32, "cpu") == (MAX_AUTO_BLOCK, MAX_AUTO_BLOCK)
    assert tiling.chunk_positives("cpu")


def test_the_cuda_policy_tiles_as_large_as_the_budget_allows():
    """No cap: the largest side whose working memory fits, balanced over the batch; positives in one chunk."""
    tiling = Tiling(policy="cuda")
    assert tiling.budget("cpu") == tiling.budget(None) == policy.ASSUMED_CUDA_BUDGET
    for dim in (64, 256, 1024):
        side = tiling.auto_block(dim, torch.float32, "cpu")
        assert side > MAX_AUTO_BLOCK
        assert tile_bytes(side, side, dim, torch.float32) <= policy.ASSUMED_CUDA_BUDGET
        assert tile_bytes(side + 1, side + 1, dim, torch.float32) > policy.ASSUMED_CUDA_BUDGET
    rows, cols = tiling.block_shape(65_536, 65_536, 256, torch.float32, "cpu")
    assert rows == cols == math.ceil(65_536 / math.ceil(65_536 / tiling.auto_block(256, torch.float32, "cpu")))
    assert not tiling.chunk_positives("cpu")
    assert Tiling(policy="cuda", memory_budget=2**30).budget("cpu") == 2**30  # the user's budget wins


def test_the_cuda_budget_is_a_share_of_the_devices_free_memory(monkeypatch):
    """Free memory on the device plus what PyTorch's allocator holds unused, asked at the call."""
    gib = 2**30
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device=None: (30 * gib, 80 * gib))
    monkeypatch.setattr(torch.cuda, "memory_reserved", lambda device=None: 6 * gib)
    monkeypatch.setattr(torch.cuda, "memory_allocated", lambda device=None: 4 * gib)
    device = torch.device("cuda", 0)
    assert Tiling().budget(device) == int(policy.CUDA_FREE_FRACTION * 32 * gib)
    assert Tiling(memory_budget=gib).budget(device) == gib
    assert Tiling(policy="cpu").budget(device) == policy.DEFAULT_MEMORY_BUDGET
    # the dense path while it fits the device's budget, tiles beyond
    assert not Tiling().use_tiles(16_384, 16_384, torch.float32, device)
    assert Tiling().use_tiles(65_536, 65_536, torch.float32, device)


@pytest.mark.parametrize("options", [{"tile_policy": "gpu"}, {"compile": "yes"}])
def test_bad_device_options_raise_naming_the_option(options):
    name = next(iter(options))
    with pytest.raises(ValueError, match=name):
        objectives.build("infonce", **options)
    with pytest.raises(ValueError, match=name):
        objectives.build("nuclr", num_samples=10, **options)


@pytest.mark.parametrize("name", list(objectives.OBJECTIVES))
def test_both_policies_compute_the_same_values_gradients_and_state(name, monkeypatch):
    """B = 1,500: the CPU policy's capped tiles and chunked positives, the CUDA policy's larger tiles (one across
    modalities) and positives in one chunk."""
    monkeypatch.setattr(positives, "CHUNK_ROWS", 128)
    a, b = features(1500, dim=4)
    budget = 2**27  # fits one 1,500-row float64 tile under the CUDA policy, not the dense matrix
    results = {}
    for tile_policy in ("cpu", "cuda"):
        tiling = Tiling("always", memory_budget=budget, policy=tile_policy)
        assert tiling.block_shape(1500, 1500, 4, torch.float64)[0] == (750 if tile_policy == "cpu" else 1500)
        objective = build(name, tiling="always", memory_budget=budget, tile_policy=tile_policy, num_samples=1500)
        results[tile_policy] = step(objective.double(), a, b)
    assert_close(results["cpu"], results["cuda"], 1e-10)


# -- the compiled per-tile functions -----------------------------------------------------------------


@pytest.fixture
def traced(monkeypatch):
    """Compile through ``aot_eager`` (the graphs ``torch.compile`` traces, without code generation) afresh."""
    monkeypatch.setattr(compiled_tiles, "BACKEND", "aot_eager")
    monkeypatch.setattr(compiled_tiles, "_compiled", {})
    monkeypatch.setattr(compiled_tiles, "_failed", [])
    torch._dynamo.reset()
    calls = []
    run = compiled_tiles.run

    def counted(function, *args):
        calls.append(function.__name__)
        return run(function, *args)

    monkeypatch.setattr(compiled_tiles, "run", counted)
    yield calls
    torch._dynamo.reset()


def compare_compiled(name, dtype, tolerance, labels=None, batch=13, block=5):
    a, b = features(batch, dtype=dtype)
    results = {}
    for compile in (False, True):
        objective = build(name, tiling="always", block_size=block, compile=compile).to(dtype)
        results[compile] = step(objective, a, b, labels)
        torch._dynamo.reset()  # a fresh cache per objective keeps each under the recompilation limit
    assert_close(results[False], results[True], tolerance)


# One objective per shape of the fast path's work: one scale folded across modalities, two views with two
# weights, per-anchor scales with the mean score, column offsets with the column statistic; the others in
# the slow suite (SigLIP's negative sums take the running-max path, which is not compiled).
COMPILED_FAST = ("infonce", "hcl", "isogclr", "nuclr")
COMPILED_SLOW = tuple(name for name in objectives.OBJECTIVES if name not in COMPILED_FAST)


@pytest.mark.parametrize(
    "name", [*COMPILED_FAST, *(pytest.param(name, marks=pytest.mark.slow) for name in COMPILED_SLOW)]
)
def test_compiled_tiles_equal_the_eager_ones_in_float64(name, traced):
    compare_compiled(name, torch.float64, 1e-10)
    if name != "siglip":  # its negative sums take the running-max path, which is not compiled
        assert {"forward_group", "backward_group"} <= set(traced)


@pytest.mark.parametrize("name", ["infonce", "isogclr", "nuclr"])
def test_compiled_tiles_equal_the_eager_ones_in_float32(name, traced):
    compare_compiled(name, torch.float32, 1e-5)


def test_compiled_tiles_serve_the_supervised_oracle(traced):
    compare_compiled("infonce", torch.float64, 1e-10, labels=torch.tensor([0, 1, 2, 0, 1, 2, 3, 3, 4, 0, 1, 2, 3]))


@pytest.mark.slow
@pytest.mark.parametrize("name", ["infonce", "dcl", "isogclr", "nuclr"])
@pytest.mark.parametrize(("dtype", "tolerance"), [(torch.float64, 1e-10), (torch.float32, 1e-5)])
def test_inductor_compiled_tiles_equal_the_eager_ones(name, dtype, tolerance, monkeypatch):
    """The default backend, with code generated for the CPU (minutes: each tile shape compiles)."""
    monkeypatch.setattr(compiled_tiles, "_compiled", {})
    torch._dynamo.reset()
    compare_compiled(name, dtype, tolerance, batch=24, block=12)


def test_compile_is_off_on_the_cpu_unless_asked():
    assert not Tiling().compiles("cpu") and not Tiling().compiles(None)
    assert Tiling(compile=True).compiles("cpu")
    assert not Tiling(compile=False).compiles(torch.device("cuda", 0))


def test_a_compiler_that_fails_warns_once_and_the_tiles_run_eager(monkeypatch):
    def broken(graph, example_inputs):
        raise RuntimeError("no compiler here")

    monkeypatch.setattr(compiled_tiles, "BACKEND", broken)
    monkeypatch.setattr(compiled_tiles, "_compiled", {})
    monkeypatch.setattr(compiled_tiles, "_failed", [])
    torch._dynamo.reset()
    a, b = features(13)
    expected = step(build("infonce", tiling="always", block_size=5).double(), a, b)
    with pytest.warns(RuntimeWarning, match="no compiler here"):
        got = step(build("infonce", tiling="always", block_size=5, compile=True).double(), a, b)
    assert_close(expected, got, 1e-12)
    assert not compiled_tiles.available(torch.device("cuda", 0))  # auto no longer compiles after a failure
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        step(build("infonce", tiling="always", block_size=5, compile=True).double(), a, b)
    torch._dynamo.reset()


def test_the_eager_fast_path_stays_the_default_on_the_cpu(monkeypatch):
    seen = []
    monkeypatch.setattr(compiled_tiles, "run", lambda function, *args: seen.append(function) or function(*args))
    a, b = features(13)
    step(build("infonce", tiling="always", block_size=5).double(), a, b)
    assert not seen
