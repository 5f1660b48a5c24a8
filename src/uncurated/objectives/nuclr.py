"""NUCLR: the global contrastive loss with learned per-sample popularities (seed 000)."""

from __future__ import annotations

import math

import torch
from torch import Tensor

from ..validation import check_range
from .sogclr import weighted_surrogate
from .stateful import Direction, DirectionResult, Segments, StatefulObjective, log_moving_average


def log_phi(direction: Direction) -> Tensor:
    r"""(R,) :math:`\log \varphi_i`: the batch's offset negatives relative to the positive, rescaled (Eq. 12).

    :math:`\varphi_i = \frac{P}{N}\sum_{j \in N(i)} e^{S_{ij} - \zeta_j/t - s_i}` with ``P`` the
    anchor's negatives in the dataset and ``N`` in the batch (``(n-1)/(B-1)``
    across modalities): unbiased for the sum over the dataset.
    """
    scores = direction.scores
    log_rescale = math.log(direction.pool) - math.log(scores.negative_slots)
    return scores.negative_logsumexp() - scores.positive_logit() + log_rescale


class NUCLR(StatefulObjective):
    r"""NUCLR (Wang et al., ICLR 2025; seed 000, Algorithm 1, Eqs. 10-15).

    Mini-batch InfoNCE estimates each anchor's partition function with a
    uniform proposal, an error that does not shrink with more data. NUCLR
    learns a popularity :math:`\zeta_j` per contrast sample and weighs it out
    of the partition sum, alternating one step on each of

    .. math::

        \Phi(\zeta) = \frac1n\sum_i t \log\big(\varepsilon(\zeta_i) + \varphi_i(w, \zeta)\big)
            + \frac1n\sum_j \zeta_j \quad (10),\qquad
        \Psi(w) = \frac1n\sum_i t \log\big(\varepsilon(\zeta_i) + \varphi_i(w, \zeta)\big) \quad (11)

    with :math:`\varepsilon(\zeta_i) = e^{-\zeta_i/t}` and
    :math:`\varphi_i = \sum_{j\ne i} e^{(s_{ij} - s_{ii} - \zeta_j)/t}`, estimated on a
    batch with the unbiased rescaling :math:`\frac{n-1}{B-1}` (Eq. 12). As in
    SogCLR a moving average :math:`u_i` of :math:`\varphi_i` enters the
    denominators. The model gradient is Eq. 15 with the :math:`\xi` trick
    (the positive's :math:`\varepsilon(\zeta_i)` replaced by :math:`e^{-\xi/t}`,
    :math:`\xi` the running maximum of :math:`\zeta`); the popularity
    gradient is Eq. 14, including the :math:`i = j` term and :math:`+1/n`,
    applied with per-sample SGD momentum after ``freeze_epochs`` epochs, with
    a cosine step size over the remaining epochs when ``epochs`` is given.
    A popular sample (large :math:`\zeta_j`, a likely false negative) is
    pushed away less: :math:`\zeta_j` acts as a learned negative margin.

    With ``learn_zeta=False`` and ``zeta_init=0, xi_init=0`` it is SogCLR on
    the sum-scale :math:`\varphi` (``eps = 1/(n - 1)``). Ablation switches of
    the paper: ``learn_zeta=False`` (†), ``xi_trick=False`` (◇),
    ``freeze_epochs=0`` (•).

    Defaults from seed 000 and the authors' CC3M script: zeta_init = -0.05,
    xi_init = 0, gamma = 0.8, 5 frozen epochs, momentum 0.9. The step size of
    zeta is not in the paper (the authors' script uses 5e-6 at 2.7M pairs);
    the default 0.1 moves zeta by a few hundredths per visit at batch sizes in
    the hundreds, a choice of this project. t = 0.07 (the paper tunes t in
    {0.01, 0.03, 0.05, 0.07}).

    Example::

        loss = NUCLR(num_samples=len(dataset), epochs=30)
        for epoch in range(30):
            loss.set_epoch(epoch)
            for images, texts, index in loader:
                value = loss(model.image(images), model.text(texts), index=index)
    """

    name = "nuclr"

    def __init__(
        self,
        num_samples: int | tuple[int, int],
        *,
        temperature: float = 0.07,
        zeta_init: float = -0.05,
        xi_init: float = 0.0,
        zeta_lr: float = 0.1,
        zeta_momentum: float = 0.9,
        freeze_epochs: float = 5,
        epochs: float | None = None,
        learn_zeta: bool = True,
        xi_trick: bool = True,
        **options,
    ) -> None:
        check_range("zeta_init", zeta_init)
        check_range("xi_init", xi_init)
        self.zeta_init, self.xi_init = float(zeta_init), float(xi_init)
        super().__init__(num_samples, temperature=temperature, **options)
        self.zeta_lr = check_range("zeta_lr", zeta_lr, 0.0)
        self.zeta_momentum = check_range("zeta_momentum", zeta_momentum, 0.0, 1.0, high_open=True)
        self.freeze_epochs = check_range("freeze_epochs", freeze_epochs, 0.0)
        if epochs is not None:
            check_range("epochs", epochs, self.freeze_epochs, low_open=True)
        self.epochs = epochs
        self.learn_zeta = bool(learn_zeta)
        self.xi_trick = bool(xi_trick)

    def state_fields(self) -> dict[str, float]:
        return {"log_u": -math.inf, "zeta": self.zeta_init, "zeta_momentum": 0.0}

    def state_scalars(self) -> dict[str, float]:
        return {"xi_a": self.xi_init, "xi_b": self.xi_init}

    def column_fields(self) -> tuple[str, ...]:
        return ("zeta", "zeta_momentum")

    def column_offset(self, segments: Segments) -> Tensor:
        return self._gather("zeta", segments) / self.temperature

    def needs_epoch(self) -> bool:
        return super().needs_epoch() or (self.learn_zeta and (self.freeze_epochs > 0 or self.epochs is not None))

    @property
    def zeta_step_size(self) -> float:
        """The step size of zeta at the current epoch: 0 while frozen, then constant or cosine."""
        if not self.learn_zeta:
            return 0.0
        epoch = self._current_epoch() if self.needs_epoch() else 0.0
        if epoch < self.freeze_epochs:
            return 0.0
        if self.epochs is None:
            return self.zeta_lr
        progress = min((epoch - self.freeze_epochs) / (self.epochs - self.freeze_epochs), 1.0)
        return self.zeta_lr * 0.5 * (1.0 + math.cos(math.pi * progress))

    def direction_loss(self, direction: Direction, rows: dict[str, Tensor], columns: dict[str, Tensor]) -> DirectionResult:
        scores, t = direction.scores, self.temperature
        log_phi_batch = log_phi(direction)
        log_u = log_moving_average(rows["log_u"], log_phi_batch.detach(), self.gamma)
        # epsilon(zeta_i) is the positive's own term: zeta of the anchor's positive column.
        log_eps = -columns["zeta"][scores.positive_column] / t
        log_positive_weight = self._log_xi(direction, log_eps) if self.xi_trick else log_eps
        values = t * torch.logaddexp(log_eps, log_phi_batch)
        surrogates = t * weighted_surrogate(log_phi_batch, log_u, log_positive_weight)
        result = DirectionResult(values, surrogates, row_updates={"log_u": log_u})
        step_size = self.zeta_step_size if self.training else 0.0
        if step_size > 0:
            with torch.no_grad():
                gradient = self.zeta_gradient(direction, columns["zeta"], log_eps, log_u)
                momentum = self.zeta_momentum * columns["zeta_momentum"] + gradient
                result.column_updates = {"zeta": columns["zeta"] - step_size * momentum, "zeta_momentum": momentum}
        return result

    def zeta_gradient(self, direction: Direction, zeta: Tensor, log_eps: Tensor, log_u: Tensor) -> Tensor:
        r"""Eq. 14 for the batch's contrast samples ``j``.

        ``1/n - (1/B) [eps_j / (eps_j + u_j) + (n-1)/(B-1) sum_{i != j} e^{(s_ij - s_ii - zeta_j)/t} / (eps_i + u_i)]``,
        where ``u_j`` belongs to the anchor whose positive is ``j``. No xi trick here.
        """
        scores = direction.scores
        log_denominator = torch.logaddexp(log_eps, log_u)
        log_rescale = math.log(direction.pool) - math.log(scores.negative_slots)
        column_sum = torch.exp(
            scores.negative_column_logsumexp(scores.positive_logit() + log_denominator) + log_rescale
        )
        owner = torch.argsort(scores.positive_column)
        log_eps_column = -zeta / self.temperature
        own = torch.exp(log_eps_column - torch.logaddexp(log_eps_column, log_u[owner]))
        return 1.0 / direction.contrast_size - (own + column_sum) / scores.anchors.shape[0]

    def _log_xi(self, direction: Direction, like: Tensor) -> Tensor:
        """``-xi / t`` per anchor, shaped and typed ``like``: xi of the side its positive comes from (the other side)."""
        other = {"a": "xi_b", "b": "xi_a"}
        pieces = [
            torch.full_like(like[: index.numel()], -self.state.scalars[other[side]] / self.temperature)
            for side, index in direction.rows
        ]
        return torch.cat(pieces)

    def after_update(self, updates: list[tuple[str, str, Tensor, Tensor]]) -> None:
        """``xi <- max(xi, max zeta)`` on each side whose popularities changed."""
        for name, side, _, values in updates:
            if name == "zeta" and values.numel():
                key = f"xi_{side}"
                self.state.scalars[key] = max(self.state.scalars[key], float(values.max()))

    def extra_repr(self) -> str:
        return (
            f"zeta_init={self.zeta_init}, zeta_lr={self.zeta_lr}, freeze_epochs={self.freeze_epochs}, "
            f"learn_zeta={self.learn_zeta}, xi_trick={self.xi_trick}, {super().extra_repr()}"
        )
