"""CyCLIP: CLIP with cyclic consistency between and within modalities."""

from __future__ import annotations

import torch
from torch import Tensor

from ..precision import statistics_dtype
from ..process.shard import Shard
from ..validation import check_range
from .infonce import InfoNCE


def inmodal_consistency(a: Tensor, b: Tensor) -> Tensor:
    r"""CyCLIP's in-modal term, :math:`\frac1B\sum_{j,k}(\langle a_j,a_k\rangle - \langle b_j,b_k\rangle)^2`.

    Evaluated through d x d Gram matrices, ``(|A^T A|^2 + |B^T B|^2 - 2|A^T B|^2) / B``,
    so it costs O(B d^2) time and O(d^2) memory, never a B x B matrix.
    """
    return consistency_terms(a, b)[0]


def crossmodal_consistency(a: Tensor, b: Tensor) -> Tensor:
    r"""CyCLIP's cross-modal term, :math:`\frac1B\sum_{j,k}(\langle a_j,b_k\rangle - \langle a_k,b_j\rangle)^2`.

    Evaluated as ``2 (<A^T A, B^T B> - <C, C^T>) / B`` with ``C = A^T B``: O(d^2) memory.
    """
    return consistency_terms(a, b)[1]


def consistency_terms(a: Tensor, b: Tensor, shard: Shard | None = None) -> tuple[Tensor, Tensor]:
    """The in-modal and cross-modal terms from one set of Gram matrices.

    With a ``shard`` (``a``, ``b`` this process's pairs) the Grams are summed
    over the processes by one all-reduce of 3 d^2 numbers (and one of their
    gradients in the backward pass): the terms of the global batch, the same
    on every process.
    """
    grams, batch = gram_matrices(a, b, shard)
    aa, bb, cross = grams
    inmodal = (aa.square().sum() + bb.square().sum() - 2.0 * cross.square().sum()) / batch
    crossmodal = 2.0 * ((aa * bb).sum() - (cross * cross.T).sum()) / batch
    return inmodal, crossmodal


def gram_matrices(a: Tensor, b: Tensor, shard: Shard | None = None) -> tuple[Tensor, int]:
    """``(stack([A^T A, B^T B, A^T B]), B)``: the products in the features' type, the result (whose differences
    cancel) in the statistics' type; with a ``shard``, summed over the processes, and the global batch size."""
    a_t = a.T
    grams = torch.stack([a_t @ a, b.T @ b, a_t @ b]).to(statistics_dtype(a.dtype))
    if shard is None:
        return grams, a.shape[0]
    return shard.all_reduce(grams, kind="Gram matrices"), shard.global_size


def consistency_regularizer(a: Tensor, b: Tensor, lam1: float, lam2: float, shard: Shard | None = None) -> Tensor:
    r"""``lam1 * inmodal + lam2 * crossmodal`` as one autograd node, its gradient in closed form.

    With :math:`G_{aa} = A^\top A`, :math:`G_{bb} = B^\top B` and :math:`C = A^\top B` (d x d):

    .. math::

        R = \tfrac1B\big[\lambda_1(|G_{aa}|^2 + |G_{bb}|^2 - 2|C|^2)
            + 2\lambda_2(\langle G_{aa}, G_{bb}\rangle - \langle C, C^\top\rangle)\big],

        \partial_{G_{aa}} R = \tfrac2B(\lambda_1 G_{aa} + \lambda_2 G_{bb}),\quad
        \partial_{G_{bb}} R = \tfrac2B(\lambda_1 G_{bb} + \lambda_2 G_{aa}),\quad
        \partial_C R = -\tfrac4B(\lambda_1 C + \lambda_2 C^\top),

        \partial_A R = 2A\,\partial_{G_{aa}}R + B\,(\partial_C R)^\top,\qquad
        \partial_B R = 2B\,\partial_{G_{bb}}R + A\,\partial_C R .

    The same value as :func:`consistency_terms` in a few operators where autograd would dispatch about a
    hundred (the Grams' products, transposes and squares and their backward formulas). With a ``shard`` the
    Grams are summed over the processes, and so are their gradients, as :func:`consistency_terms` does.
    """
    return _ConsistencyRegularizer.apply(a, b, float(lam1), float(lam2), shard)


