"""The learning-rate schedule: linear warmup, then cosine decay to zero."""

from __future__ import annotations

import math


def warmup_cosine(step: int, total_steps: int, warmup_steps: int) -> float:
    """The factor on the base learning rate at ``step`` (0-based) of ``total_steps``."""
    if warmup_steps > 0 and step < warmup_steps:
        return (step + 1) / warmup_steps
    progress = (step - warmup_steps) / max(total_steps - warmup_steps, 1)
    return 0.5 * (1.0 + math.cos(math.pi * min(progress, 1.0)))
