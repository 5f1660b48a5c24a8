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

from functools import cache

import torch


@cache
def statistics_dtype(features: torch.dtype) -> torch.dtype:
    """The type statistics and state are kept in for features of type ``features``: at least float32.

    Cached: ``torch.promote_types`` is a dispatched operator, and the engine asks for every pass."""
    return torch.promote_types(features, torch.float32)
