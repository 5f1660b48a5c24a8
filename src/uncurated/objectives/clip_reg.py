"""CLIP with Chen et al. 2024's positive-pair regularizer, its negative-pair ablation, and the regularizer alone."""

from __future__ import annotations

import torch
from torch import Tensor

from ..process.shard import Shard
from ..validation import check_choice, check_range
from .infonce import InfoNCE

VARIANTS = ("positive", "negative", "only")


def positive_pair_regularizer(a: Tensor, b: Tensor) -> Tensor:
    r"""``R = -(1/B) sum_i <a_i, b_i>``: minus the mean positive-pair similarity (Chen et al. 2024, Sec. 6).

    For unit vectors it equals ``0.5 * mean |a_i - b_i|^2 - 1``. Raw
    similarities, not divided by any temperature.
    """
    return -(a * b).sum(dim=1).mean()


def negative_pair_regularizer(a: Tensor, b: Tensor, shard: Shard | None = None) -> Tensor:
    r"""The mean off-diagonal similarity, ``sum_{i != j} <a_i, b_j> / (B^2 - B)`` (Chen et al. 2024, App. C.2).

    Computed as ``(sum_i a_i) . (sum_j b_j) - sum_i <a_i, b_i>``, without a B x B matrix. With a ``shard``
    the sums run over the global batch (one all-reduce of 2d + 1 numbers).
    """
    sums = torch.cat([a.sum(dim=0), b.sum(dim=0), (a * b).sum()[None]])
    batch = a.shape[0]
    if shard is not None:
        sums, batch = shard.all_reduce(sums, kind="feature sums"), shard.global_size
    dim = a.shape[1]
    off_diagonal = sums[:dim] @ sums[dim : 2 * dim] - sums[-1]
    return off_diagonal / (batch * batch - batch)


class CLIPRegularized(InfoNCE):
    r"""CLIP plus the positive-pair regularizer of Chen, Deng, Li & Gu (Chen et al. 2024, Sec. 6).

    .. math::

        \hat{\mathcal L}_{S'}(f, \tau, \lambda) = \mathcal L_{S'}(f, \tau)
            - \lambda \frac{1}{B} \sum_{i=1}^{B} \langle a_i, b_i \rangle

    CLIP's learned margin is only of the order of the temperature (Thm 6.2);
    pulling positive pairs together with raw, untempered cosines restores a
    margin of the order of the data's (Thm 6.3). ``L_S'`` is eq. 3.1, whose
    two directions the paper *sums* (the default here; ``lam = 0.1`` was set
    for that scale).

    ``variant``:

    * ``"positive"`` (default): the regularizer above.
    * ``"negative"``: the App. C.2 ablation, CLIP +
      :math:`\frac{\lambda}{B^2 - B}\sum_{i \ne j}\langle a_i, b_j\rangle`.
    * ``"only"``: the regularizer alone, :math:`\lambda R` without the
      contrastive term (the paper's degenerate "Reg"/"L2" baseline).

    Example::

        loss = CLIPRegularized(lam=0.1)
        value = loss(image_features, text_features)
    """

    name = "clip_reg"
    papers = ("chen2024clip",)
    default_direction_reduction = "sum"
    call_inputs = ()

    def __init__(self, lam: float = 0.1, *, variant: str = "positive", **common) -> None:
        check_range("lam", lam, 0.0, low_open=True)
        check_choice("variant", variant, VARIANTS)
        super().__init__(**common)
        self.lam = float(lam)
        self.variant = variant

    def compute(self, a: Tensor, b: Tensor, temperature: float | Tensor, *, shard: Shard | None, **inputs) -> Tensor:
        a, b, _ = self.prepare(a, b, shard)
        if self.variant != "negative":  # a mean over pairs: this process's rows
            regularizer = positive_pair_regularizer(a, b) * (1.0 if shard is None else shard.weight)
            if self.variant == "only":
                return self.lam * regularizer
        else:
            regularizer = negative_pair_regularizer(a, b, shard)
        return self.contrastive_term(a, b, temperature, shard=shard) + self.lam * regularizer

    def extra_repr(self) -> str:
        return f"lam={self.lam}, variant={self.variant!r}, {super().extra_repr()}"
