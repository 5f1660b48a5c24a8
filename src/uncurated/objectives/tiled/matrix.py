"""The public tiled score matrix and its protocol: record what a row loss asks, compute it once, serve it.

Objectives are written as row losses that call the statistics one at a
time. :func:`fused_map` runs a row loss twice: first against matrices that
*record* what is asked of them (returning placeholders), then, after a
single fused pass has computed everything recorded for all directions,
against matrices that *serve* the results, connected to the autograd graph.
An objective that keeps a :class:`~.replay.RecordedRequests` skips the
recording run on later calls. Called outside :func:`fused_map`, a tiled matrix computes each statistic on
demand with a pass of its own (correct, slower).

Positive scores ``s_i = r_i <a_i, b_{p(i)}>`` are O(R d) and use plain
autograd. The column statistic of NUCLR's popularity update, whose row
offsets depend on the forward statistics, is accumulated in the fused pass's
backward pass (:func:`column_logsumexp_after_backward`), or, with no backward
pass to come, in a value-only pass of its own (``negative_column_logsumexp``).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import torch
from torch import Tensor

from ..declarations import StatisticDeclaration
from ..engine import ScoreMatrix
from .batch import TiledBatch
from .policy import Tiling
from .positives import positive_products
from .replay import RecordedRequests
from .vocabulary import LogSumExp, MeanScore, Mode, PositiveScore, SumFunction, UnrecordedStatistic


class TiledScoreMatrix(ScoreMatrix):
    """A :class:`ScoreMatrix` whose negative statistics are computed in tiles (see :mod:`uncurated.objectives.tiled`).

    Takes the arguments of :class:`ScoreMatrix` and the :class:`Tiling`
    options. Its dense matrices (``logits``, ``negative_mask``, ...) are refused as on every engine
    (:mod:`uncurated.objectives.row_statistics`).
    """

    def __init__(self, *args, tiling: Tiling | None = None, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._batch = TiledBatch(self.anchors, self.candidates, tiling or Tiling(mode="always"))
        self._view = self._batch.add_view(self, transposed=False)

    @property
    def recording(self) -> bool:
        return self._batch.mode is Mode.RECORD

    # -- statistics -----------------------------------------------------------------------

    @property
    def _oracle_log_rescale(self) -> Tensor | float:
        """``log(N / N_i)`` per row under the supervised oracle, else 0 (from label counts, O(R + C))."""
        if self.anchor_labels is None:
            return 0.0
        if "_log_rescale" not in self.__dict__:
            kept = self._view.kept_negatives()
            if bool((kept == 0).any()):
                row = int(torch.nonzero(kept == 0)[0])
                raise ValueError(
                    f"labels: anchor {row} has no negative with another label in this batch; "
                    "the supervised oracle needs at least one per anchor"
                )
            dtype = self._batch.dtype
            self.__dict__["_log_rescale"] = math.log(self.negative_slots) - torch.log(kept.to(dtype))
        return self.__dict__["_log_rescale"]

    def positive_logit(self) -> Tensor:
        """(R,) positive scores ``s_i = r_i <a_i, b_{p(i)}>``, O(R d): a placeholder while recording, computed
        once per serving run however often a row loss asks."""
        view = self._view
        if self._batch.mode is Mode.RECORD:
            view.wants_positive = True
            return view.placeholder()
        if self._batch.mode is Mode.SERVE:
            served = view.results.get(PositiveScore(), view.positive)
            if served is not None:
                return served
        batch = self._batch
        chunked = batch.tiling.chunk_positives(batch.device)
        products = positive_products(self.anchors, self.candidates, self.positive_column, batch.dtype, chunked)
        scores = self.scale * products
        if self._batch.mode is Mode.SERVE:
            view.positive = scores
        return scores

    def negative_logsumexp(self, weight: float = 1.0) -> Tensor:
        values = self._view.statistic(LogSumExp(_as_weight(weight)))
        return values if self.anchor_labels is None else values + self._oracle_log_rescale

    def negative_sum(self, fn: Callable[..., Tensor], *params: Tensor | float) -> Tensor:
        _check_closure(fn)
        values = self._view.negative_sum(SumFunction(fn, tuple(params)))
        rescale = self._oracle_log_rescale
        return values if isinstance(rescale, float) else values * torch.exp(rescale)

    def negative_mean_score(self) -> Tensor:
        return self._view.statistic(MeanScore())

    def _declared(self, declaration: StatisticDeclaration) -> Tensor:
        return self._view.statistic(declaration)

    def negative_column_logsumexp(self, row_offset: Tensor) -> Tensor:
        """(C,) ``log sum_{i : j in N(i)} exp(S'_ij - r_i)``: a value-only tiled pass (no gradient)."""
        return self._view.column_logsumexp(row_offset)

    def _reverse(self, **arguments) -> TiledScoreMatrix:
        """The reverse direction of a cross pairing: the columns of the same tiles, computed in the same pass."""
        if self._view.transposed or len(self._batch.views) > 1:
            raise ValueError("a tiled score matrix is transposed once, from its rows")
        flipped = TiledScoreMatrix.__new__(TiledScoreMatrix)
        ScoreMatrix.__init__(flipped, **arguments)
        flipped._batch = self._batch
        flipped._view = self._batch.add_view(flipped, transposed=True)
        return flipped


def _as_weight(weight: float | Tensor) -> float:
    if isinstance(weight, Tensor) and weight.requires_grad:
        raise ValueError("a tiled score matrix takes log-sum-exp weights as constants, not tensors with gradients")
    return float(weight)


def _check_closure(fn: Callable) -> None:
    """Refuse a function that closes over a tensor needing a gradient: the tiled backward cannot see it."""
    for cell in getattr(fn, "__closure__", None) or ():
        try:
            value = cell.cell_contents
        except ValueError:
            continue
        if isinstance(value, Tensor) and value.requires_grad:
            raise ValueError(
                "negative_sum(fn, *params): fn closes over a tensor that requires grad; pass it as a "
                "parameter, negative_sum(lambda s, p: ..., p), so the tiled backward can differentiate it"
            )


def fused_map(
    compute: Callable,
    items: Sequence,
    matrices: Sequence[ScoreMatrix] | None = None,
    recorded: RecordedRequests | None = None,
) -> list:
    """``[compute(item) for item in items]``, with one fused tiled pass for the tiled matrices among ``matrices``.

    ``matrices`` (default: ``items`` themselves) are the score matrices the
    items use. ``compute`` is first run against recording matrices (under
    ``no_grad``, results discarded), then once more against the computed
    statistics. It must ask for the same statistics both times (its control
    flow may not depend on their values) and have no side effects.
    ``recorded``, the caller's :class:`~.replay.RecordedRequests`, skips the
    recording run where the same ``compute`` was recorded on a batch of the
    same layout before.
    """
    matrices = items if matrices is None else matrices
    parts = [part for matrix in matrices for part in matrix.engine_parts]
    batches = list({id(m._batch): m._batch for m in parts if isinstance(m, TiledScoreMatrix)}.values())
    if not batches:
        return [compute(item) for item in items]
    try:
        if recorded is not None and recorded.replay(compute, batches):
            try:
                return _served(compute, items, batches)
            except UnrecordedStatistic:
                recorded.forget(compute, batches)
                for batch in batches:
                    batch.reset()
        for batch in batches:
            batch.mode = Mode.RECORD
        with torch.no_grad():
            for item in items:
                compute(item)
        if recorded is not None:
            recorded.keep(compute, batches)
        return _served(compute, items, batches)
    finally:
        for batch in batches:
            batch.reset()


def _served(compute: Callable, items: Sequence, batches: list[TiledBatch]) -> list:
    """The fused pass over what the views ask for, then ``compute`` against its results."""
    for batch in batches:
        batch.run()
    return [compute(item) for item in items]


def column_logsumexp_after_backward(
    requests: Sequence[tuple[ScoreMatrix, Tensor]], callback: Callable[[list[Tensor]], None]
) -> bool:
    """Have the backward pass of the matrices' last fused pass compute their column statistics, then call back.

    Each request is a matrix and its row offsets; ``callback`` receives the
    values of ``matrix.negative_column_logsumexp(row_offset)``, in order,
    once that backward pass has run, which recomputes every tile anyway, so
    the statistics cost no pass of their own. The matrices must be the views
    of one tiled batch computed by :func:`fused_map`. Returns ``False``, and
    registers nothing, where that does not hold or no backward pass can
    follow (the outputs need no gradient): the caller then computes them now.
    If the loss is never back-propagated, ``callback`` is never called.
    """
    matrices = [matrix for matrix, _ in requests if isinstance(matrix, TiledScoreMatrix)]
    if not matrices or len(matrices) < len(requests):
        return False
    batch = matrices[0]._batch
    plan = batch.fused_plan
    if plan is None or not plan.backward_expected or any(m._batch is not batch for m in matrices):
        return False
    views = [request.view for request in plan.requests]
    if any(m._view not in views for m in matrices):
        return False  # a view that asked for no statistic is not in the pass
    offsets = [offset for _, offset in requests]
    plan.defer_columns([(views.index(m._view), o) for m, o in zip(matrices, offsets, strict=True)], callback)
    return True
