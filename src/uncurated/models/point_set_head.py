"""The head that turns a token sequence into a weighted point set (Uesaka et al. 2025, Sec. 5.3, App. A.1)."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..model_defaults import WEIGHT_ACTIVATION as DEFAULT_WEIGHT_ACTIVATION
from ..model_defaults import WEIGHT_ACTIVATIONS
from ..similarity import WeightedPointSet
from ..validation import check_choice, check_integer, check_range

#: The bound of the weights (100 in the paper: without a bound the parameters diverged).
DEFAULT_WEIGHT_SCALE = 100.0


class PointSetHead(nn.Module):
    """Projects every token to an L2-normalized point and, in parallel, to a scalar weight.

    Weights are bounded by ``scale * tanh(x / scale)`` (100 in the paper:
    without a bound the parameters diverged) and may be negative; the
    ``"sigmoid"`` activation, ``scale * sigmoid(x / scale)``, is the paper's
    positive-weight ablation (it collapsed or diverged there); ``"ones"``
    gives every point weight 1 and learns no weights (one point of weight 1
    with the linear kernel is CLIP's cosine similarity). Weights are never
    normalized. The weight projection has no bias and starts with standard
    deviation ``width^-1/2``, as in the official code.

    ``positions=M`` adds a learned embedding per position to the tokens first
    (std 0.02 at the start, ViT's), for tokens that do not know where they are:
    the cells of a convolutional feature map, whose set would otherwise lose
    the image's layout (a ViT's tokens carry position embeddings).

    Args:
        width: the tokens' feature size.
        dim: the points' dimension d.
        weight_activation: one of :data:`WEIGHT_ACTIVATIONS` (default ``"tanh"``).
        weight_scale: the bound of the weights, > 0 (default 100).
        positions: the number of token positions to embed, >= 0 (default 0: none); calls must then pass
            exactly that many tokens.

    Call with tokens (B, M, width) and an optional boolean mask (B, M) of
    real tokens; returns a :class:`~uncurated.similarity.WeightedPointSet`.
    """

    def __init__(
        self,
        width: int,
        dim: int,
        *,
        weight_activation: str = DEFAULT_WEIGHT_ACTIVATION,
        weight_scale: float = DEFAULT_WEIGHT_SCALE,
        positions: int = 0,
    ) -> None:
        super().__init__()
        for name, value in (("width", width), ("dim", dim)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be an integer >= 1, got {value!r}")
        self.weight_activation = check_choice("weight_activation", weight_activation, WEIGHT_ACTIVATIONS)
        self.weight_scale = check_range("weight_scale", weight_scale, 0.0, low_open=True)
        self.points = nn.Linear(width, dim)
        self.weights = None if weight_activation == "ones" else nn.Linear(width, 1, bias=False)
        if self.weights is not None:
            nn.init.normal_(self.weights.weight, std=1.0 / math.sqrt(width))
        positions = check_integer("positions", positions, 0)
        self.positions = nn.Parameter(0.02 * torch.randn(positions, width)) if positions else None

    def forward(self, tokens: Tensor, mask: Tensor | None = None) -> WeightedPointSet:
        if tokens.ndim != 3:
            raise ValueError(f"tokens must have shape (batch, M, width), got {tuple(tokens.shape)}")
        if self.positions is not None:
            if tokens.shape[1] != len(self.positions):
                raise ValueError(f"tokens must have {len(self.positions)} positions (positions), got {tokens.shape[1]}")
            tokens = tokens + self.positions.to(tokens.dtype)
        points = F.normalize(self.points(tokens), dim=-1)
        if self.weights is None:
            return WeightedPointSet(points.new_ones(points.shape[:2]), points, mask)
        raw = self.weights(tokens).squeeze(-1) / self.weight_scale
        squash = torch.tanh if self.weight_activation == "tanh" else torch.sigmoid
        return WeightedPointSet(self.weight_scale * squash(raw), points, mask)
