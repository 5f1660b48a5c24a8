"""Models whose embeddings are weighted point sets (WPSE, Uesaka et al. 2025) turned into vectors by random features.

Every encoder token becomes a weighted point (:class:`PointSetHead`); the
sets of one call share one random-feature draw (:class:`WPSEmbedding`), so
the vectors of both sides of a batch are comparable. The objectives take the
vectors unchanged, with ``normalize=False``.

``points="pooled"`` makes the encoder's pooled features the only point of
each set instead (M = 1): with weight 1 and the linear kernel, that is CLIP
on the same towers, the first rung of a ladder from CLIP to WPSE.
"""

from __future__ import annotations

from typing import cast

from torch import Tensor, nn

from ..model_defaults import POINTS
from ..similarity import WPSEmbedding
from ..validation import check_choice
from .encoders import ImageTokenEncoder, TextTokenEncoder
from .feature_layers import encoder_features
from .point_set_head import PointSetHead


class PointSetImageModel(nn.Module):
    """An image encoder whose tokens (a ResNet's last feature map's cells) are the points (two-view training).

    ``points``: ``"tokens"`` (default) or ``"pooled"`` (the module's documentation).
    """

    def __init__(self, encoder: nn.Module, head: PointSetHead, embedding: WPSEmbedding, points: str = "tokens") -> None:
        super().__init__()
        self.encoder = encoder
        self.head = head
        self.embedding = embedding
        self.points = check_choice("points", points, POINTS)

    def features(self, images: Tensor, layer: str = "encoder") -> Tensor:
        return encoder_features(self.encoder, images, layer)

    def embed_views(self, first: Tensor, second: Tensor) -> tuple[Tensor, Tensor]:
        return self.embedding(self.point_set(first), self.point_set(second))

    def point_set(self, images: Tensor):
        """The images' weighted point sets, before the random features."""
        tokens = (
            self.encoder(images)[:, None]
            if self.points == "pooled"
            else cast(ImageTokenEncoder, self.encoder).tokens(images)
        )
        return self.head(tokens)


class PointSetImageTextModel(nn.Module):
    """Image cells and caption tokens as weighted point sets, compared by the WPS similarity (Uesaka et al. 2025)."""

    #: How the evaluation scores an image against a text: the dot product of the Eq. 8 vectors (never normalized).
    similarity = "dot"

    def __init__(
        self,
        image_encoder: nn.Module,
        image_head: PointSetHead,
        text_encoder: nn.Module,
        text_head: PointSetHead,
        embedding: WPSEmbedding,
        points: str = "tokens",
    ) -> None:
        super().__init__()
        self.image = PointSetImageModel(image_encoder, image_head, embedding, points)
        self.text_encoder = text_encoder
        self.text_head = text_head

    def features(self, images: Tensor, layer: str = "encoder") -> Tensor:
        return self.image.features(images, layer)

    @property
    def embedding(self) -> WPSEmbedding:
        return self.image.embedding

    def forward(self, images: Tensor, captions: list[str]) -> tuple[Tensor, Tensor]:
        return self.embedding(self.image.point_set(images), self.text_point_set(captions))

    def embed_images(self, images: Tensor) -> Tensor:
        return self.embedding(self.image.point_set(images))[0]

    def embed_texts(self, captions: list[str]) -> Tensor:
        return self.embedding(self.text_point_set(captions))[0]

    def text_point_set(self, captions: list[str]):
        """The captions' weighted point sets, before the random features."""
        weight = self.text_head.points.weight  # a frozen encoder may run elsewhere (MiniLM: on the CPU)
        if self.image.points == "pooled":
            return self.text_head(self.text_encoder(captions).to(weight)[:, None])
        tokens, mask = cast(TextTokenEncoder, self.text_encoder).tokens(captions)
        return self.text_head(tokens.to(weight), mask.to(weight.device))
