r"""NUCLR's column statistic, ``log sum_{i : j in N(i)} exp(S'_ij - r_i)`` per candidate ``j``, tile by tile.

The popularity update (Wang et al. 2025, Eq. 14) sums over the anchors that have
``j`` as a negative, each weighed by a row offset ``r_i`` that depends on the
forward pass's statistics, so the forward pass cannot accumulate it. It is
accumulated where the tiles are computed again anyway, in the backward pass
(:func:`~.matrix.column_logsumexp_after_backward`), and in a value-only pass
of its own only when no backward pass follows
(:meth:`~.matrix.TiledScoreMatrix.negative_column_logsumexp`).

Two ways per tile, as for the row statistics:

* **shared exponentials** where the scale is folded into the tiles
  (``P = r G``) and ``2 bound + spread(r) <= SAFE_SPREAD``: the offset of
  column ``j`` comes out of the sum exactly, and the row offsets become
  factors ``q_i = e^{-r_i - k}`` (``k = max(-r)``), so
  ``log sum_i e^{S'_ij - r_i} = -o_j + k + log (q^T E)_j`` with ``E = e^{P}``.
  In the backward pass ``E`` is the tile's exponential the gradient
  already computes (weight 1), so the statistic costs one matrix-vector
  product per tile;
* **running maximum** over the view's masked scores minus ``r`` otherwise:
  exact for any spread of ``r``, at one exponential more per score.

The shared way is chosen per device policy (:meth:`~.policy.Tiling.device_policy`),
because choosing it costs a read of the row offsets' spread, which come out of
the forward pass after the engine's one read. Under the CPU policy that read
stalls nothing, and the shared way saves 11 to 27 % of a learning step; under
the CUDA policy it would be a host synchronization of its own in every training
step, so the statistics take the running maximum and read nothing.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import torch
from torch import Tensor

from ... import host_reads
from .fast_path import SAFE_SPREAD, Exponent
from .logsumexp import RunningLogSumExp
from .vocabulary import PlanProtocol, Tile, ViewPassProtocol


class ColumnLogSumExp:
    """One view's column statistic for the row offsets ``row_offset``, accumulated over the tiles of a pass."""

    def __init__(self, plan: PlanProtocol, view_index: int, row_offset: Tensor, shared: bool | None = None) -> None:
        """``shared``: whether the shared exponentials apply, as :func:`shared_applies` decided for several
        statistics at once (``None``: decided here, one read)."""
        self.plan, self.view_index = plan, view_index
        self.view = plan.requests[view_index].view
        dtype, device = plan.batch.dtype, plan.batch.device
        self.row_offset = row_offset.detach().to(dtype)
        length = self.view.matrix.candidates.shape[0]
        self.shared = shared_applies(plan, [self.row_offset])[0] if shared is None else shared
        if self.shared:
            exponent = -self.row_offset
            self.top = exponent.max()
            self.factors = torch.exp(exponent - self.top)
            self.totals = torch.zeros(length, dtype=dtype, device=device)
        else:
            self.running = RunningLogSumExp(length, dtype, device)

    def add_exponentials(self, tile: Tile, exps: Tensor) -> None:
        """Add a tile of ``E = e^P``, zero where excluded (the shared way)."""
        if self.view.transposed:  # anchors along the tile's columns, candidates along its rows
            self.totals[tile.rows].addmv_(exps, self.factors[tile.cols])
        else:
            self.totals[tile.cols].addmv_(exps.T, self.factors[tile.rows])

    def add_tile(self, tile: Tile, view: ViewPassProtocol) -> None:
        """Add a tile from its product, which is left unchanged: ``E`` of its own, or the running maximum."""
        if self.shared:
            self.add_exponentials(tile, self.plan.mask_(self.view_index, torch.exp(tile.product), tile, 0.0))
            return
        scores = view.scores(tile, masked=True)
        scores = scores.sub_(self.view.anchor_vector(self.row_offset, tile))
        self.running.add(scores, self.view.candidate_slice(tile), dim=1 - self.view.anchor_axis)

    def result(self) -> Tensor:
        """(C,) the statistic; ``-inf`` for a column that is no anchor's negative."""
        if not self.shared:
            return self.running.result()
        values = self.top + torch.log(self.totals)
        offset = self.view.offset
        return values if offset is None else values - offset.detach().to(values.dtype)


class DeferredColumns:
    """Column statistics to accumulate in a fused pass's backward pass, and what to call with them."""

    def __init__(self, statistics: list[ColumnLogSumExp], callback: Callable[[list[Tensor]], None]) -> None:
        self.statistics, self.callback = statistics, callback
        self.from_gradient: list[ColumnLogSumExp] = []
        """Those fed the exponentials the gradient computes (see :meth:`start`)."""

    def start(self, gradient_exponents: set[Exponent]) -> None:
        """Before the tiles: the shared ones read the gradient's exponentials when it computes ``e^P``."""
        self.from_gradient = [s for s in self.statistics if s.shared and Exponent(1.0, None) in gradient_exponents]

    def add_tile(self, tile: Tile, views: Sequence[ViewPassProtocol]) -> None:
        """Add a tile for those the gradient's exponentials do not serve (before the gradient overwrites the
        product)."""
        for statistic in self.statistics:
            if statistic not in self.from_gradient:
                statistic.add_tile(tile, views[statistic.view_index])

    def observe(self, exponent: Exponent, exps: Tensor, tile: Tile) -> None:
        """One of the gradient's exponentials of a tile, zero where excluded, before it is scaled."""
        if exponent == Exponent(1.0, None):
            for statistic in self.from_gradient:
                statistic.add_exponentials(tile, exps)

    def finish(self) -> None:
        self.callback([statistic.result() for statistic in self.statistics])


def column_pass(plan: PlanProtocol, statistic: ColumnLogSumExp) -> Tensor:
    """``statistic`` in a value-only pass over the tiles of its own."""
    views = plan.bind(plan.inputs)
    for tile in plan.tiles(plan.batch.anchors, plan.batch.candidates, views):
        statistic.add_tile(tile, views[statistic.view_index])
        del tile
    return statistic.result()


def shared_applies(plan: PlanProtocol, row_offsets: Sequence[Tensor]) -> list[bool]:
    """Whether ``E q`` stays a normal float on every entry (see the module docstring), for each of the column
    statistics of ``row_offsets``: their spreads read in one synchronization (with the checks still queued,
    :mod:`uncurated.host_reads`), none where the tiles are not folded, the type has no safe spread or the policy is
    the CUDA one (see the module docstring)."""
    dtype = plan.batch.dtype
    if not plan.folded or dtype not in SAFE_SPREAD or plan.batch.tiling.device_policy(plan.batch.device) != "cpu":
        return [False] * len(row_offsets)
    # The spread is finite exactly when every offset is (an inf or a NaN makes it inf or NaN).
    spreads = [offset.max() - offset.min() if offset.numel() else offset.new_zeros(()) for offset in row_offsets]
    limit = SAFE_SPREAD[dtype] - 2 * plan.shared.bound(0)
    return [math.isfinite(spread) and spread <= limit for spread in host_reads.read(*spreads)]
