"""Temperature of a contrastive objective, fixed or learned (CLIP's log parametrization or WPSE's identity)."""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from ..validation import check_choice, check_range

MAX_INVERSE_TEMPERATURE = 100.0
MIN_INVERSE_TEMPERATURE = 1.0
PARAMETRIZATIONS = ("log", "identity")


class Temperature(nn.Module):
    """The temperature ``t`` of the scores ``similarity / t``.

    Fixed by default. With ``learnable=True`` it is learned through one of two
    parametrizations of the inverse temperature ``1/t``:

    * ``"log"`` (CLIP): the parameter ``log_inverse = log(1/t)`` (``ln(1/0.07)``
      = 2.6593 for CLIP's initial 0.07), ``1/t`` kept at most 100;
    * ``"identity"`` (WPSE, Uesaka et al. 2025, App. A.1): the parameter ``inverse = 1/t``
      itself, kept in [1, 100]; with the log form WPSE's ``1/t`` shot to the
      maximum early in training.

    At every call a value the optimizer pushed past its bound is set back to
    it (the effect of open_clip's clamp after each step), so the gradient keeps
    acting on it.

    Args:
        temperature: the (initial) temperature, > 0; in [0.01, 1] when
            learnable (>= 0.01 with the log form).
        learnable: learn it as a parameter.
        parametrization: ``"log"`` or ``"identity"`` (learnable only).
    """

    def __init__(self, temperature: float, learnable: bool = False, parametrization: str = "log") -> None:
        super().__init__()
        self._fixed: tuple[tuple[int, int], float] | None = None
        check_range("temperature", temperature, 0.0, low_open=True)
        self.learnable = bool(learnable)
        self.parametrization = check_choice("parametrization", parametrization, PARAMETRIZATIONS)
        low = 1.0 / MAX_INVERSE_TEMPERATURE
        if self.parametrization == "identity":
            if not self.learnable:
                raise ValueError("parametrization='identity' applies to a learnable temperature")
            check_range("temperature", temperature, low, 1.0 / MIN_INVERSE_TEMPERATURE)
            self.inverse = nn.Parameter(torch.tensor(1.0 / temperature, dtype=torch.get_default_dtype()))
            return
        if self.learnable:
            check_range("temperature", temperature, low)
            self.log_inverse = nn.Parameter(torch.tensor(-math.log(temperature), dtype=torch.get_default_dtype()))
        else:
            # float64, so that a fixed temperature is the configured number to 1e-16 (the global objectives' t)
            self.register_buffer("log_inverse", torch.tensor(-math.log(temperature), dtype=torch.float64))

    def _load_from_state_dict(self, state_dict, prefix, *args) -> None:
        if not self.learnable and prefix + "log_inverse" not in state_dict:
            return  # a fixed temperature is configuration: the global objectives saved none before it was a module
        super()._load_from_state_dict(state_dict, prefix, *args)

    def fixed_value(self) -> float:
        """A fixed temperature as a Python number, equal to ``float(self())``, read from the device once and
        again only after its buffer changes (a load, an in-place write): the global objectives compute with it at
        every call, so a read per call would stall a GPU. ``ValueError`` for a learnable temperature."""
        if self.learnable:
            raise ValueError("fixed_value: the temperature is learnable; call the module for its current value")
        key = (id(self.log_inverse), self.log_inverse._version)
        if self._fixed is None or self._fixed[0] != key:
            self._fixed = (key, float(torch.exp(-self.log_inverse)))
        return self._fixed[1]

    def forward(self) -> Tensor:
        """The current temperature as a scalar tensor (differentiable when learnable)."""
        if self.parametrization == "identity":
            with torch.no_grad():
                self.inverse.clamp_(MIN_INVERSE_TEMPERATURE, MAX_INVERSE_TEMPERATURE)
            return 1.0 / self.inverse
        if self.learnable:
            with torch.no_grad():
                self.log_inverse.clamp_(max=math.log(MAX_INVERSE_TEMPERATURE))
        return torch.exp(-self.log_inverse)

    def extra_repr(self) -> str:
        return (
            f"temperature={float(self().detach()):.4g}, learnable={self.learnable}, "
            f"parametrization={self.parametrization!r}"
        )
