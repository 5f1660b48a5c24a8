"""GCL / SogCLR: the global contrastive loss optimized with per-sample moving averages."""

from __future__ import annotations

import math

import torch
from torch import Tensor

from ..validation import check_range
from .stateful import Direction, DirectionResult, StatefulObjective, log_moving_average


def log_negative_mean(scores) -> Tensor:
    """(R,) ``log g_i``, ``g_i = mean_{j in N(i)} exp(S'_ij - s_i)``: the batch's negatives relative to the positive."""
    return scores.negative_logsumexp() - math.log(scores.negative_slots) - scores.positive_logit()


def log_denominator(log_eps: float | Tensor, log_u: Tensor) -> Tensor:
    """``log(eps + u_i)`` from ``log eps`` (a number, or one per anchor) and ``log u_i``."""
    return torch.logaddexp(torch.as_tensor(log_eps, dtype=log_u.dtype, device=log_u.device), log_u)


def weighted_surrogate(log_g: Tensor, log_eps_plus_u: Tensor) -> Tensor:
    """``w_i log g_i`` with ``w_i = g_i / (eps + u_i)`` held constant, given ``log(eps + u_i)``
    (:func:`log_denominator`): its gradient is ``grad g_i / (eps + u_i)``."""
    return torch.exp(log_g.detach() - log_eps_plus_u) * log_g


class SogCLR(StatefulObjective):
    r"""GCL optimized by SogCLR (Yuan et al. 2022), as the baseline of Wang et al. 2025.

    The global contrastive loss contrasts each anchor with the whole dataset:

    .. math::

        F(w) = \frac1n \sum_i t \log\big(\varepsilon + g_i(w)\big),\qquad
        g_i = \mathbb E_{j \ne i}\, e^{(s_{ij} - s_{ii})/t}

    with raw similarities :math:`s`. A batch estimates :math:`g_i` by its
    mean over the batch's negatives, and a per-anchor moving average
    :math:`u_i \leftarrow (1-\gamma) u_i + \gamma\, g_i(\mathcal B)` replaces it in
    the denominator of the gradient, :math:`\frac{t}{\varepsilon + u_i}\nabla g_i`,
    which removes the bias that needs huge batches. Both directions are
    scored for image-text pairs (``u`` kept per side). ``u`` is initialised
    at a sample's first visit and stored as its log (stable at t = 0.01).

    The reported value is the batch's :math:`\frac1B\sum_i t\log(\varepsilon + g_i)`;
    the gradient uses ``u``.

    Defaults: t = 0.07, gamma = 0.8 (Wang et al. 2025), eps = 1e-8.

    ``eps`` and the identities each value keeps: ``eps = 1e-8`` (the default)
    is Yuan et al.'s averaged form, :math:`g_i` the *mean* over negatives and
    ``eps`` only a guard against 0, so the positive stays out of the
    partition sum (the decoupled form, as in DCL). ``eps="nuclr"`` sets
    ``eps = 1 / P``, ``P`` the negatives per anchor in the dataset (``n - 1``
    across modalities, ``2n - 2`` for two views): the positive's own term on
    the averaged scale. Then at full batch the value is ``t`` InfoNCE minus
    ``t log P``, and NUCLR with :math:`\zeta = \xi = 0` (``learn_zeta=False,
    zeta_init=0, xi_init=0``) reduces to it exactly (Wang et al. 2025: "SogCLR is
    NUCLR with zeta = 0, xi = 0"): the same gradients, ``u`` smaller by the
    factor ``P``, values lower by ``t log P``. The two forms differ most
    where ``u`` is small: in the first steps and at small n.

    Example::

        loss = SogCLR(num_samples=len(dataset))
        value = loss(image_features, text_features, index=batch_indices)
    """

    name = "sogclr"
    papers = ("yuan2022sogclr", "wang2025nuclr")

    def __init__(
        self, num_samples: int | tuple[int, int], *, temperature: float = 0.07, eps: float | str = 1e-8, **options
    ) -> None:
        super().__init__(num_samples, temperature=temperature, **options)
        self.eps: float | str
        if eps == "nuclr":
            self.eps = eps
        elif isinstance(eps, str):
            raise ValueError(f"eps must be a number > 0 or 'nuclr' (1 / the negatives per anchor), got {eps!r}")
        else:
            self.eps = check_range("eps", eps, 0.0, low_open=True)

    def direction_loss(self, direction: Direction) -> DirectionResult:
        t = direction.temperature
        log_g = log_negative_mean(direction.scores)
        log_u = log_moving_average(direction.row_state["log_u"], log_g.detach(), self.gamma)
        log_eps = -math.log(direction.pool) if isinstance(self.eps, str) else math.log(self.eps)  # str: "nuclr"
        values = t * torch.logaddexp(torch.tensor(log_eps, dtype=log_g.dtype), log_g)
        surrogates = t * weighted_surrogate(log_g, log_denominator(log_eps, log_u))
        return DirectionResult(values, surrogates, row_updates={"log_u": log_u})

    def extra_repr(self) -> str:
        return f"eps={self.eps!r}, {super().extra_repr()}"
