"""iSogCLR: the global contrastive loss with an individual temperature per sample."""

from __future__ import annotations

import math

import torch
from torch import Tensor

from ..validation import check_choice, check_range
from .sogclr import log_denominator, log_negative_mean, weighted_surrogate
from .stateful import Direction, DirectionResult, StatefulObjective, log_moving_average

TEMPERATURE_OPTIMIZERS = ("momentum", "fastclip", "adam")


class ISogCLR(StatefulObjective):
    r"""iSogCLR (Qiu et al. 2023): robust global contrastive loss with per-sample temperatures.

    Each anchor has its own temperature :math:`t_i \in [t_{\min}, t_{\max}]`, and
    the model and the temperatures minimise (the RGCL objective)

    .. math::

        \frac1n \sum_i t_i \log\big(\varepsilon + g_i(w, t_i)\big) + \rho\, t_i,\qquad
        g_i = \mathbb E_{j \ne i}\, e^{d_{ij}/t_i},\quad d_{ij} = s_{ij} - s_{ii}

    (raw similarities :math:`s`). As in :class:`SogCLR` a moving average
    :math:`u_i` of the batch estimate of :math:`g_i` enters the gradients:
    the model's is :math:`\frac{t_i}{\varepsilon + u_i}\nabla g_i`, the
    temperature's is

    .. math::

        \log(\varepsilon + u_i) + \rho - \frac{1}{\varepsilon + u_i}\,
            \mathbb E_j\, e^{d_{ij}/t_i}\, \frac{d_{ij}}{t_i},

    applied per sample by ``temperature_optimizer`` and projected onto
    ``[t_min, t_max]``. A larger ``rho`` pushes temperatures down. The last
    term is evaluated as :math:`\frac{g_i}{\varepsilon + u_i}(\bar S_i - s_i)`
    with the negatives' softmax-mean score :math:`\bar S_i`, finite at t = 0.01.

    The temperature optimizers (``G`` the gradient above, clipped to
    ``[-c, c]`` when ``temperature_grad_clip = c`` is given):

    * ``"momentum"`` (the default, the paper's Algorithm 1): a moving
      average of the gradient, ``m <- (1 - beta) m + beta G``, then
      ``t <- t - lr m``; ``temperature_beta = 0.5`` is the original code's
      ``beta_u``. The original iSogCLR code is this with
      ``temperature_grad_clip=5``.
    * ``"fastclip"`` (FastCLIP's ``FastCLIPLossIndividual``): Adam's moments
      with ``betas``, but bias-corrected by the epoch (``1 - beta^(e+1)``,
      the betas 0 during epoch 0) and no square root on the second moment:
      ``t <- t - lr m^ / (v^ + 1e-8)``; FastCLIP clips at 5.
    * ``"adam"`` (this project's former default): textbook Adam with
      ``betas``, bias-corrected by each sample's own number of updates.

    Defaults: initial temperature 0.07, rho = 6.5 (FastCLIP's image-text
    setting), t in [0.01, 1], momentum with lr 0.01 and beta 0.5, no clip,
    gamma = 0.8, eps = 1e-8. The reported value is the batch's objective
    including :math:`\rho t_i`.

    Example::

        loss = ISogCLR(num_samples=len(dataset), rho=6.5)
        value = loss(image_features, text_features, index=batch_indices)
    """

    name = "isogclr"
    papers = ("qiu2023isogclr", "wei2024fastclip")

    def __init__(
        self,
        num_samples: int | tuple[int, int],
        *,
        temperature: float = 0.07,
        rho: float = 6.5,
        temperature_min: float = 0.01,
        temperature_max: float = 1.0,
        temperature_lr: float = 0.01,
        temperature_optimizer: str = "momentum",
        temperature_beta: float = 0.5,
        temperature_grad_clip: float | None = None,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        **options,
    ) -> None:
        self.temperature_min = check_range("temperature_min", temperature_min, 0.0, low_open=True)
        self.temperature_max = check_range("temperature_max", temperature_max, temperature_min)
        self.initial_temperature = check_range("temperature", temperature, temperature_min, temperature_max)
        super().__init__(num_samples, temperature=temperature, **options)
        self.rho = check_range("rho", rho, 0.0)
        self.temperature_lr = check_range("temperature_lr", temperature_lr, 0.0)
        self.temperature_optimizer = check_choice(
            "temperature_optimizer", temperature_optimizer, TEMPERATURE_OPTIMIZERS
        )
        self.temperature_beta = check_range("temperature_beta", temperature_beta, 0.0, 1.0, low_open=True)
        self.temperature_grad_clip = (
            None
            if temperature_grad_clip is None
            else check_range("temperature_grad_clip", temperature_grad_clip, 0.0, low_open=True)
        )
        self.betas = tuple(check_range(f"betas[{k}]", beta, 0.0, 1.0, high_open=True) for k, beta in enumerate(betas))
        self.eps = check_range("eps", eps, 0.0, low_open=True)

    def state_fields(self) -> dict[str, float]:
        return {"log_u": -math.inf, "tau": self.initial_temperature, "tau_m": 0.0, "tau_v": 0.0, "tau_steps": 0.0}

    def side_scores(self, state: dict[str, Tensor], temperature: float) -> tuple[Tensor, None]:
        return 1.0 / state["tau"], None

    def direction_loss(self, direction: Direction) -> DirectionResult:
        scores, rows = direction.scores, direction.row_state
        tau = rows["tau"]
        log_g = log_negative_mean(scores)
        log_u = log_moving_average(rows["log_u"], log_g.detach(), self.gamma)
        log_eps = torch.tensor(math.log(self.eps), dtype=log_g.dtype)
        values = tau * (torch.logaddexp(log_eps, log_g) + self.rho)
        log_eps_plus_u = log_denominator(log_eps, log_u)
        surrogates = tau * weighted_surrogate(log_g, log_eps_plus_u)
        with torch.no_grad():
            slope = torch.exp(log_g - log_eps_plus_u) * (scores.negative_mean_score() - scores.positive_logit())
            gradient = log_eps_plus_u + self.rho - slope
            if self.temperature_grad_clip is not None:
                gradient = gradient.clamp(-self.temperature_grad_clip, self.temperature_grad_clip)
            updates = self.temperature_step(rows, gradient)
            updates["tau"] = updates["tau"].clamp(self.temperature_min, self.temperature_max)
        return DirectionResult(values, surrogates, row_updates={"log_u": log_u, **updates})

    def needs_epoch(self) -> bool:
        return super().needs_epoch() or self.temperature_optimizer == "fastclip"

    def temperature_step(self, rows: dict[str, Tensor], gradient: Tensor) -> dict[str, Tensor]:
        """The new temperature rows (before the projection) and optimizer moments, by ``temperature_optimizer``."""
        tau, lr = rows["tau"], self.temperature_lr
        steps = rows["tau_steps"] + 1
        if self.temperature_optimizer == "momentum":
            first = (1 - self.temperature_beta) * rows["tau_m"] + self.temperature_beta * gradient
            return {"tau": tau - lr * first, "tau_m": first, "tau_steps": steps}
        beta1, beta2 = self.betas
        if self.temperature_optimizer == "fastclip":
            epoch = math.floor(self._current_epoch())
            if epoch == 0:
                beta1 = beta2 = 0.0
            first = beta1 * rows["tau_m"] + (1 - beta1) * gradient
            second = beta2 * rows["tau_v"] + (1 - beta2) * gradient.square()
            corrected = (first / (1 - beta1 ** (epoch + 1))) / (second / (1 - beta2 ** (epoch + 1)) + 1e-8)
            return {"tau": tau - lr * corrected, "tau_m": first, "tau_v": second, "tau_steps": steps}
        first = beta1 * rows["tau_m"] + (1 - beta1) * gradient
        second = beta2 * rows["tau_v"] + (1 - beta2) * gradient.square()
        step = lr * (first / (1 - beta1**steps)) / (torch.sqrt(second / (1 - beta2**steps)) + 1e-8)
        return {"tau": tau - step, "tau_m": first, "tau_v": second, "tau_steps": steps}

    def extra_repr(self) -> str:
        return (
            f"rho={self.rho}, temperature in [{self.temperature_min}, {self.temperature_max}], "
            f"temperature_lr={self.temperature_lr}, temperature_optimizer={self.temperature_optimizer!r}, "
            f"{super().extra_repr()}"
        )
