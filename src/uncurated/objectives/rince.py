"""Robust InfoNCE (RINCE): a symmetric, noise-tolerant contrastive loss."""

from __future__ import annotations

import math

import torch
from torch import Tensor

from ..validation import check_range
from .base import ContrastiveObjective
from .row_statistics import RowStatistics
from .schedules import warmup_q


def rince_rows(scores: RowStatistics, q: float, lam: float) -> Tensor:
    r"""Per-anchor RINCE, ``((lam D)^q - e^{q s+}) / q`` written with ``expm1`` (exact as q -> 0), as one autograd
    node (:class:`_RINCERows`)."""
    return _RINCERows.apply(scores.positive_logit(), scores.negative_logsumexp(), q, math.log(lam))


class _RINCERows(torch.autograd.Function):
    r"""RINCE's rows and their closed-form gradient. With :math:`Z = \log(e^{s} + e^{L})`,
    :math:`x = q(\log\lambda + Z)` and :math:`y = q s`:

    .. math::

        \ell = \frac{e^x - e^y}{q},\qquad
        \frac{\partial\ell}{\partial s} = e^{x + s - Z} - e^{y},\qquad
        \frac{\partial\ell}{\partial L} = e^{x + L - Z}

    (eight operators forward and nine backward where autograd dispatched about thirty).
    """

    @staticmethod
    def forward(ctx, positive: Tensor, log_negatives: Tensor, q: float, log_lam: float) -> Tensor:
        log_partition = torch.logaddexp(positive, log_negatives)
        x = torch.add(log_partition, log_lam).mul_(q)
        y = positive * q
        ctx.save_for_backward(positive, log_negatives, log_partition, x, y)
        return torch.expm1(x).sub_(torch.expm1(y)).div_(q)

    @staticmethod
    def backward(ctx, grad: Tensor):
        positive, log_negatives, log_partition, x, y = ctx.saved_tensors
        shift = x - log_partition
        d_positive = torch.add(shift, positive).exp_().sub_(torch.exp(y)).mul_(grad)
        d_negatives = torch.add(shift, log_negatives).exp_().mul_(grad)
        return d_positive, d_negatives, None, None


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
    lambda = 0.01 for vision.

    ``q_warmup_epochs`` warms q up linearly from ``q_start`` to ``q`` over
    that many epochs (:func:`uncurated.objectives.schedules.warmup_q`, thesis
    Sec. 5.3, video), following :meth:`set_epoch`; ``None`` keeps q fixed.

    The value is of order :math:`e^{q/t}`: in float32 it overflows once
    ``q / temperature`` approaches 88 (e.g. q = 1 at t = 0.01); use a larger
    temperature or float64 there.

    Defaults: two views, t = 0.5, q = 0.5, lambda = 0.01.

    Example::

        loss = RINCE(q=0.5, lam=0.01)
        value = loss(z1, z2)
    """

    name = "rince"
    papers = ("chuang2022rince", "chuang2023thesis")
    default_temperature = 0.5
    default_pairing = "two_view"
    call_inputs = ("labels",)

    def __init__(
        self,
        q: float = 0.5,
        lam: float = 0.01,
        *,
        q_warmup_epochs: float | None = None,
        q_start: float = 0.01,
        **common,
    ) -> None:
        check_range("q", q, 0.0, 1.0, low_open=True)
        check_range("lam", lam, 0.0, 1.0, low_open=True)
        super().__init__(**common)
        self.q_final = self.q = float(q)
        self.lam = float(lam)
        self.q_warmup_epochs = None if q_warmup_epochs is None else check_range("q_warmup_epochs", q_warmup_epochs, 1.0)
        self.q_start = check_range("q_start", q_start, 0.0, 1.0, low_open=True)

    def set_epoch(self, epoch: float) -> None:
        """As :meth:`Objective.set_epoch`; with ``q_warmup_epochs``, q follows the warm-up."""
        super().set_epoch(epoch)
        if self.q_warmup_epochs is not None:
            self.q = warmup_q(epoch, self.q_warmup_epochs, self.q_start, self.q_final)

    def row_loss(self, scores: RowStatistics) -> Tensor:
        return rince_rows(scores, self.q, self.lam)

    def extra_repr(self) -> str:
        return f"q={self.q}, lam={self.lam}, {super().extra_repr()}"
