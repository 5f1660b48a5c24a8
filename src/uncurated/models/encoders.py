"""What the models ask of an encoder beyond being an ``nn.Module``, as protocols.

Encoders come from the package (ResNet, MLP, the caption transformer), from ``transformers`` (``hf:``) and from
the user (``python:``); the models need some of them to have one more method. ``isinstance(encoder, Protocol)``
checks that the method is there (the models refuse an encoder without it, naming what is missing), and tells the
type checker what the method returns.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from torch import Tensor


@runtime_checkable
class StagedEncoder(Protocol):
    """An image encoder that also gives the pooled features of each stage (the ResNet), for probes."""

    def forward_stages(self, images: Tensor, /) -> list[Tensor]: ...


@runtime_checkable
class ImageTokenEncoder(Protocol):
    """An image encoder that gives every token or feature-map cell (B, M, width), for point-set heads."""

    def __call__(self, images: Tensor, /) -> Tensor: ...

    def tokens(self, images: Tensor, /) -> Tensor: ...


@runtime_checkable
class TextTokenEncoder(Protocol):
    """A caption encoder that gives every token (B, L, width) and the mask of real tokens, for point-set heads."""

    def __call__(self, captions: list[str], /) -> Tensor: ...

    def tokens(self, captions: list[str], /) -> tuple[Tensor, Tensor]: ...


@runtime_checkable
class FeatureModel(Protocol):
    """A trained model as probes read it: the features of the layer they name (``"encoder"`` or ``"stages"``)."""

    def features(self, images: Tensor, layer: str = "encoder") -> Tensor: ...


@runtime_checkable
class TwoViewModel(Protocol):
    """A model of the two-view pipeline: the embeddings of two views of a batch."""

    def embed_views(self, first: Tensor, second: Tensor) -> tuple[Tensor, Tensor]: ...
