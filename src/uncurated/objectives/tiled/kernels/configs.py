"""Launch configurations of the kernels per device, feature dimension and type: block shapes, warps, stages.

Every :class:`~.plan.KernelPlan` launches what :func:`choose` returns, as a
:class:`~.support.Blocks` (:meth:`KernelConfig.blocks`); :func:`~.launch.launch`
passes its warps and, where it names them, its stages.

Under Triton's interpreter (and for CPU tensors) there is one fixed
configuration, the one the tests run: :meth:`~.support.Blocks.choose` with the
interpreter's shapes, whose products span the whole padded dimension in one
step (every block operation is a Python-level call there, so fewer, larger
steps are faster), and Triton's default stages (``None``: the interpreter
ignores them).

On CUDA, :func:`candidates` lists the configurations worth timing for a
``(d, dtype)`` key (:func:`key`: the padded dimension and the type, what
changes the best shape; for float32 features, whether TF32 multiplies
them), and :func:`choose` returns the entry of :data:`TUNED` for the
device's architecture and key where one was filled from a timing, else
the first candidate: the shapes the kernels launched before any timing
(:data:`~.support.DEFAULT_BLOCK` rows, the type's
:data:`~.support.PRODUCT_DEPTH`, :data:`~.support.GRADIENT_DEPTH`,
:data:`~.support.GPU_WARPS`; picked by compiling for sm_90 without spilling,
``benchmarks/triton_kernels.py --compile``) with Triton's default of 3
stages, passed explicitly. The list is a heuristic table (not
``triton.autotune``'s own search): square score blocks of 64 or 128 rows
and columns, product steps of 16 to 64 float32 columns or 32 to 128
half-precision ones, gradient slices of 32, 64 or 128 columns, 4 or 8 warps, 2
to 4 stages, pruned to what fits an H100's shared memory per block
(:data:`SHARED_MEMORY_BYTES`) and keeps a score block within
:data:`MAX_ACCUMULATOR_REGISTERS` float32 registers per thread. Blocks are
square because a launch whose rows are ``G``'s columns forms each block in
``G``'s orientation and transposes it, which needs ``BLOCK_M == BLOCK_N``
(:func:`~.tile.score_block`); :class:`KernelConfig` refuses others.

Why not ``@triton.autotune`` on the kernels as they are: their grid
(``cdiv(R, BLOCK_M)``) is a tuple computed before the launch, the block shape
travels in the ``shape`` named tuple built before it, :func:`~.launch.launch`
records the switches it was given, and autotuning reruns a launch to time it,
which every output a launch accumulates into would have to survive
(``reset_to_zero``). A timed pass over :func:`candidates` on the first GPU
(``kernel_configs`` of ``benchmarks/gpu_check.py``, which launches each under
:func:`launching`), writing the winners into :data:`TUNED`, gives the same
result and keeps launches recorded and deterministic. Nothing here imports
triton.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import cache
from itertools import product

import torch

from .support import MIN_BLOCK, Blocks, input_precision, interpreting

SHARED_MEMORY_BYTES = 227 * 1024
"""The most shared memory one program may use on an H100 (sm_90)."""
MAX_ACCUMULATOR_REGISTERS = 64
"""The most float32 registers per thread a score block (``BLOCK_M x BLOCK_N``) may take: the rest of a program's
255 hold its operands, row statistics and the backward's gradient slice (the fixed 64 x 64 block with 8 warps takes
16)."""
TRITON_DEFAULT_STAGES = 3
"""The stages Triton pipelines a loop over on CUDA when a launch does not say (``num_stages``)."""
ROWS = (64, 128)
GRADIENT_DEPTHS = (128, 64, 32)
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
    """Feature columns of the gradient the backward kernel accumulates on chip at a time (``BLOCK_D``)."""
    warps: int
    stages: int | None
    """``num_stages`` of the launch; ``None``: Triton's default (what the interpreter runs)."""

    def __post_init__(self) -> None:
        if self.block_m != self.block_n:
            raise ValueError(
                f"the kernels form square score blocks (block_m == block_n: a transposed launch forms each block in "
                f"G's orientation), got block_m={self.block_m}, block_n={self.block_n}"
            )

    def shared_memory(self, dtype: torch.dtype) -> int:
        """Bytes of shared memory the product's operands take when pipelined over :attr:`stages` steps (an
        estimate: Triton stages one tile of each operand per step)."""
        stages = self.stages or TRITON_DEFAULT_STAGES
        return stages * (self.block_m + self.block_n) * self.block_k * dtype.itemsize

    def accumulator_registers(self) -> int:
        """float32 registers per thread that hold one score block."""
        return self.block_m * self.block_n // (32 * self.warps)

    def blocks(self, dim: int) -> Blocks:
        """The kernels' block shape for ``dim``-dimensional features in this configuration (product steps and
        gradient slices no wider than the padded dimension)."""
        padded = padded_dim(dim)
        depth, gradient_depth = min(self.block_k, padded), min(self.block_d, padded)
        return Blocks(self.block_m, depth, padded, gradient_depth, self.warps, self.stages)


