r"""The shared exponentials' work on one tile as pure functions of tensors, for ``torch.compile``.

With ``compile=True`` (:class:`~.policy.Tiling`) the fast path (:mod:`.fast_path`) hands each tile's
elementwise work to these functions, compiled once per process with ``torch.compile``, which fuses the
exponential, the excluded entries, the scaling and the reductions into a few kernels: on a GPU each
operator is a kernel launch and a pass over the tile in memory. The eager path computes the same equations
in place in reused scratch buffers (what the CPU wants); ``torch.compile`` cannot trace those, hence the two
forms, which the tests hold equal (float64 to 1e-10, float32 to 1e-5).

* :func:`forward_group`: ``E = e^{f P}`` (``f`` the exponent's factor: a weight, times the anchors' scales
  where they are not folded), zero where excluded, and per term its sum over the candidates
  ``sum_j E_ij q_j`` (``q`` the term's candidate factors, or ones) and, for the mean score,
  ``sum_j E_ij P_ij``;
* :func:`backward_group`: ``E * (sum_k x_k y_k^T + r 1^T + 1 c^T)``, the shared terms' ``dP``, and ``E``
  itself where a column statistic reads it.

If compiling fails (no compiler, no Triton for the device), a warning says so once and the functions run
uncompiled.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Sequence

import torch
from torch import Tensor

BACKEND = "inductor"
"""The ``torch.compile`` backend (the tests use ``"aot_eager"``, which traces the same graphs without code
generation, to keep their cost down)."""

_compiled: dict[Callable, Callable] = {}
_failed: list[str] = []


TileExponent = tuple[Tensor, float | Tensor, Tensor | None, tuple[Tensor, Tensor] | None]
"""What a tile's exponentials are made of: the product ``P``, its factor, the flat positions excluded and the row and
column labels (``None``: none excluded, no labels)."""


def exponentials(exponent: TileExponent) -> Tensor:
    """``e^{factor P}``, zero at the flat positions ``excluded`` and where the row and column labels agree."""
    product, factor, excluded, labels = exponent
    exps = torch.exp(product * factor)
    if excluded is not None:
        exps = exps.view(-1).index_fill(0, excluded, 0.0).view(exps.shape)
    if labels is not None:
        exps = exps.masked_fill(labels[0] == labels[1], 0.0)
    return exps


def forward_group(
    exponent: TileExponent, terms: tuple[tuple[bool, bool], ...], candidate_factors: Sequence[Tensor | None]
) -> list[Tensor]:
    """Each term's tile sums: ``terms`` holds (transposed, with mean score) per term, ``candidate_factors``
    its ``q`` restricted to the tile's candidates (``None``: ones). Returns the sums, each followed by its
    mean score's where asked, in the order of the terms."""
    product = exponent[0]
    exps = exponentials(exponent)
    parts = []
    for (transposed, mean), weights in zip(terms, candidate_factors, strict=True):
        axis = 0 if transposed else 1  # over the candidates: a transposed view's run along the tile's rows
        weighted = exps if weights is None else exps * (weights[:, None] if transposed else weights[None, :])
        parts.append(weighted.sum(axis))
        if mean:
            parts.append((exps * product).sum(axis))
    return parts


def backward_group(
    exponent: TileExponent,
    row_sum: Tensor | None,
    col_sum: Tensor | None,
    outers: Sequence[tuple[Tensor, Tensor]],
    keep_exponentials: bool,
) -> tuple[Tensor, Tensor | None]:
    """``E * (sum of outer products + row_sum + col_sum)`` on a tile, and ``E`` if ``keep_exponentials``."""
    exps = exponentials(exponent)
    scale = None
    for x, y in outers:
        scale = torch.outer(x, y) if scale is None else scale + torch.outer(x, y)
    if row_sum is not None:
        scale = row_sum[:, None] if scale is None else scale + row_sum[:, None]
    if col_sum is not None:
        scale = col_sum[None, :] if scale is None else scale + col_sum[None, :]
    if scale is None:
        raise RuntimeError("an exponential of the backward pass with no differentiated term")
    return exps * scale, (exps if keep_exponentials else None)


def run(function: Callable, *args):
    """``function(*args)`` through ``torch.compile`` (compiled at the first call), or uncompiled if that fails."""
    if _failed:
        return function(*args)
    if function not in _compiled:
        _compiled[function] = torch.compile(function, backend=BACKEND, dynamic=None)
    try:
        return _compiled[function](*args)
    except Exception as error:  # a compiler or backend missing: the eager functions compute the same
        _failed.append(f"{type(error).__name__}: {error}")
        warnings.warn(
            f"torch.compile of the tiled engine's per-tile functions failed ({_failed[0][:300]}); "
            "they run uncompiled from now on",
            RuntimeWarning,
            stacklevel=2,
        )
        return function(*args)


def available(device: torch.device) -> bool:
    """Whether ``compile=None`` (auto) compiles for features on ``device``: CUDA with Triton, and no failure yet."""
    if _failed or device.type != "cuda":
        return False
    try:
        from torch.utils._triton import has_triton
    except ImportError:
        return False
    return bool(has_triton())
