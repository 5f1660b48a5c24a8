"""When to tile the score matrix, and how large its tiles are, per kind of device.

Every objective takes the engine's settings (:class:`~uncurated.engine_settings.EngineSettings`, where they are
declared and checked); :class:`Tiling` holds the five that shape the score matrix's work (``tiling``,
``block_size``, ``memory_budget``, ``tile_policy``, ``compile``) and says what they mean for a batch on a device:
whether it is tiled or run by the Triton kernels, how large its tiles are, whether they are compiled.

The two policies differ in what a tile costs. On the CPU an operator over a
tile costs about what its arithmetic costs, and larger tiles buy nothing but
memory: the budget is :data:`DEFAULT_MEMORY_BUDGET` (1 GiB) and the side at
most :data:`MAX_AUTO_BLOCK`. On a GPU every operator is a kernel launch of a
few microseconds whatever its size, so a step's launches grow with the number
of tiles: the budget is :data:`CUDA_FREE_FRACTION` of the device's free memory
at the call (what ``torch.cuda.mem_get_info`` reports, plus what PyTorch's
allocator holds unused), the side is as large as that budget allows, and the
positives' products run in one chunk. ``tile_policy="cuda"`` with features
that are not on a CUDA device (counting a GPU step's operators on the CPU)
takes :data:`ASSUMED_CUDA_BUDGET`.

The estimates count buffers the size of the matrix (or of a tile), not the
features the caller already holds: ``DENSE_BUFFERS`` R x C buffers for the
dense path (scores, masked scores, mask, softmax and their gradients across
two directions; about 8.7 for CLIP in float32 by ``benchmarks/tiled_speed.py``), and
``TILE_BUFFERS`` tile-sized buffers plus the tile's ``(rows + cols) x d``
products for the tiled path.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor

from ...engine_settings import MIN_MEMORY_BUDGET, EngineSettings
from ...precision import statistics_dtype
from . import compiled_tiles
from .kernels import support as kernel_support

DEFAULT_MEMORY_BUDGET = 2**30
CUDA_FREE_FRACTION = 0.5
"""The share of a CUDA device's free memory the score-matrix work may take under the CUDA policy: the other half
is left to what the step allocates after the loss (the encoders' backward pass, the optimizer's first moments)."""
ASSUMED_CUDA_BUDGET = 16 * 2**30
"""The CUDA policy's budget where no CUDA device can be asked: half of 32 GiB, what an 80 GB H100 has left
beside a model, its optimizer state and a large batch's activations (an assumption, not a measurement)."""
DENSE_BUFFERS = 8
TILE_BUFFERS = 6
MAX_AUTO_BLOCK = 1024
"""The CPU policy's cap. Larger tiles buy no speed on the CPU (the tile matmuls are already efficient) and cost
memory: at 2048 a float32 CLIP step's tiles took 25 MiB more than at 1024 (B = 16,384,
``benchmarks/micro_batch_memory.py``), as much as the features' gradients, which is what bounds
``micro_batch_size`` runs."""


