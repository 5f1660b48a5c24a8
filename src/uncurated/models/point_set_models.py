"""Models whose embeddings are weighted point sets (WPSE, Uesaka et al. 2025) turned into vectors by random features.

Every encoder token becomes a weighted point (:class:`PointSetHead`); the
sets of one call share one random-feature draw (:class:`WPSEmbedding`), so
the vectors of both sides of a batch are comparable. The objectives take the
vectors unchanged, with ``normalize=False``.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from ..similarity import WPSEmbedding
from ..validation import check_choice
from .contrastive import FEATURE_LAYERS
from .encoders import ImageTokenEncoder, StagedEncoder, TextTokenEncoder
from .point_set_head import PointSetHead


class PointSetImageModel(nn.Module):
    """A ResNet whose last feature map's cells are the points (two-view training)."""

    def __init__(self, encoder: ImageTokenEncoder, head: PointSetHead, embedding: WPSEmbedding) -> None:
        super().__init__()
        self.encoder = encoder
        self.head = head
        self.embedding = embedding

    def features(self, images: Tensor, layer: str = "encoder") -> Tensor:
        check_choice("layer", layer, FEATURE_LAYERS)
        if layer == "stages":
            if not isinstance(self.encoder, StagedEncoder):
                raise ValueError(f"layer='stages' needs an encoder with stages, not {type(self.encoder).__name__}")
            return torch.cat(self.encoder.forward_stages(images), dim=1)
        return self.encoder(images)

    def embed_views(self, first: Tensor, second: Tensor) -> tuple[Tensor, Tensor]:
        return self.embedding(self.head(self.encoder.tokens(first)), self.head(self.encoder.tokens(second)))


class PointSetImageTextModel(nn.Module):
    """Image cells and caption tokens as weighted point sets, compared by the WPS similarity (Uesaka et al. 2025)."""

    def __init__(
        self,
        image_encoder: ImageTokenEncoder,
        image_head: PointSetHead,
        text_encoder: TextTokenEncoder,
        text_head: PointSetHead,
        embedding: WPSEmbedding,
    ) -> None:
        super().__init__()
        self.image = PointSetImageModel(image_encoder, image_head, embedding)
        self.text_encoder = text_encoder
        self.text_head = text_head

    def features(self, images: Tensor, layer: str = "encoder") -> Tensor:
        return self.image.features(images, layer)

    def forward(self, images: Tensor, captions: list[str]) -> tuple[Tensor, Tensor]:
        return self.image.embedding(self._image_set(images), self._text_set(captions))

    def embed_images(self, images: Tensor) -> Tensor:
        return self.image.embedding(self._image_set(images))[0]

    def embed_texts(self, captions: list[str]) -> Tensor:
        return self.image.embedding(self._text_set(captions))[0]

    def _image_set(self, images: Tensor):
        return self.image.head(self.image.encoder.tokens(images))

    def _text_set(self, captions: list[str]):
        tokens, mask = self.text_encoder.tokens(captions)
        return self.text_head(tokens, mask)
