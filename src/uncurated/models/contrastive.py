"""The models a training run optimizes: an image tower, and an image tower with a text tower."""

from __future__ import annotations

from torch import Tensor, nn

from .feature_layers import encoder_features
from .projection import ProjectionHead
from .subword_tokenizer import SubwordTokenizer
from .text_transformer import TextTransformer


class ImageTower(nn.Module):
    """An image encoder followed by a projection head.

    ``forward`` returns the projections the objective sees; ``features`` what
    linear probes read: the encoder's output (SimCLR's practice) or, for an
    encoder with stages (the ResNet), every stage's pooled features side by
    side.
    """

    def __init__(self, encoder: nn.Module, projection: ProjectionHead) -> None:
        super().__init__()
        self.encoder = encoder
        self.projection = projection

    def features(self, images: Tensor, layer: str = "encoder") -> Tensor:
        return encoder_features(self.encoder, images, layer)

    def forward(self, images: Tensor) -> Tensor:
        return self.projection(self.encoder(images))

    def embed_views(self, first: Tensor, second: Tensor) -> tuple[Tensor, Tensor]:
        """The embeddings of two views of a batch (what a two-view objective compares)."""
        return self(first), self(second)


class CaptionEncoder(nn.Module):
    """A :class:`~uncurated.models.subword_tokenizer.SubwordTokenizer` and a :class:`TextTransformer`:
    captions in, pooled features out.

    The tokenizer travels with the module's ``state_dict`` (as extra state), so
    a saved model reads captions the way it was trained to; the word-level
    vocabulary of an earlier run loads as the equivalent tokenizer.
    """

    def __init__(self, tokenizer: SubwordTokenizer, transformer: TextTransformer, max_length: int) -> None:
        super().__init__()
        self.tokenizer = tokenizer
        self.transformer = transformer
        self.max_length = max_length
        self.feature_dim = transformer.feature_dim

    def forward(self, captions: list[str]) -> Tensor:
        return self.transformer(*self._encode(captions))

    def tokens(self, captions: list[str]) -> tuple[Tensor, Tensor]:
        """Every token's output (B, L, width) and the mask of real tokens (B, L), for point-set heads."""
        ids, mask = self._encode(captions)
        return self.transformer.tokens(ids, mask), mask

    def _encode(self, captions: list[str]) -> tuple[Tensor, Tensor]:
        device = next(self.transformer.parameters()).device
        ids, mask = self.tokenizer.encode(captions, self.max_length)
        return ids.to(device), mask.to(device)

    def get_extra_state(self) -> dict:
        return self.tokenizer.state_dict()

    def set_extra_state(self, state: dict) -> None:
        self.tokenizer = SubwordTokenizer.from_state_dict(state)


class TextTower(nn.Module):
    """A caption encoder (anything mapping a list of captions to features) followed by a projection head."""

    def __init__(self, encoder: nn.Module, projection: nn.Module) -> None:
        super().__init__()
        self.encoder = encoder
        self.projection = projection

    def forward(self, captions: list[str]) -> Tensor:
        return self.projection(self.encoder(captions))


class ImageTextModel(nn.Module):
    """Two towers into one embedding space (CLIP's layout), compared by the cosine of their embeddings."""

    #: How the evaluation scores an image against a text: the cosine of the embeddings.
    similarity = "cosine"

    def __init__(self, image: ImageTower, text: nn.Module) -> None:
        """``text``: captions (``list[str]``) to (B, d) embeddings, a :class:`TextTower` or a frozen one."""
        super().__init__()
        self.image = image
        self.text = text

    def features(self, images: Tensor, layer: str = "encoder") -> Tensor:
        return self.image.features(images, layer)

    def forward(self, images: Tensor, captions: list[str]) -> tuple[Tensor, Tensor]:
        return self.image(images), self.text(captions)

    def embed_images(self, images: Tensor) -> Tensor:
        return self.image(images)

    def embed_texts(self, captions: list[str]) -> Tensor:
        return self.text(captions)
