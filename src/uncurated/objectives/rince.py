"""Robust InfoNCE (RINCE): a symmetric, noise-tolerant contrastive loss."""

from __future__ import annotations

import math

import torch
from torch import Tensor

from ..validation import check_range
from .base import ContrastiveObjective, contrastive_loss
from .engine import ScoreMatrix


def rince_rows(scores: ScoreMatrix, q: float, lam: float) -> Tensor:
    """Per-anchor RINCE, ``((lam D)^q - e^{q s+}) / q`` written with ``expm1`` (exact as q -> 0)."""
    positive = scores.positive_logit()
    log_partition = torch.logaddexp(positive, scores.negative_logsumexp())
    return (torch.expm1(q * (math.log(lam) + log_partition)) - torch.expm1(q * positive)) / q


def check_rince(q: float, lam: float) -> None:
    check_range("q", q, 0.0, 1.0, low_open=True)
    check_range("lam", lam, 0.0, 1.0, low_open=True)


def rince(
    a: Tensor,
    b: Tensor,
    *,
    q: float = 0.5,
    lam: float = 0.01,
    temperature: float | Tensor = 0.5,
    pairing: str = "two_view",
    direction_reduction: str = "mean",
    normalize: bool = True,
    labels: Tensor | None = None,
    tiling: str = "auto",
    block_size: int | None = None,
    memory_budget: int | None = None,
) -> Tensor:
    """Functional :class:`RINCE`; see there for the equation and the arguments."""
    check_rince(q, lam)
    return contrastive_loss(
        lambda scores: rince_rows(scores, q, lam),
        a,
        b,
        temperature=temperature,
        pairing=pairing,
        direction_reduction=direction_reduction,
        normalize=normalize,
        labels=labels,
        tiling=tiling,
        block_size=block_size,
        memory_budget=memory_budget,
    )


class RINCE(ContrastiveObjective):
    r"""Robust InfoNCE (Chuang et al. 2022; thesis ch. 5, Sec. 5.2).

    .. math::

        \ell = -\frac{e^{q s^+}}{q} + \frac{\big(\lambda (e^{s^+} + \sum_{j=1}^{K} e^{s_j^-})\big)^q}{q},
        \qquad q, \lambda \in (0, 1]

    ``q`` dials robustness to false positives (noisy views or captions): as
    q -> 0 it tends to InfoNCE + log(lambda) in value and gradient (Lemma 5.2);
    at q = 1 it is the symmetric loss :math:`-(1-\lambda)e^{s^+} + \lambda\sum_j e^{s_j^-}`,
    which weights easy positives most. The thesis uses q in [0.1, 0.5] in
    practice (q = 0.1 with SimCLR on ImageNet, q = 1 under heavy noise) and
    lambda = 0.01 for vision; warm q up with
    :func:`uncurated.objectives.schedules.warmup_q`.

    The value is of order :math:`e^{q/t}`: in float32 it overflows once
    ``q / temperature`` approaches 88 (e.g. q = 1 at t = 0.01); use a larger
    temperature or float64 there.

    Defaults: two views, t = 0.5, q = 0.5, lambda = 0.01.

    Example::

        loss = RINCE(q=0.5, lam=0.01)
        value = loss(z1, z2)
    """

    name = "rince"
    default_temperature = 0.5
    default_pairing = "two_view"

    def __init__(self, q: float = 0.5, lam: float = 0.01, **common) -> None:
        check_rince(q, lam)
        super().__init__(**common)
        self.q = float(q)
        self.lam = float(lam)

    def forward(self, a: Tensor, b: Tensor, *, labels: Tensor | None = None) -> Tensor:
        return rince(a, b, q=self.q, lam=self.lam, labels=labels, **self.common_options())

    def extra_repr(self) -> str:
        return f"q={self.q}, lam={self.lam}, {super().extra_repr()}"
