"""CLIP with seed 003's positive-pair regularizer, its negative-pair ablation, and the regularizer alone."""

from __future__ import annotations

from torch import Tensor

from ..validation import check_choice, check_range
from .base import ContrastiveObjective, prepare_features
from .infonce import infonce

VARIANTS = ("positive", "negative", "only")


def positive_pair_regularizer(a: Tensor, b: Tensor) -> Tensor:
    r"""``R = -(1/B) sum_i <a_i, b_i>``: minus the mean positive-pair similarity (seed 003, Sec. 6).

    For unit vectors it equals ``0.5 * mean |a_i - b_i|^2 - 1``. Raw
    similarities, not divided by any temperature.
    """
    return -(a * b).sum(dim=1).mean()


def negative_pair_regularizer(a: Tensor, b: Tensor) -> Tensor:
    r"""The mean off-diagonal similarity, ``sum_{i != j} <a_i, b_j> / (B^2 - B)`` (seed 003, App. C.2).

    Computed as ``(sum_i a_i) . (sum_j b_j) - sum_i <a_i, b_i>``, without a B x B matrix.
    """
    batch = a.shape[0]
    off_diagonal = a.sum(dim=0) @ b.sum(dim=0) - (a * b).sum()
    return off_diagonal / (batch * batch - batch)


def check_clip_reg(lam: float, variant: str) -> None:
    check_range("lam", lam, 0.0, low_open=True)
    check_choice("variant", variant, VARIANTS)


def clip_reg(
    a: Tensor,
    b: Tensor,
    *,
    lam: float = 0.1,
    variant: str = "positive",
    temperature: float | Tensor = 0.07,
    pairing: str = "cross",
    direction_reduction: str = "sum",
    normalize: bool = True,
    tiling: str = "auto",
    block_size: int | None = None,
    memory_budget: int | None = None,
) -> Tensor:
    """Functional :class:`CLIPRegularized`; see there for the equation and the arguments."""
    check_clip_reg(lam, variant)
    a, b = prepare_features(a, b, normalize)
    if variant == "only":
        return lam * positive_pair_regularizer(a, b)
    contrastive = infonce(
        a, b, temperature=temperature, pairing=pairing, direction_reduction=direction_reduction, normalize=False,
        tiling=tiling, block_size=block_size, memory_budget=memory_budget,
    )
    if variant == "positive":
        return contrastive + lam * positive_pair_regularizer(a, b)
    return contrastive + lam * negative_pair_regularizer(a, b)


class CLIPRegularized(ContrastiveObjective):
    r"""CLIP plus the positive-pair regularizer of Chen, Deng, Li & Gu (seed 003, Sec. 6).

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
    default_direction_reduction = "sum"

    def __init__(self, lam: float = 0.1, *, variant: str = "positive", **common) -> None:
        check_clip_reg(lam, variant)
        super().__init__(**common)
        self.lam = float(lam)
        self.variant = variant

    def forward(self, a: Tensor, b: Tensor) -> Tensor:
        return clip_reg(a, b, lam=self.lam, variant=self.variant, **self.common_options())

    def extra_repr(self) -> str:
        return f"lam={self.lam}, variant={self.variant!r}, {super().extra_repr()}"
