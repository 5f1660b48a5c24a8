"""The running log-sum-exp: ``log sum exp`` over tiles with a running maximum (the online log-sum-exp).

With ``M`` the running maximum and ``Z`` the running sum, a tile whose
maximum is ``m`` updates ``M' = max(M, m)``, ``Z' = Z e^{M - M'} + sum_j e^{s_j - M'}``,
and ``L = M + log Z`` at the end. Beside ``L`` it can accumulate the
softmax-weighted sum ``sum_j e^{s_j - L} v_j`` (the negatives' mean score).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor


class RunningLogSumExp:
    """``log sum exp`` of one entry per anchor, accumulated tile by tile."""

    def __init__(self, length: int, dtype: torch.dtype, device: torch.device) -> None:
        self.maximum = torch.full((length,), -math.inf, dtype=dtype, device=device)
        self.total = torch.zeros(length, dtype=dtype, device=device)
        self.weighted: Tensor | None = None

    def add(self, scores: Tensor, span: slice, dim: int, values: Tensor | None = None) -> None:
        """Add a tile's entries: tile axis ``dim`` indexes ``span``, the other is summed over.

        With ``values`` also accumulates ``sum e^s v`` (the softmax-weighted
        sum). ``scores`` is overwritten with the exponentials.
        """
        reduce = 1 - dim
        tile_max = scores.amax(reduce)
        old = self.maximum[span]
        new = torch.maximum(old, tile_max)
        reference = torch.where(torch.isneginf(new), 0.0, new)
        decay = torch.exp(old - reference)
        shape = (-1, 1) if dim == 0 else (1, -1)
        exps = scores.sub_(reference.view(shape)).exp_()
        self.total[span].mul_(decay).add_(exps.sum(reduce))
        if values is not None:
            if self.weighted is None:
                self.weighted = torch.zeros_like(self.total)
            self.weighted[span].mul_(decay).add_((exps * values).sum(reduce))
        self.maximum[span] = new

    def result(self) -> Tensor:
        return self.maximum + torch.log(self.total)

    def mean(self) -> Tensor:
        """The softmax-weighted mean of the ``values`` given to :meth:`add`."""
        if self.weighted is None:
            raise RuntimeError("mean() needs the values given to add()")
        return self.weighted / self.total
