"""Temperature of a contrastive objective, fixed or learned as CLIP's logit scale."""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from ..validation import check_range

MAX_LOGIT_SCALE = 100.0


class Temperature(nn.Module):
    """The temperature ``t`` of the scores ``cos / t``.

    Fixed by default. With ``learnable=True`` it is learned through CLIP's
    parametrization, the log inverse temperature ``log(1/t)`` (``ln(1/0.07)`` =
    2.6593 for CLIP's initial 0.07), and the inverse temperature is kept at
    most 100 (``t >= 0.01``): at every call, a value the optimizer pushed past
    the bound is set back to it, like open_clip's clamp after each step, so the
    gradient keeps acting on it.

    Args:
        temperature: the (initial) temperature, > 0; >= 0.01 when learnable.
        learnable: learn it as a parameter named ``log_inverse``.
    """

    def __init__(self, temperature: float, learnable: bool = False) -> None:
        super().__init__()
        check_range("temperature", temperature, 0.0, low_open=True)
        self.learnable = bool(learnable)
        log_inverse = torch.tensor(-math.log(temperature), dtype=torch.get_default_dtype())
        if self.learnable:
            check_range("temperature", temperature, 1.0 / MAX_LOGIT_SCALE)
            self.log_inverse = nn.Parameter(log_inverse)
        else:
            self.register_buffer("log_inverse", log_inverse)

    def forward(self) -> Tensor:
        """The current temperature as a scalar tensor (differentiable when learnable)."""
        if self.learnable:
            with torch.no_grad():
                self.log_inverse.clamp_(max=math.log(MAX_LOGIT_SCALE))
        return torch.exp(-self.log_inverse)

    def extra_repr(self) -> str:
        return f"temperature={float(torch.exp(-self.log_inverse)):.4g}, learnable={self.learnable}"
