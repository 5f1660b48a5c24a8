"""Weighted point sets: an embedding made of M (weight, point) pairs (Uesaka et al. 2025, Sec. 5.2)."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor


@dataclass(frozen=True)
class WeightedPointSet:
    """A batch of weighted point sets: ``weights`` (B, M) real (possibly negative) and ``points`` (B, M, d).

    ``mask`` (B, M), optional, marks the points that exist; a masked point
    counts as weight 0, as does any point of weight 0 (padding). The two
    sides of a pair may have different M.
    """

    weights: Tensor
    points: Tensor
    mask: Tensor | None = None

    def __post_init__(self) -> None:
        weights, points, mask = self.weights, self.points, self.mask
        if not isinstance(weights, Tensor) or weights.ndim != 2:
            raise ValueError(f"weights must have shape (batch, M), got {getattr(weights, 'shape', weights)}")
        if not isinstance(points, Tensor) or points.ndim != 3 or points.shape[:2] != weights.shape:
            raise ValueError(
                f"points must have shape (batch, M, dim) matching weights {tuple(weights.shape)}, "
                f"got {getattr(points, 'shape', points)}"
            )
        if not (weights.is_floating_point() and points.is_floating_point()):
            raise ValueError(f"weights and points must be floating point, got {weights.dtype} and {points.dtype}")
        if mask is not None and (mask.shape != weights.shape or mask.dtype != torch.bool):
            raise ValueError(
                f"mask must be a boolean tensor of shape {tuple(weights.shape)}, got {mask.dtype} {tuple(mask.shape)}"
            )
        for name, value in (("weights", weights), ("points", points)):
            if not bool(torch.isfinite(value).all()):
                raise ValueError(f"{name} contains non-finite values (NaN or inf)")

    @property
    def batch_size(self) -> int:
        return self.weights.shape[0]

    @property
    def size(self) -> int:
        """M, the number of (possibly padded) points per set."""
        return self.weights.shape[1]

    @property
    def dim(self) -> int:
        return self.points.shape[2]

    def counts(self) -> Tensor:
        """(B,) the number of points of each set: M, or the points its mask keeps (at least 1)."""
        if self.mask is None:
            return torch.full((self.batch_size,), self.size, dtype=self.weights.dtype, device=self.weights.device)
        return self.mask.sum(dim=1).clamp_min(1).to(self.weights.dtype)

    def effective_weights(self) -> Tensor:
        """(B, M) weights with masked points set to 0."""
        return self.weights if self.mask is None else torch.where(self.mask, self.weights, 0.0)

    @classmethod
    def single(cls, vectors: Tensor) -> WeightedPointSet:
        """One point of weight 1 per row of (B, d) ``vectors``: CLIP's embedding as a point set."""
        return cls(torch.ones(vectors.shape[0], 1, dtype=vectors.dtype, device=vectors.device), vectors[:, None, :])
