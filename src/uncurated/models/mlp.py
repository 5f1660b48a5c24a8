"""A multilayer perceptron encoder on flattened inputs: the cheapest baseline image encoder."""

from __future__ import annotations

import math

from torch import Tensor, nn

from ..model_defaults import NORMS
from ..validation import check_choice, check_integer, check_sizes


class MLP(nn.Module):
    """Flattens each input and applies ``Linear -> BatchNorm1d -> ReLU`` once per width.

    Every layer, the last included, ends with batch norm and ReLU, so the
    output is a feature vector like a ResNet's pooled features, meant to be
    followed by a :class:`~uncurated.models.ProjectionHead`.

    Args:
        in_features: the size of a flattened input, >= 1 (784 for 28 x 28 grayscale).
        widths: the sizes of the layers, integers >= 1 (default ``(512, 256)``).
        norm: ``"batch"`` (default) or ``"none"`` (biased linear layers and no
            normalization: its output does not depend on the rest of the batch,
            which distributed runs on CPU need to match one process exactly).

    Attributes:
        feature_dim: ``widths[-1]``, the size of the output.

    Call with inputs (B, ...) of ``in_features`` elements each (for example
    images (B, 1, 28, 28)); returns (B, feature_dim).
    """

    def __init__(self, in_features: int, widths: tuple[int, ...] = (512, 256), *, norm: str = "batch") -> None:
        super().__init__()
        self.in_features = check_integer("in_features", in_features, 1)
        widths = check_sizes("widths", widths)
        batch_norm = check_choice("norm", norm, NORMS) == "batch"
        layers: list[nn.Module] = []
        size = self.in_features
        for width in widths:
            layers.append(nn.Linear(size, width, bias=not batch_norm))
            if batch_norm:
                layers.append(nn.BatchNorm1d(width))
            layers.append(nn.ReLU(inplace=True))
            size = width
        self.layers = nn.Sequential(*layers)
        self.feature_dim = widths[-1]

    def forward(self, x: Tensor) -> Tensor:
        if x.ndim < 2 or math.prod(x.shape[1:]) != self.in_features:
            raise ValueError(
                f"inputs must have shape (batch, ...) with {self.in_features} elements per sample, got {tuple(x.shape)}"
            )
        return self.layers(x.flatten(1))
