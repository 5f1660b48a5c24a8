"""When to tile the score matrix, and how large its tiles are.

Every objective takes three options (``ContrastiveObjective`` and
``StatefulObjective`` pass them on to the engine):

* ``tiling``: ``"auto"`` (the default) computes the statistics with the
  Triton kernels for CUDA features they take when triton imports
  (:mod:`.kernels`), and otherwise the dense R x C matrix when its estimated
  working memory fits in ``memory_budget``, tiles when it does not;
  ``"always"``, ``"never"`` and ``"triton"`` force one path.
* ``block_size``: the side of the square tiles (rows and columns per tile),
  an integer >= 1; ``None`` chooses it from the batch, the feature dimension
  and the budget (:meth:`Tiling.block_shape`). With ``"triton"``, the
  kernels' block side, a power of two in [16, 256] (``None``: 64).
* ``memory_budget``: bytes the score-matrix work may take, an integer >= 1 MiB;
  ``None`` is :data:`DEFAULT_MEMORY_BUDGET` (1 GiB). The kernels hold no tile
  in memory and do not read it.

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

from ...precision import statistics_dtype
from ...validation import check_choice, check_integer
from .kernels import support as kernel_support

TILING_MODES = ("auto", "always", "never", "triton")
DEFAULT_MEMORY_BUDGET = 2**30
MIN_MEMORY_BUDGET = 2**20
DENSE_BUFFERS = 8
TILE_BUFFERS = 6
MAX_AUTO_BLOCK = 1024
"""Larger tiles buy no speed (the tile matmuls are already efficient) and cost memory: at 2048 a float32
CLIP step's tiles took 25 MiB more than at 1024 (B = 16,384, ``benchmarks/micro_batch_memory.py``), as much
as the features' gradients, which is what bounds ``micro_batch_size`` runs."""


@dataclass(frozen=True)
class Tiling:
    """The tiling options of an objective; see the module docstring."""

    mode: str = "auto"
    block_size: int | None = None
    memory_budget: int | None = None

    def __post_init__(self) -> None:
        check_choice("tiling", self.mode, TILING_MODES)
        if self.block_size is not None:
            check_integer("block_size", self.block_size, 1)
        if self.mode == "triton":
            kernel_support.require_installed()
            if self.block_size is not None:
                kernel_support.check_block_size(self.block_size)
        if self.memory_budget is not None:
            check_integer("memory_budget", self.memory_budget, MIN_MEMORY_BUDGET)

    @property
    def budget(self) -> int:
        return DEFAULT_MEMORY_BUDGET if self.memory_budget is None else int(self.memory_budget)

    def dense_bytes(self, rows: int, cols: int, dtype: torch.dtype) -> int:
        """The estimated working memory of the dense path for an R x C matrix of features of type ``dtype``
        (its scores are held in the statistics' type, :func:`~uncurated.precision.statistics_dtype`)."""
        return DENSE_BUFFERS * rows * cols * _element_size(statistics_dtype(dtype))

    def use_tiles(self, rows: int, cols: int, dtype: torch.dtype) -> bool:
        """Whether an R x C matrix of ``dtype`` is computed in tiles."""
        if self.mode != "auto":
            return self.mode in ("always", "triton")
        return self.dense_bytes(rows, cols, dtype) > self.budget

    def use_kernels(self, features: Tensor) -> bool:
        """Whether the Triton kernels compute the statistics of ``features``: always with ``"triton"`` (which
        refuses features they cannot take), with ``"auto"`` for CUDA features they take when triton imports."""
        if self.mode != "auto":
            return self.mode == "triton"
        return kernel_support.accepts(features)

    def block_shape(self, rows: int, cols: int, dim: int, dtype: torch.dtype) -> tuple[int, int]:
        """Rows and columns per tile.

        The side ``b`` is ``block_size`` if given, else the largest with
        ``tile_bytes(b, b, dim) <= memory_budget``, at most ``MAX_AUTO_BLOCK``.
        Each axis is then split into ``ceil(n / b)`` near-equal tiles, so no
        tile is much smaller than the others.
        """
        side = self.block_size if self.block_size is not None else self.auto_block(dim, dtype)
        return _balanced(rows, side), _balanced(cols, side)

    def auto_block(self, dim: int, dtype: torch.dtype) -> int:
        """The largest square tile side whose working memory fits the budget (capped at ``MAX_AUTO_BLOCK``).

        Solves ``size (k b^2 + 4 d b) <= budget`` for ``b``, ``k = TILE_BUFFERS``.
        """
        size, k = _element_size(dtype), TILE_BUFFERS
        units = self.budget / size
        side = int((-4 * dim + math.sqrt(16 * dim * dim + 4 * k * units)) / (2 * k))
        return max(1, min(side, MAX_AUTO_BLOCK))


def tile_bytes(rows: int, cols: int, dim: int, dtype: torch.dtype) -> int:
    """The estimated working memory of one tile: ``TILE_BUFFERS`` tile buffers and its two ``x d`` products."""
    return _element_size(dtype) * (TILE_BUFFERS * rows * cols + 2 * (rows + cols) * dim)


def _balanced(length: int, side: int) -> int:
    count = max(1, math.ceil(length / side))
    return math.ceil(length / count)


def _element_size(dtype: torch.dtype) -> int:
    return torch.empty((), dtype=dtype).element_size()
