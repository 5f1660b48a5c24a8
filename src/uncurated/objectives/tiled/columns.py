r"""NUCLR's column statistic, ``log sum_{i : j in N(i)} exp(S'_ij - r_i)`` per candidate ``j``, tile by tile.

The popularity update (Wang et al. 2025, Eq. 14) sums over the anchors that have
``j`` as a negative, each weighed by a row offset ``r_i`` that depends on the
forward pass's statistics, so the forward pass cannot accumulate it. It is
accumulated where the tiles are computed again anyway, in the backward pass
(:func:`~.matrix.column_logsumexp_after_backward`), and in a value-only pass
of its own only when no backward pass follows
(:meth:`~.matrix.TiledScoreMatrix.negative_column_logsumexp`).

By a running maximum over the view's masked scores minus ``r``, tile by
tile: exact for any spread of ``r``. (A shared-exponentials way, ``q^T E``
with factors ``q_i = e^{-r_i - k}``, would reuse the gradient's ``E = e^P``
but is exact only where ``2 bound + spread(r)`` stays below the type's safe
spread, and ``r`` comes out of the forward pass: choosing it would cost the
host a read of ``r``'s spread, a synchronization of its own, in every training
step. The running maximum costs one exponential more per score.)
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from torch import Tensor

from .logsumexp import RunningLogSumExp
from .vocabulary import PlanProtocol, Tile, ViewPassProtocol


class ColumnLogSumExp:
    """One view's column statistic for the row offsets ``row_offset``, accumulated over the tiles of a pass."""

    def __init__(self, plan: PlanProtocol, view_index: int, row_offset: Tensor) -> None:
        self.plan, self.view_index = plan, view_index
        self.view = plan.requests[view_index].view
        self.row_offset = row_offset.detach().to(plan.batch.dtype)
        length = self.view.matrix.candidates.shape[0]
        self.running = RunningLogSumExp(length, plan.batch.dtype, plan.batch.device)

    def add_tile(self, tile: Tile, view: ViewPassProtocol) -> None:
        """Add a tile from its product, which is left unchanged."""
        scores = view.scores(tile, masked=True)
        scores = scores.sub_(self.view.anchor_vector(self.row_offset, tile))
        self.running.add(scores, self.view.candidate_slice(tile), dim=1 - self.view.anchor_axis)

    def result(self) -> Tensor:
        """(C,) the statistic; ``-inf`` for a column that is no anchor's negative."""
        return self.running.result()


class DeferredColumns:
    """Column statistics to accumulate in a fused pass's backward pass, and what to call with them."""

    def __init__(self, statistics: list[ColumnLogSumExp], callback: Callable[[list[Tensor]], None]) -> None:
        self.statistics, self.callback = statistics, callback

    def add_tile(self, tile: Tile, views: Sequence[ViewPassProtocol]) -> None:
        """Add a tile (before the gradient overwrites the product)."""
        for statistic in self.statistics:
            statistic.add_tile(tile, views[statistic.view_index])

    def finish(self) -> None:
        self.callback([statistic.result() for statistic in self.statistics])


def column_pass(plan: PlanProtocol, statistic: ColumnLogSumExp) -> Tensor:
    """``statistic`` in a value-only pass over the tiles of its own."""
    views = plan.bind(plan.inputs)
    for tile in plan.tiles(plan.batch.anchors, plan.batch.candidates, views):
        statistic.add_tile(tile, views[statistic.view_index])
        del tile
    return statistic.result()
