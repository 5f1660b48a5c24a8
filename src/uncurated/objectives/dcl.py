"""Debiased contrastive loss (DCL): correcting for false negatives."""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import Tensor

from ..validation import check_choice, check_range
from .base import ContrastiveObjective
from .infonce import SOFTPLUS_LINEAR
from .row_statistics import RowStatistics

CLAMPS = ("min", "zero", "fallback")


def debiased_rows(
    scores: RowStatistics,
    positive: Tensor,
    log_negative_mean: Tensor,
    log_positive_mean: Tensor,
    tau_plus: float,
    clamp: str,
    at_floor: Callable[[Tensor], None] | None = None,
) -> Tensor:
    r"""``log(e^{s_i} + N g_i) - s_i``, each anchor's loss with DCL's debiased estimate of the negatives' sum
    (thesis eqs. 3.6-3.7).

    .. math::

        g_i = \max\Big\{\frac{1}{\tau^-}\big(\bar e^-_i - \tau^+ \bar e^+_i\big),\ e^{-1/t}\Big\}

    where :math:`\bar e^-_i` is the (possibly importance-weighted) mean of
    :math:`e^{s}` over the negatives and :math:`\bar e^+_i` the same over the
    positive views, both given as logs, and :math:`s_i` the positive score.
    Computed in log space so that temperatures down to 0.01 stay finite:
    :math:`\log(N g_i) = \log N + \log\bar e^-_i + \log(1 - \tau^+ e^{d_i}) - \log\tau^-`
    with :math:`d_i = \log\bar e^+_i - \log\bar e^-_i`. ``clamp`` chooses what
    happens where the bracket falls below the floor: ``"min"`` clamps at
    :math:`e^{-1/t}`, ``"zero"`` at the smallest positive float (unnormalized
    features), ``"fallback"`` uses the biased (InfoNCE) sum of that anchor
    instead. ``at_floor``, if given, receives the (R,) boolean mask of the
    anchors whose bracket fell to the floor.

    One autograd node (:class:`_DebiasedRows`) with the closed-form gradient.
    """
    log_slots = math.log(scores.negative_slots)
    if isinstance(scores.scale, Tensor) and clamp != "zero":  # e^{-1/t}: the smallest e^{s} of unit vectors
        floor = torch.rsub(scores.scale, log_slots)
    else:
        log_floor = math.log(torch.finfo(positive.dtype).tiny) if clamp == "zero" else -scores.scale
        floor = torch.tensor(log_slots + log_floor, dtype=positive.dtype, device=positive.device)
    shared = log_positive_mean is positive  # one positive view: its log-mean is the positive score
    rows, below = _DebiasedRows.apply(
        positive, log_negative_mean, None if shared else log_positive_mean, floor, log_slots, tau_plus, clamp
    )
    if at_floor is not None:
        at_floor(below)
    return rows


class _DebiasedRows(torch.autograd.Function):
    r"""The rows of :func:`debiased_rows` and whether each sat at the floor.

    With :math:`m_i = -\tau^+ e^{d_i}` and
    :math:`T_i = \max(\log N + \log\bar e^-_i + \log(1 + m_i) - \log\tau^-,\ \log(N e^{\rm floor}))`
    the row is :math:`\operatorname{softplus}(T_i - s_i)`. Away from the floor
    :math:`\partial T/\partial \log\bar e^+ = w = m / (1 + m)` and
    :math:`\partial T/\partial \log\bar e^- = 1 - w`; at the floor the gradient
    goes to the floor (the temperature, where learned) or, with ``"fallback"``,
    to the biased term :math:`\log N + \log\bar e^-`, which replaces :math:`T` there.
    """

    @staticmethod
    def forward(ctx, positive, log_negative_mean, log_positive_mean, floor, log_slots, tau_plus, clamp):
        """``log_positive_mean`` ``None``: the positive score itself (one view), whose two gradients the backward
        pass adds."""
        ctx.set_materialize_grads(False)
        falls_back = clamp == "fallback"
        if tau_plus:
            positive_mean = positive if log_positive_mean is None else log_positive_mean
            bracket = torch.sub(positive_mean, log_negative_mean).exp_().mul_(-tau_plus)  # m
            log_term = torch.log1p(bracket).add_(log_negative_mean).add_(log_slots - math.log1p(-tau_plus))
        else:
            bracket, log_term = None, log_negative_mean + log_slots
        log_term = torch.fmax(log_term, floor)  # the floor where 1 + m <= 0 (log1p's NaN or -inf), too
        below = log_term == floor
        if falls_back:
            log_term = torch.where(below, log_negative_mean + log_slots, log_term)
        margin = log_term.sub_(positive)
        ctx.save_for_backward(margin, bracket, below)
        ctx.falls_back, ctx.floor_shape, ctx.shared = falls_back, floor.shape, log_positive_mean is None
        ctx.mark_non_differentiable(below)
        return F.softplus(margin, threshold=SOFTPLUS_LINEAR), below

    @staticmethod
    def backward(ctx, grad, _):
        if grad is None:  # only the mask was used
            return None, None, None, None, None, None, None
        margin, bracket, below = ctx.saved_tensors
        needs_positive, needs_negative_mean, needs_positive_mean, needs_floor = ctx.needs_input_grad[:4]
        d_term = torch.sigmoid(margin).mul_(grad)  # d row / d T
        if bracket is None:  # tau_plus = 0: T is the biased term away from the floor
            d_positive_mean, d_negative_mean = None, d_term.masked_fill(below, 0.0)
        else:  # (1 - w) dT = dT / (1 + m) and w dT; masked after, as 1 + m <= 0 at the floor
            quotient = d_term / (bracket + 1.0)
            d_positive_mean = torch.mul(quotient, bracket).masked_fill_(below, 0.0)
            d_negative_mean = quotient.masked_fill_(below, 0.0)
        d_positive = None
        if needs_positive:
            shared = ctx.shared and d_positive_mean is not None
            d_positive = d_positive_mean.sub_(d_term) if shared else -d_term
        if ctx.falls_back:
            d_negative_mean = torch.where(below, d_term, d_negative_mean)
        d_floor = None
        if needs_floor and not ctx.falls_back:
            d_floor = torch.where(below, d_term, 0.0).sum_to_size(ctx.floor_shape)
        return (
            d_positive,
            d_negative_mean if needs_negative_mean else None,
            d_positive_mean if needs_positive_mean else None,
            d_floor,
            None,
            None,
            None,
        )


