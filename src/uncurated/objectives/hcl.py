"""Hard negative contrastive loss (HCL): importance-weighted negatives."""

from __future__ import annotations

import torch
from torch import Tensor

from ..validation import check_range
from .base import ContrastiveObjective, contrastive_loss
from .dcl import check_debiasing, debiased_log_negative_term
from .engine import ScoreMatrix


def hcl_rows(scores: ScoreMatrix, beta: float, tau_plus: float, clamp: str = "min") -> Tensor:
    """Per-anchor HCL: DCL with the importance-weighted means ``log sum w e^s = L(beta+1) - L(beta)``."""
    positive = scores.positive_logit()
    log_negative_mean = scores.negative_logsumexp(beta + 1.0) - scores.negative_logsumexp(beta)
    log_positive_mean = scores.positive_logsumexp(beta + 1.0) - scores.positive_logsumexp(beta)
    log_term = debiased_log_negative_term(scores, log_negative_mean, log_positive_mean, tau_plus, clamp)
    return torch.logaddexp(positive, log_term) - positive


def hcl(
    a: Tensor,
    b: Tensor,
    *,
    beta: float = 1.0,
    tau_plus: float = 0.1,
    clamp: str = "min",
    temperature: float | Tensor = 0.5,
    pairing: str = "two_view",
    direction_reduction: str = "mean",
    normalize: bool = True,
    labels: Tensor | None = None,
    extra_positives: Tensor | None = None,
    tiling: str = "auto",
    block_size: int | None = None,
    memory_budget: int | None = None,
) -> Tensor:
    """Functional :class:`HCL`; see there for the equation and the arguments."""
    check_range("beta", beta, 0.0)
    check_debiasing(tau_plus, clamp)
    return contrastive_loss(
        lambda scores: hcl_rows(scores, beta, tau_plus, clamp),
        a,
        b,
        temperature=temperature,
        pairing=pairing,
        direction_reduction=direction_reduction,
        normalize=normalize,
        labels=labels,
        extra_positives=extra_positives,
        tiling=tiling,
        block_size=block_size,
        memory_budget=memory_budget,
    )


class HCL(ContrastiveObjective):
    r"""Hard negative contrastive loss (Robinson, Chuang et al. 2021; thesis ch. 4, eq. 4.4).

    Negatives are reweighted towards those the embedding finds similar to
    the anchor, :math:`q_\beta(x^-) \propto e^{\beta s^-} p(x^-)`, with
    self-normalized importance weights :math:`w_j = e^{\beta s_j^-} / \sum_k
    e^{\beta s_k^-}` (computed as log-sum-exps, so large ``beta`` is stable),
    and debiased as in DCL:

    .. math::

        g = \max\Big\{\frac{1}{1-\tau^+}\Big(\sum_j w_j e^{s_j^-}
            - \tau^+ \sum_m w^+_m e^{s_m^+}\Big),\ e^{-1/t}\Big\},\qquad
        \ell = -\log\frac{e^{s^+}}{e^{s^+} + N g}

    ``beta=0`` is DCL; ``beta=0, tau_plus=0`` is InfoNCE; as ``beta`` grows the
    weighted term tends to the hardest negative (thesis Prop. 4.3). With one
    positive view (the default) its weight cancels. The thesis restates no
    clamp for HCL; the reference code clamps as DCL does, and so does this
    one (``clamp`` as in :class:`DCL`). Anneal ``beta`` with
    :func:`uncurated.objectives.schedules.anneal_beta`.

    Defaults from the thesis's SimCLR experiments: two views, t = 0.5,
    ``beta`` = 1, :math:`\tau^+` = 0.1.

    Example::

        loss = HCL(beta=0.5, tau_plus=0.1)
        value = loss(z1, z2)
    """

    name = "hcl"
    default_temperature = 0.5
    default_pairing = "two_view"

    def __init__(self, beta: float = 1.0, tau_plus: float = 0.1, *, clamp: str = "min", **common) -> None:
        check_range("beta", beta, 0.0)
        check_debiasing(tau_plus, clamp)
        super().__init__(**common)
        self.beta = float(beta)
        self.tau_plus = float(tau_plus)
        self.clamp = clamp

    def forward(
        self,
        a: Tensor,
        b: Tensor,
        *,
        labels: Tensor | None = None,
        extra_positives: Tensor | None = None,
    ) -> Tensor:
        return hcl(
            a,
            b,
            beta=self.beta,
            tau_plus=self.tau_plus,
            clamp=self.clamp,
            labels=labels,
            extra_positives=extra_positives,
            **self.common_options(),
        )

    def extra_repr(self) -> str:
        return f"beta={self.beta}, tau_plus={self.tau_plus}, clamp={self.clamp!r}, {super().extra_repr()}"
