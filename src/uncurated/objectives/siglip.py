"""SigLIP: the pairwise sigmoid loss."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .base import ContrastiveObjective
from .engine import ScoreMatrix
from .tiled.kernels.transforms import negative_log_sigmoid


def siglip_rows(scores: ScoreMatrix, bias: float | Tensor) -> Tensor:
    """Per-anchor SigLIP: ``-log sigmoid(s_i + b) - sum_{j in N(i)} log sigmoid(-(S_ij + b))``."""
    positive = F.logsigmoid(scores.positive_logit() + bias)
    negatives = scores.negative_sum(negative_log_sigmoid, bias)
    return -(positive + negatives)


class SigLIP(ContrastiveObjective):
    r"""Sigmoid loss for language-image pre-training (Zhai et al. 2023).

    Every pair of the batch is an independent binary classification, positive
    on the diagonal (:math:`z_{ij} = 1`) and negative elsewhere (:math:`z_{ij} = -1`):

    .. math::

        \mathcal L = -\frac{1}{B}\sum_{i=1}^{B}\sum_{j=1}^{B}
            \log \sigma\big(z_{ij}\,(e^{t'}\langle x_i, y_j\rangle + b)\big)

    No softmax couples the batch, and each pair is scored once, so there is no
    direction reduction. With ``pairing="two_view"`` the 2B x 2B batch is used
    (own view excluded, normalized by 2B).

    Defaults from the paper: inverse temperature :math:`e^{t'}` = 10
    (``temperature=0.1``) and bias ``b = -10``, both learned
    (``learnable=True``; the inverse temperature at most 100). A fixed bias may
    be a tensor that autograd follows (the functional twin's ``bias=``).

    Example::

        loss = SigLIP()
        value = loss(image_features, text_features)
    """

    name = "siglip"
    papers = ("zhai2023siglip",)
    default_temperature = 0.1
    default_direction_reduction = None
    default_learnable = True

    def __init__(self, bias: float | Tensor = -10.0, **common) -> None:
        super().__init__(**common)
        if not isinstance(bias, Tensor):
            bias = torch.tensor(float(bias), dtype=torch.get_default_dtype())
        if self.temperature.learnable:
            self.bias = nn.Parameter(bias.detach().clone())
        else:
            self.register_buffer("bias", bias)

    def row_loss(self, scores: ScoreMatrix) -> Tensor:
        return siglip_rows(scores, self.bias)
