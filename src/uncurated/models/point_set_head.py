"""The head that turns a token sequence into a weighted point set (Uesaka et al. 2025, Sec. 5.3, App. A.1)."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..similarity import WeightedPointSet
from ..validation import check_choice, check_range

WEIGHT_ACTIVATIONS = ("tanh", "sigmoid")


class PointSetHead(nn.Module):
    """Projects every token to an L2-normalized point and, in parallel, to a scalar weight.

    Weights are bounded by ``scale * tanh(x / scale)`` (100 in the paper:
    without a bound the parameters diverged) and may be negative; the
    ``"sigmoid"`` activation, ``scale * sigmoid(x / scale)``, is the paper's
    positive-weight ablation (it collapsed or diverged there). Weights are never
    normalized. The weight projection has no bias and starts with standard
    deviation ``width^-1/2``, as in the official code.

    Args:
        width: the tokens' feature size.
        dim: the points' dimension d.
        weight_activation: ``"tanh"`` (default) or ``"sigmoid"``.
        weight_scale: the bound of the weights, > 0.

    Call with tokens (B, M, width) and an optional boolean mask (B, M) of
    real tokens; returns a :class:`~uncurated.similarity.WeightedPointSet`.
    """

    def __init__(self, width: int, dim: int, *, weight_activation: str = "tanh", weight_scale: float = 100.0) -> None:
        super().__init__()
        for name, value in (("width", width), ("dim", dim)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be an integer >= 1, got {value!r}")
        self.weight_activation = check_choice("weight_activation", weight_activation, WEIGHT_ACTIVATIONS)
        self.weight_scale = check_range("weight_scale", weight_scale, 0.0, low_open=True)
        self.points = nn.Linear(width, dim)
        self.weights = nn.Linear(width, 1, bias=False)
        nn.init.normal_(self.weights.weight, std=1.0 / math.sqrt(width))

    def forward(self, tokens: Tensor, mask: Tensor | None = None) -> WeightedPointSet:
        if tokens.ndim != 3:
            raise ValueError(f"tokens must have shape (batch, M, width), got {tuple(tokens.shape)}")
        points = F.normalize(self.points(tokens), dim=-1)
        raw = self.weights(tokens).squeeze(-1) / self.weight_scale
        squash = torch.tanh if self.weight_activation == "tanh" else torch.sigmoid
        return WeightedPointSet(self.weight_scale * squash(raw), points, mask)
