"""The precision contract of every objective: products in the input's type, statistics in float32 or wider.

* The matrix products (``A B^T`` of the score matrix, dense or tile by
  tile, and ``dS B``, ``dS^T A`` of the backward pass) run in the type of
  the features, so bfloat16 or float16 features get the half-precision
  kernels' speed.
* Everything computed from the products (scores, log-sum-exps, negative
  sums, the softmax-weighted mean score, the positive scores, the loss), the
  gradients accumulated over tiles, and the global objectives' per-sample
  state are kept in :func:`statistics_dtype`: float32 for half-precision
  features, the features' own type for float32 and float64 ones.

Sums over thousands of exponentials lose every digit past the third in
bfloat16 (8 bits of mantissa), and ``log u`` moving averages would drift;
float32 keeps them to the rounding of the products themselves. The
features' gradients are returned in the features' type.
"""

from __future__ import annotations

import torch


def statistics_dtype(features: torch.dtype) -> torch.dtype:
    """The type statistics and state are kept in for features of type ``features``: at least float32.

    Read from the type's own attributes rather than ``torch.promote_types``, a dispatched operator: the engine
    asks for every pass, and an operator count must not depend on whether a cache was warm."""
    return features if features.is_floating_point and features.itemsize >= 4 else torch.float32


BFLOAT16_LOSS_BOUNDS = {"cyclip": 5e-3}
"""The contract's bound on a bf16 loss's error against float64, relative to ``max(1, |loss|)``, where an
objective has its own: CyCLIP's consistency terms are differences of bf16 Gram matrices (1.8e-3 measured at
B = 384, d = 48 with bf16-representable inputs, so that the error is the computation's)."""
BFLOAT16_LOSS_BOUND = 1e-3
"""The bound for every other objective (errors of 3e-4 at most, measured as above)."""
BFLOAT16_GRADIENT_BOUND = 3e-2
"""The contract's bound on the bf16 feature gradients' error against float64, relative in norm (1.4e-2 measured
as above: the gradients are returned in bf16, whose rounding alone is 4e-3)."""


def bfloat16_loss_bound(objective: str) -> float:
    """The bound on objective ``objective``'s bf16 loss error against float64 (see :data:`BFLOAT16_LOSS_BOUNDS`)."""
    return BFLOAT16_LOSS_BOUNDS.get(objective, BFLOAT16_LOSS_BOUND)
