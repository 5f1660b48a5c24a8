"""Whether a run's encoders train under bf16 autocast (``precision``); the objective always runs in float32."""

from __future__ import annotations

import torch

from ..validation import check_choice
from .sections import PRECISIONS
from .setting import ConfigError


def autocast_bf16(precision: str, device: torch.device, fsdp_mixed_precision: str) -> bool:
    """Whether the encoders run under bf16 autocast: ``precision=bf16``, or ``auto`` on CUDA, unless FSDP2's
    mixed-precision policy (``fsdp_mixed_precision``) computes them in bf16 already: then ``auto`` is no autocast,
    and ``bf16`` is refused. Autocast over the policy would not be the policy's arithmetic: it recasts the bf16
    parameters' inputs of the operations it keeps in float32 (normalizations, softmax), two roundings at once."""
    check_choice("precision", precision, PRECISIONS)
    if fsdp_mixed_precision != "none":
        if precision == "bf16":
            raise ConfigError(
                f"precision=bf16 (autocast) and fsdp_mixed_precision={fsdp_mixed_precision} (FSDP2's policy) both "
                "compute the encoders in bf16: choose one, precision=fp32 or auto with the policy, or "
                "fsdp_mixed_precision=none with autocast"
            )
        return False
    return precision == "bf16" or (precision == "auto" and device.type == "cuda")
