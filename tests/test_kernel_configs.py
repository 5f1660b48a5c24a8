"""The kernels' launch configurations: the fixed one under Triton's interpreter, a keyed candidate list on CUDA."""

from __future__ import annotations

import importlib.util
import os

import pytest
import torch

from uncurated import objectives
from uncurated.objectives.tiled.kernels import configs, recorded_launches
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


@pytest.mark.skipif(
    importlib.util.find_spec("triton") is None or os.environ.get("TRITON_INTERPRET") != "1",
    reason="runs the kernels under Triton's interpreter (tests/conftest.py sets it without CUDA)",
)
def test_the_kernels_under_the_interpreter_launch_the_fixed_config():
    objective = objectives.build("infonce", tiling="triton", block_size=16)
    a, b = (torch.randn(20, 24, dtype=torch.bfloat16, requires_grad=True) for _ in range(2))
    with recorded_launches() as launches:
        objective(a, b).backward()
    config = configs.choose("cpu", 24, torch.bfloat16, block_size=16)
    assert launches and {launch.warps for launch in launches} == {config.warps}
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