def padded_dim(dim: int) -> int:
    """The feature dimension the kernels' blocks span: the next power of two, at least 16."""
    return max(MIN_BLOCK, 1 << max(0, math.ceil(math.log2(max(dim, 1)))))


def key(dim: int, dtype: torch.dtype) -> tuple[int, str]:
    """What the best configuration depends on: the padded dimension and how the products multiply, the features'
    type, or for float32 ones the precision PyTorch's setting gives them now (:func:`~.support.input_precision`):
    ``"float32"`` (IEEE, on the CUDA cores) or ``"tf32"`` (tensor cores)."""
    if dtype == torch.float32 and input_precision() == "tf32":
        return padded_dim(dim), "tf32"
    return padded_dim(dim), str(dtype).removeprefix("torch.")


def fixed(dim: int, dtype: torch.dtype, block_size: int | None = None, interpreter: bool = True) -> KernelConfig:
    """The configuration :meth:`~.support.Blocks.choose` gives: the interpreter's, or the GPU's untuned shapes with
    Triton's default stages."""
    blocks = Blocks.choose(block_size, dim, dtype, interpreter=interpreter)
    stages = None if interpreter else TRITON_DEFAULT_STAGES
    return KernelConfig(blocks.rows, blocks.rows, blocks.depth, blocks.gradient_depth, blocks.warps, stages)


TUNED: dict[tuple[str, int, str], KernelConfig] = {}
"""The configuration :func:`choose` launches on CUDA per ``(architecture, *key(d, dtype))``, e.g.
``("sm_90", 512, "bfloat16")`` or ``("sm_90", 512, "tf32")`` (float32 features under TF32), where a timing found
one faster than the first candidate: copy the ``table_entry`` that ``kernel_configs`` of ``make gpu-check`` writes
for each type (``benchmarks/results/gpu_check.json``). Empty: no GPU has timed the candidates yet."""

_forced: list[KernelConfig] = []


@contextmanager
def launching(config: KernelConfig) -> Iterator[KernelConfig]:
    """Inside the block every plan launches ``config``, whatever the device, type, dimension and ``block_size``
    (to time a candidate, or to run one under the interpreter); the table and the fixed configuration outside."""
    _forced.append(config)
    try:
        yield config
    finally:
        _forced.remove(config)


def candidates(dim: int, dtype: torch.dtype) -> list[KernelConfig]:
    """The CUDA configurations to time for ``dim``-dimensional features of type ``dtype``, the launched one
    first; each fits the shared memory and registers of :data:`SHARED_MEMORY_BYTES` and
    :data:`MAX_ACCUMULATOR_REGISTERS`, and its steps divide the padded dimension."""
    return list(_candidates(padded_dim(dim), dtype))


@cache
def _candidates(padded: int, dtype: torch.dtype) -> tuple[KernelConfig, ...]:
    found = [fixed(padded, dtype, interpreter=False)]
    for rows, depth, gradient, warps, stages in product(ROWS, PRODUCT_DEPTHS[dtype], GRADIENT_DEPTHS, WARPS, STAGES):
        config = KernelConfig(rows, rows, min(depth, padded), min(gradient, padded), warps, stages)
        if (
            config not in found
            and config.shared_memory(dtype) <= SHARED_MEMORY_BYTES
            and config.accumulator_registers() <= MAX_ACCUMULATOR_REGISTERS
        ):
            found.append(config)
    return tuple(found)


def architecture(device: torch.device | str) -> str:
    """``sm_XY`` of a CUDA device (what :data:`TUNED` is keyed on besides :func:`key`)."""
    major, minor = torch.cuda.get_device_capability(torch.device(device))
    return f"sm_{major}{minor}"


def choose(
    device: torch.device | str,
    dim: int,
    dtype: torch.dtype,
    block_size: int | None = None,
    interpreter: bool | None = None,
) -> KernelConfig:
    """The configuration launched for features on ``device``: the one :func:`launching` forces, if any; else the
    fixed one under Triton's interpreter or for CPU tensors; on CUDA the entry of :data:`TUNED` for the device's
    architecture and :func:`key`, else the first of :func:`candidates`. A ``block_size`` the objective sets other
    than that configuration's side gives the untuned shapes at that side (:func:`fixed`): a tuned entry's steps
    and stages were timed with its own blocks."""
    if _forced:
        return _forced[-1]
    interpreted = interpreting() if interpreter is None else interpreter
    if interpreted or torch.device(device).type != "cuda":
        return fixed(dim, dtype, block_size, interpreter=True)
    config = TUNED.get((architecture(device), *key(dim, dtype))) if TUNED else None
    config = config or _candidates(padded_dim(dim), dtype)[0]
    if block_size is not None and block_size != config.block_m:
        return fixed(dim, dtype, block_size, interpreter=False)
    return config


__all__ = [
    "TUNED",
    "KernelConfig",
    "architecture",
    "candidates",
    "choose",
    "fixed",
    "key",
    "launching",
    "padded_dim",
]