class _ConsistencyRegularizer(torch.autograd.Function):
    """:func:`consistency_regularizer`: the Grams forward, their closed-form gradients backward."""

    @staticmethod
    def forward(ctx, a: Tensor, b: Tensor, lam1: float, lam2: float, shard: Shard | None) -> Tensor:
        grams, batch = gram_matrices(a, b, shard)  # no gradient is tracked inside the node
        aa, bb, cross = grams
        swapped = torch.stack([bb, aa, cross.T])
        signs = torch.tensor([[[1.0]], [[1.0]], [[-2.0]]], dtype=grams.dtype, device=grams.device)
        weighted = torch.add(grams * lam1, swapped, alpha=lam2).mul_(signs)  # dR/d(G_aa, G_bb, C) times B / 2
        ctx.save_for_backward(a, b, weighted)
        ctx.batch, ctx.shard = batch, shard
        # R = <G_aa, lam1 G_aa + lam2 G_bb> + <G_bb, lam1 G_bb + lam2 G_aa> - 2 <C, lam1 C + lam2 C^T>, over B
        return (grams * weighted).sum() / batch

    @staticmethod
    def backward(ctx, grad: Tensor):
        a, b, weighted = ctx.saved_tensors
        d_grams = weighted * (grad * (2.0 / ctx.batch))  # dR/dG_aa, dR/dG_bb, dR/dC
        if ctx.shard is not None:
            d_grams = ctx.shard.all_reduce(d_grams, kind="Gram matrices: gradients")
        d_aa, d_bb, d_cross = d_grams.to(a.dtype)
        d_a = torch.addmm(b @ d_cross.T, a, d_aa, alpha=2.0) if ctx.needs_input_grad[0] else None
        d_b = torch.addmm(a @ d_cross, b, d_bb, alpha=2.0) if ctx.needs_input_grad[1] else None
        return d_a, d_b, None, None, None


class CyCLIP(InfoNCE):
    r"""CyCLIP (Goel et al. 2022): CLIP plus cyclic-consistency regularizers.

    .. math::

        \mathcal L = \mathcal L_{\rm CLIP}
          + \lambda_1 \frac1B\sum_{j,k}\big(\langle a_j,a_k\rangle - \langle b_j,b_k\rangle\big)^2
          + \lambda_2 \frac1B\sum_{j,k}\big(\langle a_j,b_k\rangle - \langle a_k,b_j\rangle\big)^2

    The in-modal term (``lam1``) asks the two modalities to agree on how
    similar two samples are; the cross-modal term (``lam2``) asks the
    image-text similarity matrix to be symmetric. Both use the raw cosines
    (not divided by the temperature) and are computed from d x d Gram
    matrices, linear in the batch size. ``L_CLIP`` is :class:`InfoNCE` with
    the same pairing (NT-Xent for two views).

    Defaults from the paper: lam1 = lam2 = 0.25, CLIP's temperature 0.07, the
    mean of the two directions. Add Chen et al. 2024's regularizer for "CyCLIP+Reg":
    ``cyclip(a, b) + 0.1 * positive_pair_regularizer(a, b)``.

    Example::

        loss = CyCLIP()
        value = loss(image_features, text_features)
    """

    name = "cyclip"
    papers = ("goel2022cyclip",)
    call_inputs = ()

    def __init__(self, lam1: float = 0.25, lam2: float = 0.25, **common) -> None:
        check_range("lam1", lam1, 0.0)
        check_range("lam2", lam2, 0.0)
        super().__init__(**common)
        self.lam1 = float(lam1)
        self.lam2 = float(lam2)

    def compute(self, a: Tensor, b: Tensor, temperature: float | Tensor, *, shard: Shard | None, **inputs) -> Tensor:
        a, b, _ = self.prepare(a, b, shard)
        contrastive = self.contrastive_term(a, b, temperature, shard=shard)
        return contrastive + consistency_regularizer(a, b, self.lam1, self.lam2, shard)

    def extra_repr(self) -> str:
        return f"lam1={self.lam1}, lam2={self.lam2}, {super().extra_repr()}"
