"""CyCLIP: CLIP with cyclic consistency between and within modalities."""

from __future__ import annotations

from torch import Tensor

from ..precision import statistics_dtype
from ..validation import check_range
from .base import prepare_features
from .infonce import InfoNCE


def inmodal_consistency(a: Tensor, b: Tensor) -> Tensor:
    r"""CyCLIP's in-modal term, :math:`\frac1B\sum_{j,k}(\langle a_j,a_k\rangle - \langle b_j,b_k\rangle)^2`.

    Evaluated through d x d Gram matrices, ``(|A^T A|^2 + |B^T B|^2 - 2|A^T B|^2) / B``,
    so it costs O(B d^2) time and O(d^2) memory, never a B x B matrix.
    """
    aa, bb, cross = _grams(a, b)
    return (aa.square().sum() + bb.square().sum() - 2.0 * cross.square().sum()) / a.shape[0]


def crossmodal_consistency(a: Tensor, b: Tensor) -> Tensor:
    r"""CyCLIP's cross-modal term, :math:`\frac1B\sum_{j,k}(\langle a_j,b_k\rangle - \langle a_k,b_j\rangle)^2`.

    Evaluated as ``2 (<A^T A, B^T B> - <C, C^T>) / B`` with ``C = A^T B``: O(d^2) memory.
    """
    aa, bb, cross = _grams(a, b)
    return 2.0 * ((aa * bb).sum() - (cross * cross.T).sum()) / a.shape[0]


def _grams(a: Tensor, b: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """``A^T A``, ``B^T B``, ``A^T B``: products in the features' type, results in the statistics' (their
    differences cancel)."""
    dtype = statistics_dtype(a.dtype)
    return (a.T @ a).to(dtype), (b.T @ b).to(dtype), (a.T @ b).to(dtype)


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

    def compute(self, a: Tensor, b: Tensor, temperature: float | Tensor, **inputs) -> Tensor:
        a, b = prepare_features(a, b, self.normalize)
        contrastive = self.contrastive_term(a, b, temperature)
        return contrastive + self.lam1 * inmodal_consistency(a, b) + self.lam2 * crossmodal_consistency(a, b)

    def extra_repr(self) -> str:
        return f"lam1={self.lam1}, lam2={self.lam2}, {super().extra_repr()}"
