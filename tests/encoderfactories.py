"""Encoders of a user's own, built by the factories that ``image_encoder=python:encoderfactories:small_cnn``
and ``text_encoder=python:encoderfactories:bag_of_bytes`` name in the tests."""

from __future__ import annotations

import torch
from torch import nn


class SmallCNN(nn.Module):
    """One convolution and global average pooling; no ``feature_dim``, so the trainer measures it."""

    def __init__(self, width: int) -> None:
        super().__init__()
        self.width = width
        self.conv = nn.LazyConv2d(width, 3, padding=1)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.conv(images)).mean(dim=(2, 3))


def small_cnn(width: int = 8) -> nn.Module:
    return SmallCNN(width)


class BagOfBytes(nn.Module):
    """The mean embedding of a caption's UTF-8 bytes."""

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.feature_dim = dim
        self.embedding = nn.EmbeddingBag(256, dim)

    def forward(self, captions: list[str]) -> torch.Tensor:
        encoded = [torch.tensor(list(caption.encode()) or [0]) for caption in captions]
        offsets = torch.tensor([0, *torch.tensor([len(e) for e in encoded]).cumsum(0)[:-1].tolist()])
        return self.embedding(
            torch.cat(encoded).to(self.embedding.weight.device), offsets.to(self.embedding.weight.device)
        )


def bag_of_bytes(dim: int = 16) -> nn.Module:
    return BagOfBytes(dim)
