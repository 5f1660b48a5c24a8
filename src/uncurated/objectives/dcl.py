"""Debiased contrastive loss (DCL): correcting for false negatives."""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
from torch import Tensor

from ..validation import check_choice, check_range
from .base import ContrastiveObjective
from .engine import ScoreMatrix

CLAMPS = ("min", "zero", "fallback")


def debiased_log_negative_term(
    scores: ScoreMatrix,
    log_negative_mean: Tensor,
    log_positive_mean: Tensor,
    tau_plus: float,
    clamp: str,
    at_floor: Callable[[Tensor], None] | None = None,
) -> Tensor:
    r"""``log(N g_i)``, the log of DCL's debiased estimate of the negatives' sum (thesis eq. 3.6).

    .. math::

        g_i = \max\Big\{\frac{1}{\tau^-}\big(\bar e^-_i - \tau^+ \bar e^+_i\big),\ e^{-1/t}\Big\}

    where :math:`\bar e^-_i` is the (possibly importance-weighted) mean of
    :math:`e^{s}` over the negatives and :math:`\bar e^+_i` the same over the
    positive views, both given as logs. Computed in log space so that
    temperatures down to 0.01 stay finite. ``clamp`` chooses what happens where
    the bracket falls below the floor: ``"min"`` clamps at :math:`e^{-1/t}`,
    ``"zero"`` at the smallest positive float (unnormalized features),
    ``"fallback"`` uses the biased (InfoNCE) sum of that anchor instead.
    ``at_floor``, if given, receives the (R,) boolean mask of the anchors whose
    bracket fell to the floor.
    """
    log_floor = _log_floor(scores, clamp, log_negative_mean)
    shift = torch.maximum(log_negative_mean, log_positive_mean).detach()
    bracket = (torch.exp(log_negative_mean - shift) - tau_plus * torch.exp(log_positive_mean - shift)) / (
        1.0 - tau_plus
    )
    below = bracket <= torch.exp(log_floor - shift)
    if at_floor is not None:
        at_floor(below)
    log_estimate = torch.where(below, log_floor, shift + torch.log(torch.where(below, 1.0, bracket)))
    log_term = math.log(scores.negative_slots) + log_estimate
    if clamp == "fallback":
        log_term = torch.where(below, scores.negative_logsumexp(), log_term)
    return log_term


def _log_floor(scores: ScoreMatrix, clamp: str, like: Tensor) -> Tensor:
    if clamp == "zero":
        return torch.full_like(like, math.log(torch.finfo(like.dtype).tiny))
    # e^{-1/t}: the smallest value of e^{s} for unit vectors.
    return torch.as_tensor(-scores.scale, dtype=like.dtype, device=like.device).expand_as(like)


def dcl_rows(
    scores: ScoreMatrix, tau_plus: float, clamp: str = "min", at_floor: Callable[[Tensor], None] | None = None
) -> Tensor:
    """Per-anchor DCL, ``log(e^{s_i} + N g_i) - s_i`` (thesis eq. 3.7)."""
    positive = scores.positive_logit()
    log_negative_mean = scores.negative_logsumexp() - math.log(scores.negative_slots)
    log_positive_mean = scores.positive_logsumexp() - math.log(scores.positive_views)
    log_term = debiased_log_negative_term(scores, log_negative_mean, log_positive_mean, tau_plus, clamp, at_floor)
    return torch.logaddexp(positive, log_term) - positive


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

    def row_loss(self, scores: ScoreMatrix) -> Tensor:
        return dcl_rows(scores, self.tau_plus, self.clamp, self.floor_recorder(scores))

    def floor_recorder(self, scores: ScoreMatrix) -> Callable[[Tensor], None]:
        """Records which anchors of ``scores`` sit at the floor, as the diagnostic ``clamped_fraction``."""
        return lambda below: self.record("clamped_fraction", scores, below)

    def extra_repr(self) -> str:
        return f"tau_plus={self.tau_plus}, clamp={self.clamp!r}, {super().extra_repr()}"
