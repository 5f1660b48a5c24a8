"""SigLIP: the pairwise sigmoid loss."""

from __future__ import annotations

from typing import ClassVar

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..process.shard import Shard
from .base import ContrastiveObjective
from .row_statistics import RowStatistics
from .tiled.kernels.transforms import negative_log_sigmoid


def siglip_rows(scores: RowStatistics, bias: float | Tensor) -> Tensor:
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

    In open_clip's call form the model holds both: ``SigLIP(learnable=False)``
    called as ``loss(image_features, text_features, logit_scale, logit_bias)``
    scores at the model's inverse temperature and bias, and the gradient
    flows back into them.

    Example::

        loss = SigLIP()
        value = loss(image_features, text_features)
    """

    name = "siglip"
    papers = ("zhai2023siglip",)
    default_temperature = 0.1
    default_direction_reduction = None
    default_learnable = True
    call_inputs: ClassVar[tuple[str, ...]] = ("logit_bias",)

    def __init__(self, bias: float | Tensor = -10.0, **common) -> None:
        super().__init__(**common)
        if not isinstance(bias, Tensor):
            bias = torch.tensor(float(bias), dtype=torch.get_default_dtype())
        if self.temperature.learnable:
            self.bias = nn.Parameter(bias.detach().clone())
        else:
            self.register_buffer("bias", bias)

        self._call_bias: float | Tensor | None = None
        """The bias of the call under way, when the caller gave one (open_clip's ``logit_bias``)."""

    def compute(
        self,
        a: Tensor,
        b: Tensor,
        temperature: float | Tensor,
        *,
        shard: Shard | None,
        logit_bias: float | Tensor | None = None,
        **inputs,
    ) -> Tensor:
        if logit_bias is not None and self.temperature.learnable:
            raise ValueError(
                "siglip learns its own bias (learnable=True), so it takes no logit_bias: build it with "
                "learnable=False to score with the model's logit_scale and logit_bias"
            )
        self._call_bias = logit_bias
        try:
            return super().compute(a, b, temperature, shard=shard, **inputs)
        finally:
            self._call_bias = None

    def row_loss(self, scores: RowStatistics) -> Tensor:
        return siglip_rows(scores, self.bias if self._call_bias is None else self._call_bias)
