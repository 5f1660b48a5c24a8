"""The rows of feature batches divided by their norms: ``F.normalize`` in one autograd node for several tensors."""

from __future__ import annotations

import torch
from torch import Tensor

from ..precision import statistics_dtype


def l2_normalize(*tensors: Tensor, eps: float = 1e-12) -> tuple[Tensor, ...]:
    """Each tensor's rows divided by ``max(|x|, eps)`` (``F.normalize``), computed in the statistics' type,
    returned in the tensor's.

    One autograd node for all the tensors: their clamp and division run as PyTorch's multi-tensor (foreach)
    operators, one dispatch for all. Its backward pass holds one (B, d) buffer beside the incoming gradient per
    tensor (``F.normalize``'s autograd holds three or four): with large batches and micro-batches the
    features' copies are what grows with B.
    """
    return _L2Normalize.apply(eps, *tensors)


class _L2Normalize(torch.autograd.Function):
    """``y = x / n``, ``n = max(|x|, eps)``; ``dx = (g - y <g, y>) / n`` where ``|x| > eps``, else ``g / eps``.

    Saves each ``x`` (which the caller holds anyway) and ``n``, and recomputes ``y`` in the backward pass,
    one tensor at a time.
    """

    @staticmethod
    def forward(ctx, eps: float, *tensors: Tensor) -> tuple[Tensor, ...]:
        wide = [x.to(statistics_dtype(x.dtype)) for x in tensors]
        norms = [torch.linalg.vector_norm(w, dim=-1, keepdim=True) for w in wide]
        torch._foreach_clamp_min_(norms, eps)
        normalized = torch._foreach_div(wide, norms)
        ctx.save_for_backward(*tensors, *norms)
        ctx.eps = eps
        return tuple(y.to(x.dtype) for x, y in zip(tensors, normalized, strict=True))

    @staticmethod
    def backward(ctx, *grads: Tensor):
        saved = ctx.saved_tensors
        half = len(saved) // 2
        d_tensors = []
        for x, norms, grad in zip(saved[:half], saved[half:], grads, strict=True):
            wide_grad = grad.to(norms.dtype)
            y = x.to(norms.dtype) / norms
            dots = (wide_grad * y).sum(dim=-1, keepdim=True)  # its (B, d) product is freed before dx is made
            dots = dots.masked_fill_(norms <= ctx.eps, 0.0)  # below eps the norm is the constant eps
            d_tensors.append(torch.addcmul(wide_grad, y, dots, value=-1.0).div_(norms).to(x.dtype))
        return None, *d_tensors
