"""The training run's optimizer: AdamW over three parameter groups.

* the encoders, at ``lr`` with ``weight_decay``;
* the projection heads (parameters named ``projection`` or ``head``), at ``projection_lr`` (``lr`` when unset),
  with ``weight_decay``;
* the objective's own parameters (a learned temperature, SigLIP's bias), at ``lr`` without weight decay.

Empty groups are left out.
"""

from __future__ import annotations

import torch
from torch import nn

from .config import TrainConfig


def adamw(config: TrainConfig, model: nn.Module, objective: nn.Module) -> torch.optim.Optimizer:
    """AdamW over the trainable parameters of ``model`` and ``objective``, grouped as the module describes."""
    projection_lr = config.projection_lr or config.lr
    projections = [
        p for name, p in model.named_parameters() if ("projection" in name or "head" in name) and p.requires_grad
    ]
    projection_ids = {id(p) for p in projections}
    encoders = [p for p in model.parameters() if p.requires_grad and id(p) not in projection_ids]
    groups = [
        {"params": encoders, "lr": config.lr, "weight_decay": config.weight_decay},
        {"params": projections, "lr": projection_lr, "weight_decay": config.weight_decay},
        {"params": list(objective.parameters()), "lr": config.lr, "weight_decay": 0.0},
    ]
    return torch.optim.AdamW([group for group in groups if group["params"]])
