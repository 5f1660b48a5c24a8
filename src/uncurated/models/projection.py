"""The projection head between an encoder's features and the contrastive objective (SimCLR, CLIP)."""

from __future__ import annotations

from torch import Tensor, nn

from ..model_defaults import PROJECTION_DIM as DEFAULT_DIM
from ..model_defaults import PROJECTION_LAYERS as DEFAULT_LAYERS
from ..validation import check_choice, check_integer
from .mlp import NORMS

LAYER_COUNTS = (1, 2)


class ProjectionHead(nn.Module):
    """Maps encoder features to the embeddings an objective scores.

    * ``layers=2`` (default): SimCLR's head, ``Linear -> BatchNorm1d -> ReLU -> Linear``
      (``norm="none"``: ``Linear -> ReLU -> Linear``, the first linear map biased).
      The objective sees the projection and downstream tasks read the encoder's
      features before it, which SimCLR found to transfer better.
    * ``layers=1``: a single ``Linear``, CLIP's projection.

    With ``norm="none"`` (or ``layers=1``) each sample's embedding depends on that
    sample alone, so a batch embedded in parts (micro-batches, several processes)
    gives the embeddings of the whole batch; batch norm normalizes each part with
    its own statistics.

    The output is not normalized: the objectives normalize it themselves
    (``normalize=True``, their default).

    Args:
        in_dim: the size of the encoder's features, >= 1.
        out_dim: the size of the embeddings, >= 1 (default 128).
        hidden_dim: the hidden size of the two-layer head, >= 1 (default ``in_dim``);
            ignored by the one-layer head.
        layers: 1 or 2 (default 2).
        norm: ``"batch"`` (default) or ``"none"``: the two-layer head's normalization.

    Attributes:
        out_dim: the size of the output.

    Call with features (B, in_dim); returns (B, out_dim).
    """

    def __init__(
        self,
        in_dim: int,
        out_dim: int = DEFAULT_DIM,
        *,
        hidden_dim: int | None = None,
        layers: int = DEFAULT_LAYERS,
        norm: str = "batch",
    ) -> None:
        super().__init__()
        self.in_dim = check_integer("in_dim", in_dim, 1)
        self.out_dim = check_integer("out_dim", out_dim, 1)
        if isinstance(layers, bool) or not isinstance(layers, int) or layers not in LAYER_COUNTS:
            raise ValueError(f"layers must be 1 or 2, got {layers!r}")
        self.layers = layers
        batch_norm = check_choice("norm", norm, NORMS) == "batch"
        if layers == 1:
            self.net: nn.Module = nn.Linear(self.in_dim, self.out_dim)
            return
        hidden_dim = self.in_dim if hidden_dim is None else check_integer("hidden_dim", hidden_dim, 1)
        self.net = nn.Sequential(
            nn.Linear(self.in_dim, hidden_dim, bias=not batch_norm),
            nn.BatchNorm1d(hidden_dim) if batch_norm else nn.Identity(),
            nn.ReLU(inplace=True),
            nn.Linear(hidden_dim, self.out_dim),
        )

    def forward(self, features: Tensor) -> Tensor:
        if features.ndim != 2 or features.shape[1] != self.in_dim:
            raise ValueError(f"features must have shape (batch, {self.in_dim}), got {tuple(features.shape)}")
        return self.net(features)
