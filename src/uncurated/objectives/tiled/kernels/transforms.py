"""The elementwise functions of the scores that the Triton kernels compute on chip (nothing here imports triton).

A row loss may ask ``negative_sum(f, *params)`` for any elementwise ``f``;
the dense and tiled engines evaluate ``f`` with PyTorch, the kernels only the
functions listed in :data:`KERNEL_TRANSFORMS`, each a ``tl.constexpr`` switch
of the kernel family. An objective that wants its sum on chip uses one of
these functions.
"""

from __future__ import annotations

import torch.nn.functional as F
from torch import Tensor


def negative_log_sigmoid(scores: Tensor, bias: float | Tensor) -> Tensor:
    """``log sigmoid(-(S_ij + b))``: a negative pair classified as negative (SigLIP, Zhai et al. 2023)."""
    return F.logsigmoid(-(scores + bias))


KERNEL_TRANSFORMS = {negative_log_sigmoid: "negative_log_sigmoid"}
"""Each function the kernels compute, by the name of its switch."""
