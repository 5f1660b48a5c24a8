"""Launch configurations of the kernels per device, feature dimension and type: block shapes, warps, stages.

Under Triton's interpreter (and for CPU tensors) there is one fixed
configuration, the one the tests run: :meth:`~.support.Blocks.choose` with the
interpreter's shapes, whose products span the whole padded dimension in one
step (every block operation is a Python-level call there, so fewer, larger
steps are faster), and Triton's default stages (the interpreter ignores them).

On CUDA, :func:`candidates` lists the configurations worth timing for a
``(d, dtype)`` key (:func:`key`: the padded dimension and the type, what
changes the best shape), and :func:`choose` returns the one launched. Nothing
has been timed on a GPU yet, so :func:`choose` returns the shapes the kernels
launch today (:data:`~.support.DEFAULT_BLOCK` rows, the type's
:data:`~.support.PRODUCT_DEPTH`, :data:`~.support.GRADIENT_DEPTH`,
:data:`~.support.GPU_WARPS`; picked by compiling for sm_90 without spilling,
``benchmarks/triton_kernels.py --compile``) with Triton's default of 3
stages, and it is the first candidate. The list is a heuristic table (not
``triton.autotune``'s own search): score blocks of 64 or 128 rows and columns,
product steps of 16 to 64 float32 columns or 32 to 128 half-precision ones,
gradient slices of 64 or 128 columns, 4 or 8 warps, 2 to 4 stages, pruned to
what fits an H100's shared memory per block (:data:`SHARED_MEMORY_BYTES`) and
keeps a score block within :data:`MAX_ACCUMULATOR_REGISTERS` float32 registers
per thread.

Why not ``@triton.autotune`` on the kernels as they are: their grid
(``cdiv(R, BLOCK_M)``) is a tuple computed before the launch, the block shape
travels in the ``shape`` named tuple built before it, :func:`~.launch.launch`
records the switches it was given, and autotuning reruns a launch to time it,
which every output a launch accumulates into would have to survive
(``reset_to_zero``). A timed pass over :func:`candidates` on the first GPU,
writing the winners into the table :func:`choose` reads, gives the same
result and keeps launches recorded and deterministic. Nothing here imports
triton.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from itertools import product

import torch

from .support import DEFAULT_BLOCK, MIN_BLOCK, Blocks, interpreting

SHARED_MEMORY_BYTES = 227 * 1024
"""The most shared memory one program may use on an H100 (sm_90)."""
MAX_ACCUMULATOR_REGISTERS = 64
"""The most float32 registers per thread a score block (``BLOCK_M x BLOCK_N``) may take: the rest of a program's
255 hold its operands, row statistics and the backward's gradient slice (the fixed 64 x 64 block with 8 warps takes
16)."""
TRITON_DEFAULT_STAGES = 3
"""The stages Triton pipelines a loop over on CUDA when a launch does not say (``num_stages``)."""
ROWS = (64, 128)
GRADIENT_DEPTHS = (128, 64)
WARPS = (8, 4)
STAGES = (3, 2, 4)
PRODUCT_DEPTHS = {torch.float32: (16, 32), torch.bfloat16: (64, 32, 128), torch.float16: (64, 32, 128)}
"""Feature columns per step of a score block's product to try, by type (the launched one first)."""


@dataclass(frozen=True)
class KernelConfig:
    """One launch configuration: the block shape, warps per program and software-pipeline stages."""

    block_m: int
    """Score rows per block (and programs: ``cdiv(R, block_m)``)."""
    block_n: int
    """Score columns per block (the loop over candidates steps by it)."""
    block_k: int
    """Feature columns per step of a block's product."""
    block_d: int
    """Feature columns of the gradient one backward program accumulates."""
    warps: int
    stages: int | None
    """``num_stages`` of the launch; ``None``: Triton's default (what the interpreter runs)."""

    def shared_memory(self, dtype: torch.dtype) -> int:
        """Bytes of shared memory the product's operands take when pipelined over :attr:`stages` steps (an
        estimate: Triton stages one tile of each operand per step)."""
        element = torch.empty((), dtype=dtype).element_size()
        return (self.stages or TRITON_DEFAULT_STAGES) * (self.block_m + self.block_n) * self.block_k * element

    def accumulator_registers(self) -> int:
        """float32 registers per thread that hold one score block."""
        return self.block_m * self.block_n // (32 * self.warps)


def padded_dim(dim: int) -> int:
    """The feature dimension the kernels' blocks span: the next power of two, at least 16."""
    return max(MIN_BLOCK, 1 << max(0, math.ceil(math.log2(max(dim, 1)))))


def key(dim: int, dtype: torch.dtype) -> tuple[int, str]:
    """What the best configuration depends on: the padded dimension and the features' type."""
    return padded_dim(dim), str(dtype).removeprefix("torch.")


def fixed(dim: int, dtype: torch.dtype, block_size: int | None = None, interpreter: bool = True) -> KernelConfig:
    """The configuration :meth:`~.support.Blocks.choose` gives (the interpreter's, or the GPU's launched today)."""
    blocks = Blocks.choose(block_size, dim, dtype, interpreter=interpreter)
    stages = None if interpreter else TRITON_DEFAULT_STAGES
    return KernelConfig(blocks.rows, blocks.rows, blocks.depth, blocks.gradient_depth, blocks.warps, stages)


def candidates(dim: int, dtype: torch.dtype) -> list[KernelConfig]:
    """The CUDA configurations to time for ``dim``-dimensional features of type ``dtype``, the launched one
    first; each fits the shared memory and registers of :data:`SHARED_MEMORY_BYTES` and
    :data:`MAX_ACCUMULATOR_REGISTERS`, and its steps divide the padded dimension."""
    padded = padded_dim(dim)
    found = [fixed(dim, dtype, interpreter=False)]
    for rows, depth, gradient, warps, stages in product(ROWS, PRODUCT_DEPTHS[dtype], GRADIENT_DEPTHS, WARPS, STAGES):
        config = KernelConfig(rows, rows, min(depth, padded), min(gradient, padded), warps, stages)
        if (
            config not in found
            and config.shared_memory(dtype) <= SHARED_MEMORY_BYTES
            and config.accumulator_registers() <= MAX_ACCUMULATOR_REGISTERS
        ):
            found.append(config)
    return found


def choose(
    device: torch.device | str,
    dim: int,
    dtype: torch.dtype,
    block_size: int | None = None,
    interpreter: bool | None = None,
) -> KernelConfig:
    """The configuration launched for features on ``device``: the fixed one under Triton's interpreter or for
    CPU tensors; on CUDA the table's entry for :func:`key` (today the first of :func:`candidates`), its block
    side replaced by ``block_size`` where the objective sets one."""
    interpreted = interpreting() if interpreter is None else interpreter
    if interpreted or torch.device(device).type != "cuda":
        return fixed(dim, dtype, block_size, interpreter=True)
    config = candidates(dim, dtype)[0]
    if block_size is not None and block_size != DEFAULT_BLOCK:
        config = KernelConfig(block_size, block_size, config.block_k, config.block_d, config.warps, config.stages)
    return config


__all__ = ["KernelConfig", "candidates", "choose", "fixed", "key", "padded_dim"]
