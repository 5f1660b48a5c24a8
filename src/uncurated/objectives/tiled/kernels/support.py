"""What the Triton kernels accept, and the errors that say why not; nothing here imports triton.

The kernels take float32, bfloat16 and float16 features (anchors and
candidates of one type) of dimension up to :data:`MAX_DIM` and at most
:data:`MAX_ROWS` rows, on CUDA devices, or on the CPU under Triton's interpreter
(``TRITON_INTERPRET=1`` in the environment before triton is imported).
``tiling="triton"`` refuses anything else with an error that names the value
and the limit; ``tiling="auto"`` uses the kernels only for CUDA features they
accept, when triton imports (:func:`accepts`).
"""

from __future__ import annotations

import importlib.util
import math
import os
from dataclasses import dataclass
from functools import cache

import torch
from torch import Tensor

from ....validation import check_integer

MAX_DIM = 1024
"""The largest feature dimension the kernels take (their blocks span it, padded to a power of two)."""
FEATURE_DTYPES = (torch.float32, torch.bfloat16, torch.float16)
INSTALL_HINT = "pip install 'uncurated[triton]'"
INTERPRETER_HINT = "set TRITON_INTERPRET=1 in the environment before triton is imported"
MIN_BLOCK, MAX_BLOCK = 16, 256
DEFAULT_BLOCK = 64
"""Rows and columns of a score block on a GPU."""
MAX_ROWS = 2**31 - MAX_BLOCK
"""The most rows (anchors or candidates) the kernels take: they index rows and columns in int32, up to the end of
the last block (feature offsets, index times stride, are int64)."""
GPU_WARPS = 8
PRODUCT_DEPTH = {torch.float32: 16, torch.bfloat16: 64, torch.float16: 64}
"""Feature columns per step of a block's product on a GPU, by the features' type (float32 operands hold twice the
registers; chosen for IEEE products, on the CUDA cores, the PyTorch default)."""
GRADIENT_DEPTH = 128
"""The widest padded feature dimension whose gradient block one backward program holds on chip on a GPU; wider
features are taken in :data:`SLICE_DEPTH`-column slices, each added into float32 sums in global memory, from score
blocks formed once.

Chosen with the other GPU shapes by compiling every kernel variant for sm_90 (H100) (``benchmarks/triton_kernels.py
--compile``, ``results/triton_compile.json``). Not timed: no GPU was at hand."""
SLICE_DEPTH = 32
"""Feature columns per slice of a gradient wider than :data:`GRADIENT_DEPTH`. Compiled for sm_90 with a launch's
alignment hints (triton 3.6 and 3.9), CLIP's float32 backward at d = 1,024 spills 0 to 12 bytes per thread with
32-column slices, 348 to 364 with 64 (5.0 to 5.3 KiB in its transposed launch) and 488 to 516 with 128 (11.6 to
11.7 KiB); its bfloat16 backward spills with none of the three (165 to 246 registers), so float32 sets the width
(``benchmarks/triton_kernels.py --compile`` with this constant changed; the JSON records 32)."""


def input_precision() -> str:
    """How the kernels multiply float32 features: ``"tf32"`` (tensor cores, 10 bits of mantissa) where PyTorch's
    setting lets float32 matrix products use TF32, ``"ieee"`` otherwise. Read at each launch from
    ``torch.backends.cuda.matmul.fp32_precision``, PyTorch's current setting, which the older ones set as well
    (``allow_tf32 = True`` and ``torch.set_float32_matmul_precision("high")`` or ``"medium"`` make it ``"tf32"``)
    and which follows ``torch.backends.fp32_precision`` where it is ``"none"``; the older ones cannot be read back
    once the current one was set (PyTorch raises). bfloat16 and float16 features are always multiplied in their own
    type with float32 accumulation."""
    return "tf32" if torch.backends.cuda.matmul.fp32_precision == "tf32" else "ieee"


def installed() -> bool:
    """Whether the triton package can be imported (looked up, not imported)."""
    return importlib.util.find_spec("triton") is not None


def require_installed() -> None:
    if not installed():
        raise ImportError(f"tiling='triton' needs the triton package, which is not installed: {INSTALL_HINT}")


def interpreting() -> bool:
    """Whether Triton's interpreter runs the kernels (read when their module is first imported)."""
    return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


@cache
def importable() -> bool:
    """Whether triton imports (tried once per process)."""
    try:
        import triton  # noqa: F401
    except ImportError:
        return False
    return True