def dcl_rows(
    scores: RowStatistics, tau_plus: float, clamp: str = "min", at_floor: Callable[[Tensor], None] | None = None
) -> Tensor:
    """Per-anchor DCL, ``log(e^{s_i} + N g_i) - s_i`` (thesis eq. 3.7)."""
    log_positive_mean = scores.positive_logsumexp()
    if scores.positive_views > 1:
        log_positive_mean = log_positive_mean - math.log(scores.positive_views)
    log_negative_mean = scores.negative_logsumexp() - math.log(scores.negative_slots)
    return debiased_rows(
        scores, scores.positive_logit(), log_negative_mean, log_positive_mean, tau_plus, clamp, at_floor
    )


class DCL(ContrastiveObjective):
    r"""Debiased contrastive loss (Chuang et al. 2020; thesis eqs. 3.6-3.7).

    A fraction :math:`\tau^+` of in-batch "negatives" share the anchor's
    class. DCL subtracts their expected contribution, estimated from the
    positive views, from the negatives' mean:

    .. math::

        g = \max\Big\{\frac{1}{1-\tau^+}\Big(\frac1N\sum_{j=1}^N e^{s_j^-}
            - \tau^+\frac1M\sum_{m=1}^M e^{s_m^+}\Big),\ e^{-1/t}\Big\},\qquad
        \ell = -\log\frac{e^{s^+}}{e^{s^+} + N g}

    With ``tau_plus=0`` it is exactly InfoNCE. M = 1 uses the batch's own
    positive; ``extra_positives=`` (B, M - 1, d) at call time adds further
    views (two-view pairing). ``clamp``: ``"min"`` at :math:`e^{-1/t}`
    (default), ``"zero"`` just above 0 (for unnormalized features, as the
    thesis does for QT and CURL), or ``"fallback"`` (where the estimate is
    below :math:`e^{-1/t}`, that anchor uses the biased InfoNCE term, as for
    CMC at t = 0.07).

    Each call records the diagnostic ``clamped_fraction``: the fraction of
    anchors whose estimate fell to the floor (at small temperatures most
    anchors sit there, and DCL then trains on the floor).

    Defaults from the thesis's SimCLR experiments: two views, t = 0.5,
    :math:`\tau^+` = 0.1 (a good value is about 1/number of classes).

    Example::

        loss = DCL(tau_plus=0.1)
        value = loss(z1, z2)
    """

    name = "dcl"
    papers = ("chuang2020dcl", "chuang2023thesis")
    default_temperature = 0.5
    default_pairing = "two_view"
    call_inputs = ("labels", "extra_positives")
    diagnostic_names = ("clamped_fraction",)

    def __init__(self, tau_plus: float = 0.1, *, clamp: str = "min", **common) -> None:
        check_range("tau_plus", tau_plus, 0.0, 1.0, high_open=True)
        check_choice("clamp", clamp, CLAMPS)
        super().__init__(**common)
        self.tau_plus = float(tau_plus)
        self.clamp = clamp

    def row_loss(self, scores: RowStatistics) -> Tensor:
        return dcl_rows(scores, self.tau_plus, self.clamp, self.floor_recorder(scores))

    def floor_recorder(self, scores: RowStatistics) -> Callable[[Tensor], None]:
        """Records which anchors of ``scores`` sit at the floor, as the diagnostic ``clamped_fraction``."""
        return lambda below: self.record("clamped_fraction", scores, below)

    def extra_repr(self) -> str:
        return f"tau_plus={self.tau_plus}, clamp={self.clamp!r}, {super().extra_repr()}"
