"""InfoNCE / NT-Xent and CLIP's symmetric InfoNCE."""

from __future__ import annotations

from typing import ClassVar

import torch.nn.functional as F
from torch import Tensor

from .base import ContrastiveObjective
from .row_statistics import RowStatistics


def infonce_rows(scores: RowStatistics) -> Tensor:
    """Per-anchor InfoNCE, ``log(e^{s_i} + sum_{j in N(i)} e^{S_ij}) - s_i = softplus(L_i(1) - s_i)``: one
    operator forward and one backward where ``logaddexp`` takes five. Above ``SOFTPLUS_LINEAR`` softplus is the
    identity to the last bit of float64."""
    return F.softplus(scores.negative_logsumexp() - scores.positive_logit(), threshold=SOFTPLUS_LINEAR)


SOFTPLUS_LINEAR = 40.0
"""Where ``softplus(x) = x + log1p(e^{-x})`` is ``x`` in float64 (``e^{-40}`` is below its resolution at 40) and
``e^x`` is still finite in float32."""


class InfoNCE(ContrastiveObjective):
    r"""InfoNCE (thesis eq. 2.1); NT-Xent with two views, CLIP's loss with two modalities.

    For an anchor with positive score :math:`s^+` and negative scores
    :math:`s_j^-` (scores are cosines divided by the temperature ``t``):

    .. math::

        \ell = -\log \frac{e^{s^+}}{e^{s^+} + \sum_{j=1}^{N} e^{s_j^-}}

    * ``pairing="cross"``: CLIP's symmetric loss (Radford et al. 2021; Chen et al. 2024
      eq. 3.1): image ``i`` against all texts and text ``i`` against all
      images, the two batch means combined by ``direction_reduction``
      (``"mean"`` as in CLIP and open_clip; Chen et al. 2024 sums them).
    * ``pairing="two_view"``: SimCLR's NT-Xent (Chen et al. 2020): 2B anchors,
      N = 2B - 2 negatives.

    Defaults: CLIP's temperature 0.07 (learnable: logit scale initialised at
    ln(1/0.07), at most 100). ``labels=`` at call time gives the supervised
    oracle (thesis eq. 3.1): same-label samples leave the negatives.

    Example::

        loss = InfoNCE(learnable=True)            # CLIP
        value = loss(image_features, text_features)
        ntxent = InfoNCE(0.5, pairing="two_view")  # SimCLR
        value = ntxent(z1, z2)
    """

    name = "infonce"
    papers: ClassVar[tuple[str, ...]] = ("oord2018cpc", "chen2020simclr", "radford2021clip")
    call_inputs: ClassVar[tuple[str, ...]] = ("labels",)

    def row_loss(self, scores: RowStatistics) -> Tensor:
        return infonce_rows(scores)
