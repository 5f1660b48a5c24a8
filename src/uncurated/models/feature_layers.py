"""What the probes read of an image encoder: its output, or every stage's pooled features side by side.

Both image models of the package (:class:`~uncurated.models.contrastive.ImageTower` and
:class:`~uncurated.models.point_set_models.PointSetImageModel`) serve their ``features`` from here, so a layer
means the same features whichever model was trained.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from ..model_defaults import FEATURE_LAYERS
from ..validation import check_choice
from .encoders import StagedEncoder


def encoder_features(encoder: nn.Module, images: Tensor, layer: str = "encoder") -> Tensor:
    """(B, features) of ``images`` at ``layer``, one of :data:`~uncurated.model_defaults.FEATURE_LAYERS`.

    ``"encoder"`` is the encoder's output (SimCLR's practice); ``"stages"`` concatenates the pooled features of
    every stage and needs an encoder with stages (:class:`~uncurated.models.encoders.StagedEncoder`).
    """
    check_choice("layer", layer, FEATURE_LAYERS)
    if layer == "stages":
        if not isinstance(encoder, StagedEncoder):
            raise ValueError(f"layer='stages' needs an encoder with stages, not {type(encoder).__name__}")
        return torch.cat(encoder.forward_stages(images), dim=1)
    return encoder(images)
