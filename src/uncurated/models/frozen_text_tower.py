"""A frozen caption encoder with a trainable linear projection: the text tower of locked-tower tuning."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor, nn

from ..validation import check_integer


class FrozenTextTower(nn.Module):
    """``Linear(encoder(captions))`` with the encoder frozen and only the projection trained.

    This is the locked-tower setting of LiT (Zhai et al. 2022) with the text
    side locked: a pretrained sentence encoder supplies caption embeddings,
    and contrastive training fits the image encoder and a linear map into
    its space. The encoder runs without gradient and stays in eval mode
    whatever ``train()`` sets; its parameters, if any, are frozen.

    Args:
        encoder: a module mapping a list of B captions to features (B, feature_dim),
            with a ``feature_dim`` attribute, such as :class:`~uncurated.models.MiniLMTextEncoder`.
        out_dim: the size of the embeddings, >= 1.

    Attributes:
        out_dim: the size of the output.

    Call with a list of B captions; returns (B, out_dim) on the projection's device.
    """

    def __init__(self, encoder: nn.Module, out_dim: int) -> None:
        super().__init__()
        feature_dim = getattr(encoder, "feature_dim", None)
        if not isinstance(encoder, nn.Module) or isinstance(feature_dim, bool) or not isinstance(feature_dim, int):
            raise ValueError(f"encoder must be an nn.Module with an integer feature_dim, got {type(encoder).__name__}")
        self.out_dim = check_integer("out_dim", out_dim, 1)
        self.encoder = encoder.requires_grad_(False).eval()
        self.projection = nn.Linear(feature_dim, self.out_dim)

    def train(self, mode: bool = True) -> FrozenTextTower:
        super().train(mode)
        self.encoder.eval()
        return self

    def forward(self, captions: Sequence[str]) -> Tensor:
        with torch.no_grad():
            features = self.encoder(captions)
        return self.projection(features.to(self.projection.weight))
