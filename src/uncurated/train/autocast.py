"""Whether a run's encoders train under bf16 autocast (``precision``); the objective always runs in float32."""

from __future__ import annotations

import torch

from ..validation import check_choice
from .sections import PRECISIONS


def autocast_bf16(precision: str, device: torch.device) -> bool:
    """Whether the encoders run under bf16 autocast: ``precision=bf16``, or ``auto`` on CUDA."""
    check_choice("precision", precision, PRECISIONS)
    return precision == "bf16" or (precision == "auto" and device.type == "cuda")
