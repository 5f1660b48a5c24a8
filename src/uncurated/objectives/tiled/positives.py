"""The positives' inner products ``<a_i, b_{p(i)}>``, with no (R, d) buffer beyond the gradients.

``(A * B[p]).sum(1)`` under plain autograd gathers ``B[p]`` and saves it,
forms the (R, d) product, and in the backward pass forms two more products
and a scattered copy: five (R, d) buffers, the largest share of the engine's
memory that grows with the batch once the tiles are bounded. Here the
forward pass runs over row chunks (nothing of size R x d is kept but the
inputs), and the backward pass writes the two gradients chunk by chunk, into
one buffer when ``A`` and ``B`` are the same tensor (SimCLR's two views).

Products run in the features' type, sums and gradients in the statistics'
(:mod:`uncurated.precision`); the gradients are returned in the features'.
"""

from __future__ import annotations

import torch
from torch import Tensor

CHUNK_ROWS = 4096
"""Rows per chunk: a chunk's (rows, d) temporaries stay small beside the (R, d) features."""


def positive_products(
    anchors: Tensor, candidates: Tensor, columns: Tensor, dtype: torch.dtype, chunked: bool = True
) -> Tensor:
    """(R,) ``<anchors[i], candidates[columns[i]]>`` summed in ``dtype``, differentiable in both features.

    ``chunked=False`` runs one chunk of all rows (fewer operators, larger temporaries: the CUDA tile policy).
    """
    return _PositiveProducts.apply(anchors, candidates, columns, dtype, chunked)


class _PositiveProducts(torch.autograd.Function):
    @staticmethod
    def forward(ctx, anchors: Tensor, candidates: Tensor, columns: Tensor, dtype: torch.dtype, chunked: bool):
        out = torch.empty(anchors.shape[0], dtype=dtype, device=anchors.device)
        ctx.chunks = _chunks(anchors.shape[0], CHUNK_ROWS if chunked else anchors.shape[0])
        for rows in ctx.chunks:
            torch.sum(anchors[rows] * candidates[columns[rows]], dim=1, dtype=dtype, out=out[rows])
        ctx.save_for_backward(anchors, candidates, columns)
        ctx.same = anchors is candidates
        return out

    @staticmethod
    def backward(ctx, grad: Tensor):
        anchors, candidates, columns = ctx.saved_tensors
        need_anchors, need_candidates = ctx.needs_input_grad[:2]
        if ctx.same:  # one tensor in both roles: one buffer, both gradients
            need_anchors = need_candidates = need_anchors or need_candidates
        d_anchors = torch.zeros_like(anchors) if need_anchors else None
        d_candidates = (d_anchors if ctx.same else torch.zeros_like(candidates)) if need_candidates else None
        for rows in ctx.chunks:
            weights = grad[rows, None]
            if d_anchors is not None:
                d_anchors[rows].add_((candidates[columns[rows]] * weights).to(anchors.dtype))
            if d_candidates is not None:
                d_candidates.index_add_(0, columns[rows], (anchors[rows] * weights).to(candidates.dtype))
        if ctx.same:
            return d_anchors, None, None, None, None
        return d_anchors, d_candidates, None, None, None


def _chunks(length: int, rows: int) -> list[slice]:
    return [slice(start, min(start + rows, length)) for start in range(0, length, max(rows, 1))]