def accepts(features: Tensor) -> bool:
    """Whether ``tiling="auto"`` computes the statistics of ``features`` with the kernels: CUDA features of a type
    and dimension they take, with triton importable."""
    return (
        features.device.type == "cuda"
        and features.dtype in FEATURE_DTYPES
        and features.ndim == 2
        and features.shape[1] <= MAX_DIM
        and features.shape[0] <= MAX_ROWS
        and importable()
    )


def check_features(anchors: Tensor, candidates: Tensor) -> None:
    """Raise, naming the value and the limit, for features the kernels cannot take."""
    require_installed()
    for name, features in (("anchors", anchors), ("candidates", candidates)):
        if features.dtype not in FEATURE_DTYPES:
            accepted = ", ".join(_name(dtype) for dtype in FEATURE_DTYPES)
            raise ValueError(
                f"tiling='triton' takes {accepted} features, got {name} of type {_name(features.dtype)}; "
                "cast them, or use tiling='always'"
            )
        if features.shape[0] > MAX_ROWS:
            raise ValueError(
                f"tiling='triton' takes at most {MAX_ROWS} rows of features (2**31 less a block: the kernels index "
                f"rows in int32), got {name} of {features.shape[0]} rows; use tiling='always'"
            )
        if features.shape[1] > MAX_DIM:
            raise ValueError(
                f"tiling='triton' takes features of dimension at most {MAX_DIM}, got {features.shape[1]}; "
                "use tiling='always'"
            )
        if features.device.type == "cpu" and not interpreting():
            raise RuntimeError(
                "tiling='triton' got CPU tensors: the Triton kernels run on CUDA tensors, and on the CPU only under "
                f"Triton's interpreter ({INTERPRETER_HINT}); or use tiling='always' on the CPU"
            )
        if features.device.type not in ("cpu", "cuda"):
            raise RuntimeError(f"tiling='triton' runs on CUDA tensors, got {name} on {features.device}")
    if anchors.dtype != candidates.dtype:
        raise ValueError(
            f"tiling='triton' takes anchors and candidates of one type, got {_name(anchors.dtype)} and "
            f"{_name(candidates.dtype)}; cast one to the other"
        )


def _name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def check_block_size(block_size: int) -> int:
    """``block_size`` of the kernels: a power of two in [MIN_BLOCK, MAX_BLOCK]."""
    check_integer("block_size", block_size, 1)
    if not MIN_BLOCK <= block_size <= MAX_BLOCK or block_size & (block_size - 1):
        raise ValueError(
            f"block_size must be a power of two in [{MIN_BLOCK}, {MAX_BLOCK}] with tiling='triton', got {block_size}"
        )
    return block_size


@dataclass(frozen=True)
class Blocks:
    """The block shape of one batch's kernels and how they launch (warps, stages); the plan takes it from
    :func:`~.configs.choose`, whose untuned shapes :meth:`choose` gives."""

    rows: int
    """Score rows (and columns) per block."""
    depth: int
    """Feature columns per step of a score block's product."""
    dim: int
    """The padded feature dimension (a power of two, at least 16)."""
    gradient_depth: int
    """Feature columns of the gradient the backward kernel accumulates on chip at a time: all of ``dim`` where it
    fits, otherwise a slice."""
    warps: int
    stages: int | None = None
    """``num_stages`` of the launches; ``None``: Triton's default (what the interpreter runs, which ignores it)."""

    @classmethod
    def choose(cls, block_size: int | None, dim: int, dtype: torch.dtype, interpreter: bool | None = None) -> Blocks:
        """``block_size`` (None: :data:`DEFAULT_BLOCK`) for ``dim``-dimensional features of type ``dtype``.

        Under the interpreter every block operation is a Python-level call, so the products span the whole padded
        dimension in one step; on a GPU they step through :data:`PRODUCT_DEPTH` columns, and the backward's
        gradient is held whole up to :data:`GRADIENT_DEPTH` columns, in :data:`SLICE_DEPTH`-column slices beyond.
        """
        side = DEFAULT_BLOCK if block_size is None else block_size
        padded = max(MIN_BLOCK, 1 << max(0, math.ceil(math.log2(max(dim, 1)))))
        if interpreting() if interpreter is None else interpreter:
            return cls(side, padded, padded, padded, GPU_WARPS)
        return cls(
            side,
            min(padded, PRODUCT_DEPTH[dtype]),
            padded,
            padded if padded <= GRADIENT_DEPTH else SLICE_DEPTH,
            GPU_WARPS,
        )
