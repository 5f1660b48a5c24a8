"""Image encoders named by the ``image_encoder`` key: each registers its name, its own keys and its builder once
(:func:`register_image_encoder`); beside them, ``hf:SOURCE`` and ``python:module:function`` name encoders of
``transformers`` and factories (:mod:`uncurated.models.factory`). The package's are the ResNet and the MLP. Imports
nothing of torch: the configuration checks ``image_encoder`` against :func:`image_encoder_names`.

A new encoder is one module: the encoder (an ``nn.Module`` from images (B, C, H, W) to features (B, D), with an
integer ``feature_dim`` or one measured on an example), the :class:`Section` of its own keys (set as
``image_encoder.NAME=VALUE``, checked when it is built), and a call of :func:`register_image_encoder`; the module
must be imported before the configuration is read.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .registry import Registry
from .setting import NoOptions, Section

#: ``build(config, shape, options)``: the encoder for images of ``shape`` (channels, height, width), from the run's
#: configuration (a :class:`~uncurated.train.config.TrainConfig`) and the encoder's own keys (its section).
Build = Callable[[Any, tuple[int, int, int], Any], Any]


@dataclass(frozen=True)
class ImageEncoderKind:
    """An encoder the ``image_encoder`` key names: its ``build`` and the section of its own keys (``options``)."""

    name: str
    build: Build
    options: type[Section] = NoOptions


#: Every registered image encoder, the package's first.
IMAGE_ENCODERS: Registry[ImageEncoderKind] = Registry("image encoder")
#: ``register_image_encoder(kind)``: registers it under its name; a name registered twice is refused, naming both
#: builders.
register_image_encoder = IMAGE_ENCODERS.register
#: The names ``image_encoder`` accepts besides ``hf:`` and ``python:`` ones.
image_encoder_names = IMAGE_ENCODERS.names


def _resnet(config: Any, shape: tuple[int, int, int], options: Any) -> Any:
    from ..models.resnet import ResNet

    return ResNet(shape[0], widths=tuple(config.widths), blocks=tuple(config.blocks), pool=config.pool)


def _mlp(config: Any, shape: tuple[int, int, int], options: Any) -> Any:
    from ..models.mlp import MLP

    channels, height, width = shape
    return MLP(channels * height * width, widths=tuple(config.widths), norm=config.norm)


register_image_encoder(ImageEncoderKind("resnet", _resnet))
register_image_encoder(ImageEncoderKind("mlp", _mlp))
