"""The kernels' launch configurations: the fixed one under Triton's interpreter, a keyed candidate list and a table
on CUDA; what the plan launches, and non-default candidates computing the dense engine's values under the
interpreter."""

from __future__ import annotations

import importlib.util
import os

import pytest
import torch

from uncurated import objectives
from uncurated.objectives.tiled.kernels import configs, recorded_launches
from uncurated.objectives.tiled.kernels.launch import launch as launch_kernel
from uncurated.objectives.tiled.kernels.support import Blocks

TYPES = (torch.float32, torch.bfloat16, torch.float16)
DIMS = (1, 8, 96, 128, 512, 1000, 1024)


@pytest.mark.parametrize("dtype", TYPES)
@pytest.mark.parametrize("dim", DIMS)
def test_the_interpreter_gets_the_fixed_config_whatever_the_device(dim, dtype):
    padded = configs.padded_dim(dim)
    for device in ("cpu", "cuda"):
        config = configs.choose(device, dim, dtype, block_size=32, interpreter=True)
        assert config == configs.KernelConfig(32, 32, padded, padded, 8, None)  # one product step, default stages
    assert configs.choose("cpu", dim, dtype, interpreter=False) == configs.fixed(dim, dtype)  # CPU tensors too


INTERPRETED = pytest.mark.skipif(
    importlib.util.find_spec("triton") is None or os.environ.get("TRITON_INTERPRET") != "1",
    reason="runs the kernels under Triton's interpreter (tests/conftest.py sets it without CUDA)",
)


def block_shapes(launches) -> set[tuple]:
    """``(BLOCK_M, BLOCK_N, BLOCK_K, BLOCK_D or None, warps, stages)`` of recorded launches."""
    found = set()
    for record in launches:
        shape = {k.removeprefix("shape."): v for k, v in record.switches.items() if k.startswith("shape.")}
        block_d = record.switches.get("BLOCK_D")
        found.add((shape["BLOCK_M"], shape["BLOCK_N"], shape["BLOCK_K"], block_d, record.warps, record.stages))
    return found


@INTERPRETED
def test_the_kernels_under_the_interpreter_launch_the_fixed_config():
    objective = objectives.build("infonce", tiling="triton", block_size=16)
    a, b = (torch.randn(20, 24, dtype=torch.bfloat16, requires_grad=True) for _ in range(2))
    with recorded_launches() as launches:
        objective(a, b).backward()
    config = configs.choose("cpu", 24, torch.bfloat16, block_size=16)
    assert launches and {launch.warps for launch in launches} == {config.warps}
    assert {launch.stages for launch in launches} == {None}  # Triton's default: no num_stages passed
    for launch in launches:
        shape = {k.removeprefix("shape."): v for k, v in launch.switches.items() if k.startswith("shape.")}
        assert (shape["BLOCK_M"], shape["BLOCK_N"], shape["BLOCK_K"]) == (
            config.block_m,
            config.block_n,
            config.block_k,
        )
        assert launch.switches.get("BLOCK_D", config.block_d) == config.block_d


@pytest.mark.parametrize("dtype", TYPES)
@pytest.mark.parametrize("dim", DIMS)
def test_cuda_gets_a_candidate_list_keyed_on_the_padded_dimension_and_type(dim, dtype):
    listed = configs.candidates(dim, dtype)
    padded = configs.padded_dim(dim)
    assert configs.key(dim, dtype) == (padded, str(dtype).removeprefix("torch."))
    assert len(listed) >= (1 if padded == 16 else 8) and len(set(listed)) == len(listed)
    launched = configs.choose("cuda", dim, dtype, interpreter=False)
    blocks = Blocks.choose(None, dim, dtype, interpreter=False)  # what the kernels launch on a GPU today
    assert launched == listed[0]
    assert (launched.block_m, launched.block_k, launched.block_d, launched.warps) == (
        blocks.rows,
        blocks.depth,
        blocks.gradient_depth,
        blocks.warps,
    )
    assert launched.stages == configs.TRITON_DEFAULT_STAGES
    for config in listed:
        assert config.block_k <= padded and padded % config.block_k == 0 and config.block_k >= 16
        assert config.block_d <= padded and padded % config.block_d == 0
        assert config.shared_memory(dtype) <= configs.SHARED_MEMORY_BYTES
        assert config.accumulator_registers() <= configs.MAX_ACCUMULATOR_REGISTERS
        assert config.stages and config.warps in (4, 8)
    assert configs.choose("cuda", dim, dtype, block_size=128, interpreter=False).block_m == 128