@dataclass(frozen=True)
class Tiling:
    """The tiling settings of an objective (checked as :class:`~uncurated.engine_settings.EngineSettings`, and
    ``"triton"`` for the package and its block sizes); see the module docstring."""

    mode: str = "auto"
    block_size: int | None = None
    memory_budget: int | None = None
    policy: str = "auto"
    compile: bool | None = None

    def __post_init__(self) -> None:
        EngineSettings(self.mode, self.block_size, self.memory_budget, self.policy, self.compile)
        if self.mode == "triton":
            kernel_support.require_installed()
            if self.block_size is not None:
                kernel_support.check_block_size(self.block_size)

    @classmethod
    def of(cls, settings: EngineSettings) -> Tiling:
        """The tiling of an objective's engine settings."""
        return cls(settings.tiling, settings.block_size, settings.memory_budget, settings.tile_policy, settings.compile)

    def device_policy(self, device: torch.device | str | None = None) -> str:
        """``"cpu"`` or ``"cuda"``: the policy for features on ``device`` (``None``: not known, the CPU's)."""
        if self.policy != "auto":
            return self.policy
        return "cuda" if device is not None and torch.device(device).type == "cuda" else "cpu"

    def compiles(self, device: torch.device | str | None = None) -> bool:
        """Whether the tiles' elementwise work runs compiled for features on ``device`` (see the module docstring)."""
        if self.compile is not None:
            return self.compile
        return device is not None and compiled_tiles.available(torch.device(device))

    def budget(self, device: torch.device | str | None = None) -> int:
        """Bytes the score-matrix work may take for features on ``device`` (see the module docstring)."""
        if self.memory_budget is not None:
            return int(self.memory_budget)
        if self.device_policy(device) == "cpu":
            return DEFAULT_MEMORY_BUDGET
        if device is None or torch.device(device).type != "cuda":
            return ASSUMED_CUDA_BUDGET
        return max(MIN_MEMORY_BUDGET, int(CUDA_FREE_FRACTION * cuda_free_bytes(torch.device(device))))

    def dense_bytes(self, rows: int, cols: int, dtype: torch.dtype) -> int:
        """The estimated working memory of the dense path for an R x C matrix of features of type ``dtype``
        (its scores are held in the statistics' type, :func:`~uncurated.precision.statistics_dtype`)."""
        return DENSE_BUFFERS * rows * cols * _element_size(statistics_dtype(dtype))

    def use_tiles(self, rows: int, cols: int, dtype: torch.dtype, device: torch.device | str | None = None) -> bool:
        """Whether an R x C matrix of ``dtype`` on ``device`` is computed in tiles."""
        if self.mode != "auto":
            return self.mode in ("always", "triton")
        return self.dense_bytes(rows, cols, dtype) > self.budget(device)

    def use_kernels(self, features: Tensor) -> bool:
        """Whether the Triton kernels compute the statistics of ``features``: always with ``"triton"`` (which
        refuses features they cannot take), with ``"auto"`` for CUDA features they take when triton imports."""
        if self.mode != "auto":
            return self.mode == "triton"
        return kernel_support.accepts(features)

    def block_shape(
        self, rows: int, cols: int, dim: int, dtype: torch.dtype, device: torch.device | str | None = None
    ) -> tuple[int, int]:
        """Rows and columns per tile.

        The side ``b`` is ``block_size`` if given, else the largest with
        ``tile_bytes(b, b, dim) <= budget`` (at most ``MAX_AUTO_BLOCK`` under
        the CPU policy). Each axis is then split into ``ceil(n / b)``
        near-equal tiles, so no tile is much smaller than the others.
        """
        side = self.block_size if self.block_size is not None else self.auto_block(dim, dtype, device)
        return _balanced(rows, side), _balanced(cols, side)

    def auto_block(self, dim: int, dtype: torch.dtype, device: torch.device | str | None = None) -> int:
        """The largest square tile side whose working memory fits the budget (capped at ``MAX_AUTO_BLOCK``
        under the CPU policy).

        Solves ``size (k b^2 + 4 d b) <= budget`` for ``b``, ``k = TILE_BUFFERS``.
        """
        size, k = _element_size(dtype), TILE_BUFFERS
        units = self.budget(device) / size
        side = int((-4 * dim + math.sqrt(16 * dim * dim + 4 * k * units)) / (2 * k))
        cap = MAX_AUTO_BLOCK if self.device_policy(device) == "cpu" else side
        return max(1, min(side, cap))

    def chunk_positives(self, device: torch.device | str | None = None) -> bool:
        """Whether the positives' products run in row chunks (:mod:`.positives`): under the CPU policy; under the
        CUDA policy each chunk costs launches and one chunk's (R, d) temporaries are small beside the device."""
        return self.device_policy(device) == "cpu"


def cuda_free_bytes(device: torch.device) -> int:
    """The memory a CUDA device can still give: free on the device plus what PyTorch's allocator holds unused."""
    free, _ = torch.cuda.mem_get_info(device)
    return int(free + torch.cuda.memory_reserved(device) - torch.cuda.memory_allocated(device))


def tile_bytes(rows: int, cols: int, dim: int, dtype: torch.dtype) -> int:
    """The estimated working memory of one tile: ``TILE_BUFFERS`` tile buffers and its two ``x d`` products."""
    return _element_size(dtype) * (TILE_BUFFERS * rows * cols + 2 * (rows + cols) * dim)


def _balanced(length: int, side: int) -> int:
    count = max(1, math.ceil(length / side))
    return math.ceil(length / count)


def _element_size(dtype: torch.dtype) -> int:
    return torch.empty((), dtype=dtype).element_size()
