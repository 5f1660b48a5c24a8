"""open_clip's call form of a loss: the model's logit scale and bias, ``output_dict``, and features gathered already.

open_clip's losses are called as ``loss(image_features, text_features, logit_scale[, logit_bias],
output_dict=False)`` (Ilharco et al. 2021, the open_clip code): ``logit_scale`` is the model's inverse temperature,
``exp`` of its learned parameter, and ``logit_bias`` SigLIP's bias (Zhai et al. 2023), both tensors autograd follows
back into the model. Every objective takes that form beside its own (:meth:`Objective.forward
<uncurated.objectives.base.Objective.forward>`); this module reads its arguments:

* :func:`scale_temperature`: the temperature ``t = 1 / logit_scale``, a tensor whose gradient reaches the model's
  parameter (its value checked with the call's other checks, not read on its own);
* :func:`check_switch`: ``output_dict`` and ``gathered`` are ``True`` or ``False``;
* :func:`features_fingerprint`: a few numbers that tell one process's features from another's, so that a call
  under a process group can refuse features that every process passed alike: the global batch, gathered by the
  caller, which the objective would gather once more and count twice.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from ..host_reads import check_later
from ..validation import check_range

OUTPUT_KEY = "contrastive_loss"
"""The key of the loss in the mapping an ``output_dict=True`` call returns (open_clip's)."""


def scale_temperature(logit_scale: float | Tensor | None) -> float | Tensor:
    """The temperature ``1 / logit_scale`` of open_clip's ``logit_scale`` (a positive number, or a one-element
    tensor autograd follows). ``ValueError`` naming ``logit_scale`` for a value that is not finite and positive
    (read with the call's first read, for a tensor), or a tensor of more than one element."""
    if isinstance(logit_scale, bool) or not isinstance(logit_scale, (int, float, Tensor)):
        raise TypeError(f"logit_scale must be a number or a one-element tensor, got {type(logit_scale).__name__}")
    if not isinstance(logit_scale, Tensor):
        return 1.0 / check_range("logit_scale", logit_scale, 0.0, math.inf, low_open=True, high_open=True)
    if logit_scale.numel() != 1 or not logit_scale.is_floating_point():
        raise ValueError(
            "logit_scale must be one floating-point number, the model's exp'd logit scale (open_clip's "
            f"model(...)['logit_scale']), got a {logit_scale.dtype} tensor of shape {tuple(logit_scale.shape)}"
        )
    scale = logit_scale.reshape(())
    check_later(scale.detach().reshape(1), _check_scale)
    return scale.reciprocal()


def _check_scale(values: list[float]) -> None:
    if not (math.isfinite(values[0]) and values[0] > 0):
        raise ValueError(
            f"logit_scale must be finite and > 0 (the exp'd logit scale, 1 / temperature), got {values[0]}"
        )


def check_switch(name: str, value: object) -> bool:
    """``value`` if it is ``True`` or ``False``, else ``TypeError`` naming ``name``."""
    if not isinstance(value, bool):
        raise TypeError(f"{name} must be True or False, got {value!r}")
    return value


def features_fingerprint(a: Tensor, b: Tensor) -> Tensor | None:
    """(4,) float64, on the features' device and not read: the sums of ``a`` and ``b``, the sum of ``a``'s squares,
    and the largest difference between ``a``'s rows and its first. Two processes' fingerprints are equal (and the
    last non-zero) when they passed the same batch; a batch of identical rows (a collapsed model) tells nothing,
    as every process's may be alike. ``None`` for inputs that are not (B, d) tensors (their checks say why)."""
    if not all(isinstance(x, Tensor) and x.ndim == 2 and x.shape[0] > 0 for x in (a, b)):
        return None
    with torch.no_grad():
        wide_a, wide_b = a.detach().double(), b.detach().double()
        spread = (wide_a - wide_a[:1]).abs().amax()
        return torch.stack([wide_a.sum(), wide_b.sum(), wide_a.square().sum(), spread])