def test_the_candidates_depend_on_the_key_only():
    assert configs.candidates(100, torch.bfloat16) == configs.candidates(128, torch.bfloat16)  # one padded dim
    assert configs.candidates(512, torch.float32) != configs.candidates(512, torch.bfloat16)  # operands' width
    assert configs.candidates(16, torch.bfloat16) != configs.candidates(512, torch.bfloat16)  # steps within d
    float32_depths = {c.block_k for c in configs.candidates(512, torch.float32)}
    half_depths = {c.block_k for c in configs.candidates(512, torch.bfloat16)}
    assert max(float32_depths) < max(half_depths)  # float32 operands hold twice the registers and shared memory


def test_float32_under_tf32_has_a_key_and_a_table_entry_of_its_own(monkeypatch, float32_setting):
    """TF32 and IEEE float32 products run on different units: a configuration timed under one is not the other's."""
    tf32, ieee = configs.KernelConfig(128, 128, 32, 64, 4, 2), configs.KernelConfig(64, 64, 32, 32, 8, 4)
    monkeypatch.setattr(configs, "architecture", lambda device: "sm_90")
    monkeypatch.setitem(configs.TUNED, ("sm_90", 512, "tf32"), tf32)
    monkeypatch.setitem(configs.TUNED, ("sm_90", 512, "float32"), ieee)
    assert configs.key(500, torch.float32) == (512, "float32")
    assert configs.choose("cuda", 500, torch.float32, interpreter=False) == ieee
    torch.backends.cuda.matmul.fp32_precision = "tf32"
    assert configs.key(500, torch.float32) == (512, "tf32")
    assert configs.key(500, torch.bfloat16) == (512, "bfloat16")  # half-precision products are their own type
    assert configs.choose("cuda", 500, torch.float32, interpreter=False) == tf32
    torch.backends.cuda.matmul.fp32_precision = "ieee"
    assert configs.choose("cuda", 500, torch.float32, interpreter=False) == ieee


def test_a_filled_table_entry_is_launched_on_its_architecture_and_key(monkeypatch):
    tuned = configs.KernelConfig(128, 128, 32, 64, 4, 2)
    monkeypatch.setattr(configs, "architecture", lambda device: "sm_90")
    monkeypatch.setitem(configs.TUNED, ("sm_90", 512, "bfloat16"), tuned)
    assert configs.choose("cuda", 500, torch.bfloat16, interpreter=False) == tuned  # 500 pads to 512
    assert configs.choose("cuda", 500, torch.bfloat16, block_size=128, interpreter=False) == tuned
    untuned = configs.candidates(500, torch.float32)[0]
    assert configs.choose("cuda", 500, torch.float32, interpreter=False) == untuned  # another key
    assert (
        configs.choose("cuda", 1024, torch.bfloat16, interpreter=False) == configs.candidates(1024, torch.bfloat16)[0]
    )
    # a block side the objective sets other than the entry's: the untuned shapes at that side, as before tuning
    assert configs.choose("cuda", 500, torch.bfloat16, block_size=64, interpreter=False) == configs.fixed(
        500, torch.bfloat16, 64, interpreter=False
    )
    assert configs.choose("cpu", 500, torch.bfloat16, interpreter=True) == configs.fixed(500, torch.bfloat16)
    monkeypatch.setattr(configs, "architecture", lambda device: "sm_80")
    assert configs.choose("cuda", 500, torch.bfloat16, interpreter=False) == configs.candidates(500, torch.bfloat16)[0]


