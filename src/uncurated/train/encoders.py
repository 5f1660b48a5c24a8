"""A trained run's encoders for inference: ``uncurated.load_model(run)``.

Loaded from the run's folder alone (:func:`~uncurated.train.restore.load_run`), the towers embed images and, for an
image-text run, captions into the space they were trained in, as open_clip's ``encode_image`` and ``encode_text``
do. The image transform reads an image file as the run's training data was read (its channels, its size, its resize
rule), so that a picture on disk becomes what the image tower takes; the text tower tokenizes captions itself.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import Tensor, nn

from ..data import BadSample
from ..data.decode import decode_caption, decode_image, read_file
from .builders import image_resize
from .config import TrainConfig
from .restore import load_run


@dataclass(frozen=True)
class ImageTransform:
    """An image file (a path or its bytes) to the float32 (C, H, W) tensor in [0, 1] the image tower takes: decoded
    to the run's channels (``L`` for one, ``RGB`` for three) and resized to its training images' size."""

    mode: str
    size: tuple[int, int]
    resize: str

    def __call__(self, image: str | os.PathLike | bytes) -> Tensor:
        try:
            return decode_image(
                image if isinstance(image, bytes) else read_file(image), self.mode, self.size, self.resize
            )
        except BadSample as error:
            raise ValueError(f"image {image if not isinstance(image, bytes) else '(bytes)'}: {error}") from None


@dataclass
class Encoders:
    """A trained run's towers on ``device``, in eval mode: :meth:`embed_images`, :meth:`embed_texts` and the
    transforms that turn files and captions into their inputs."""

    model: nn.Module
    config: TrainConfig
    image_transform: ImageTransform
    device: torch.device

    @property
    def has_text(self) -> bool:
        """Whether the run has a text tower (``pipeline=image_text``)."""
        return hasattr(self.model, "embed_texts")

    @torch.no_grad()
    def embed_images(self, images: Tensor | list[str | os.PathLike | bytes], *, normalize: bool = False) -> Tensor:
        """(B, d) embeddings of ``images``: a (B, C, H, W) float tensor in [0, 1], or image files, each read by
        :attr:`image_transform`; ``normalize``: L2-normalized (what the objectives compare)."""
        if not isinstance(images, Tensor):
            images = torch.stack([self.image_transform(image) for image in images])
        embed = getattr(self.model, "embed_images", self.model)
        return _maybe_normalized(embed(images.to(self.device)), normalize)

    @torch.no_grad()
    def embed_texts(self, captions: list[str], *, normalize: bool = False) -> Tensor:
        """(B, d) embeddings of ``captions`` (strings, tokenized by the tower itself) in the images' space."""
        if not self.has_text:
            raise ValueError(f"this run is pipeline={self.config.pipeline}: it has no text tower to embed captions")
        embed: Callable[[list[str]], Tensor] = self.model.embed_texts  # type: ignore[assignment]  # nn.Module's getattr
        return _maybe_normalized(embed([text_transform(c) for c in captions]), normalize)


def text_transform(caption: str | bytes) -> str:
    """A caption as training read it (UTF-8, not empty); ``ValueError`` for one training would have skipped."""
    try:
        return decode_caption(caption)
    except BadSample as error:
        raise ValueError(f"caption {caption!r}: {error}") from None


def _maybe_normalized(embeddings: Tensor, normalize: bool) -> Tensor:
    return torch.nn.functional.normalize(embeddings, dim=-1) if normalize else embeddings


def load_model(
    run: str | os.PathLike, *, device: torch.device | str = "cpu", trust_python_encoders: bool = False
) -> Encoders:
    """The encoders of the run in folder ``run`` (its latest checkpoint), on ``device``; the run's folder alone is
    read, not its training data. ``trust_python_encoders``: as for
    :func:`~uncurated.train.restore.load_run` (a ``python:`` factory imports its module)."""
    restored = load_run(Path(run), device=device, trust_python_encoders=trust_python_encoders)
    channels, height, width = restored.image_shape
    transform = ImageTransform("L" if channels == 1 else "RGB", (height, width), image_resize(restored.config))
    return Encoders(restored.model, restored.config, transform, torch.device(device))