def test_launching_forces_a_config_everywhere_and_blocks_clip_to_the_padded_dimension():
    forced = configs.KernelConfig(64, 64, 32, 128, 4, 2)
    with configs.launching(forced):
        assert configs.choose("cpu", 24, torch.float32, block_size=16) == forced
        assert configs.choose("cuda", 24, torch.float32, interpreter=False) == forced
    assert configs.choose("cpu", 24, torch.float32, block_size=16) == configs.fixed(24, torch.float32, 16)
    assert forced.blocks(24) == Blocks(64, 32, 32, 32, 4, 2)  # d = 24 pads to 32: one step, one slice
    assert forced.blocks(200) == Blocks(64, 32, 256, 128, 4, 2)


def test_blocks_are_square():
    with pytest.raises(ValueError, match="square score blocks.*block_m=64, block_n=128"):
        configs.KernelConfig(64, 128, 16, 128, 8, 3)


class _Kernel:
    """Stands for a jitted kernel: ``kernel[grid](**arguments)`` records its keywords."""

    fn = staticmethod(lambda sides, shape: None)

    def __init__(self) -> None:
        self.calls: list[dict] = []

    def __getitem__(self, grid):
        return lambda **keywords: self.calls.append(keywords)


def test_launch_passes_stages_only_when_the_config_names_them():
    kernel = _Kernel()
    launch_kernel(kernel, (1,), {"sides": 1}, 8)
    launch_kernel(kernel, (1,), {"sides": 1}, 4, 2)
    assert kernel.calls == [{"sides": 1, "num_warps": 8}, {"sides": 1, "num_warps": 4, "num_stages": 2}]


def candidate(dim: int, dtype: torch.dtype, **fields) -> configs.KernelConfig:
    """The first candidate with these ``fields`` (``block_m=128``, ...)."""
    return next(c for c in configs.candidates(dim, dtype) if all(getattr(c, k) == v for k, v in fields.items()))


SHAPES = [  # other rows, product steps and gradient slices than the launched 64, 16 (bf16: 64) and 128
    ("cross", torch.float32, {"block_m": 128, "block_k": 32, "warps": 8}),
    ("two_view", torch.float32, {"block_m": 64, "block_k": 32, "block_d": 64, "warps": 4, "stages": 2}),
    ("cross", torch.bfloat16, {"block_m": 128, "block_k": 128, "block_d": 64}),
]


@INTERPRETED
@pytest.mark.parametrize(("pairing", "dtype", "fields"), SHAPES)
def test_non_default_candidates_compute_the_dense_engines_loss_and_gradients(pairing, dtype, fields):
    """Candidates other than the launched one, launched under the interpreter (d = 100, padded to 128: several
    product steps, and two gradient slices where they are 64 wide): the dense engine's value and feature
    gradients, to float32 rounding (bf16 features: their gradients' rounding)."""
    config = candidate(100, dtype, **fields)
    assert config != configs.candidates(100, dtype)[0]
    generator = torch.Generator().manual_seed(0)
    a, b = (torch.randn(70, 100, generator=generator).to(dtype) for _ in range(2))  # neither a multiple of a block
    wide = [x.double().requires_grad_() for x in (a, b)]
    dense = objectives.build("infonce", tiling="never", pairing=pairing).double()
    expected_value = dense(*wide)
    expected = [expected_value, *torch.autograd.grad(expected_value, wide)]
    fused = objectives.build("infonce", tiling="triton", pairing=pairing)
    inputs = [x.requires_grad_() for x in (a, b)]
    with configs.launching(config), recorded_launches() as launches:
        value = fused(*inputs)
        got = [value, *torch.autograd.grad(value, inputs)]
    square, launched = (config.block_m, config.block_n, config.block_k), (config.warps, config.stages)
    assert block_shapes(launches) == {(*square, None, *launched), (*square, config.block_d, *launched)}  # the plan's
    tolerance = 1e-5 if dtype == torch.float32 else 1e-2  # bf16 gradients are returned in bf16 (2^-9 relative)
    for want, have in zip(expected, got, strict=True):
        assert have.dtype == (torch.float32 if have.ndim == 0 else dtype)
        error = float((have.detach().double() - want.detach()).norm() / want.detach().norm())
        assert error <= tolerance, (config, error)
