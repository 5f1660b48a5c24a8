"""Per-view bookkeeping: one direction's score matrix as a view of ``G = A B^T``, and what is asked of it.

A :class:`View` knows its matrix's scale, offsets and excluded entries, maps
per-anchor and per-candidate vectors onto a tile in ``G``'s orientation, and
records (or serves) the statistics a row loss asks for. The statistics are
named by typed keys (:class:`~.vocabulary.LogSumExp`, :class:`~.vocabulary.NegativeSum`,
:class:`~.vocabulary.MeanScore`, a declared statistic's declaration); a :class:`~.vocabulary.Request` lists those
one fused pass computes.
"""

from __future__ import annotations

import torch
from torch import Tensor

from ..declarations import StatisticDeclaration
from .vocabulary import (
    BatchProtocol,
    LogSumExp,
    MatrixProtocol,
    MeanScore,
    Mode,
    NegativeSum,
    Request,
    Statistic,
    SumFunction,
    Tile,
    UnrecordedStatistic,
)


class View:
    """One direction of a tiled batch: its scale, offsets, excluded entries and requested statistics.

    Tile arrays are in ``G``'s orientation (rows of ``A``, columns of ``B``).
    For a transposed view the anchors run along the tile's columns: per-anchor
    vectors broadcast as ``[None, :]`` and statistics reduce over dim 0.
    """

    def __init__(self, batch: BatchProtocol, matrix: MatrixProtocol, transposed: bool) -> None:
        self.batch, self.matrix, self.transposed = batch, matrix, transposed
        self.clear()

    def clear(self) -> None:
        self.weights: list[float] = []
        self.sums: list[SumFunction] = []
        self.mean = False
        self.declared: list[StatisticDeclaration] = []
        self.results: dict[Statistic, Tensor] = {}
        self.sums_served = 0
        self.positive: Tensor | None = None
        """The positive scores of the serving run, computed at the first request."""
        self.wants_positive = False
        """Whether the row loss asked for the positive scores while recording."""
        self._placeholder: Tensor | None = None

    # anchors and candidates in G's orientation

    @property
    def anchor_axis(self) -> int:
        return 1 if self.transposed else 0

    def anchor_vector(self, values: Tensor, tile: Tile) -> Tensor:
        """Per-anchor values on a tile, shaped to broadcast over it."""
        return values[tile.cols][None, :] if self.transposed else values[tile.rows][:, None]

    def candidate_vector(self, values: Tensor, tile: Tile) -> Tensor:
        return values[tile.rows][:, None] if self.transposed else values[tile.cols][None, :]

    def anchor_slice(self, tile: Tile) -> slice:
        return tile.cols if self.transposed else tile.rows

    def candidate_slice(self, tile: Tile) -> slice:
        return tile.rows if self.transposed else tile.cols

    def reduce(self, values: Tensor) -> Tensor:
        """Sum a tile over the candidates: one value per anchor."""
        return values.sum(1 - self.anchor_axis)

    # requests

    def statistic(self, key: Statistic) -> Tensor:
        mode = self.batch.mode
        if mode is Mode.RECORD:
            if isinstance(key, LogSumExp) and key.weight not in self.weights:
                self.weights.append(key.weight)
            elif isinstance(key, MeanScore):
                self.mean = True
            elif isinstance(key, StatisticDeclaration) and key not in self.declared:
                self.declared.append(key)
            return self.placeholder()
        if mode is Mode.SERVE:
            if key not in self.results:
                raise UnrecordedStatistic(f"the row loss asked for {key} now but did not when recorded")
            return self.results[key]
        weights = [key.weight] if isinstance(key, LogSumExp) else []
        declared = [key] if isinstance(key, StatisticDeclaration) else []
        return self.batch.run_single(Request(self, weights, mean=isinstance(key, MeanScore), declared=declared))[key]

    def negative_sum(self, function: SumFunction) -> Tensor:
        mode = self.batch.mode
        if mode is Mode.RECORD:
            self.sums.append(function)
            return self.placeholder()
        if mode is Mode.SERVE:
            key = NegativeSum(self.sums_served)
            self.sums_served += 1
            if key.index >= len(self.sums):
                raise UnrecordedStatistic("the row loss asked for more negative sums than it did when recorded")
            return self.results[key]
        return self.batch.run_single(Request(self, sums=[function]))[NegativeSum(0)]

    def placeholder(self) -> Tensor:
        """What a statistic is while recording: zeros, one tensor per view however often asked."""
        if self._placeholder is None:
            shape = self.matrix.anchors.shape[0]
            self._placeholder = torch.zeros(shape, dtype=self.batch.dtype, device=self.batch.device)
        return self._placeholder

    # scores of a tile

    @property
    def scale(self) -> float | Tensor:
        return self.matrix.scale

    @property
    def offset(self) -> Tensor | None:
        return self.matrix.column_offset

    def excluded(self) -> tuple[Tensor, Tensor]:
        """The (row, column) coordinates in ``G`` of the entries left out besides labels: positive and own (``-1``
        where an anchor's positive is not among the candidates)."""
        matrix = self.matrix
        anchors = torch.arange(matrix.anchors.shape[0], device=self.batch.device)
        columns = [matrix.positive_column]
        if matrix.own_column is not None:
            columns.append(matrix.own_column)
        anchor_index = torch.cat([anchors] * len(columns))
        candidate_index = torch.cat(columns).to(anchors.device)
        # -1: the positive is not among the candidates; kept (the plan counts such entries in no tile) rather
        # than dropped by a boolean mask, whose size the host would read from the device.
        if self.transposed:
            return candidate_index, anchor_index
        return anchor_index, candidate_index

    def tile_labels(self, tile: Tile) -> tuple[Tensor, Tensor] | None:
        """The labels of the tile's rows, as a column, and of its columns, as a row (``None``: no oracle)."""
        matrix = self.matrix
        if matrix.anchor_labels is None:
            return None
        if matrix.candidate_labels is None:
            raise ValueError("labels: the anchors have labels, so the candidates need theirs")
        row_labels, col_labels = (
            (matrix.candidate_labels, matrix.anchor_labels)
            if self.transposed
            else (matrix.anchor_labels, matrix.candidate_labels)
        )
        return row_labels[tile.rows][:, None], col_labels[tile.cols][None, :]

    def kept_negatives(self) -> Tensor:
        """(R,) ``N_i``: candidates with another label than the anchor, less positive and own if they differ."""
        matrix = self.matrix
        anchor, candidate = matrix.anchor_labels, matrix.candidate_labels
        if anchor is None or candidate is None:
            raise ValueError("kept_negatives needs the labels of the anchors and of the candidates")
        values, counts = torch.unique(candidate, return_counts=True)
        position = torch.searchsorted(values, anchor).clamp(max=values.numel() - 1)
        same = torch.where(values[position] == anchor, counts[position], 0)
        kept = candidate.numel() - same
        kept = kept - candidate[matrix.positive_column].ne(anchor).long()
        if matrix.own_column is not None:
            kept = kept - candidate[matrix.own_column].ne(anchor).long()
        return kept

    def column_logsumexp(self, row_offset: Tensor) -> Tensor:
        if self.batch.mode is Mode.RECORD:
            return torch.zeros(self.matrix.candidates.shape[0], dtype=self.batch.dtype, device=self.batch.device)
        if torch.is_grad_enabled() and row_offset.requires_grad:
            raise ValueError("negative_column_logsumexp of a tiled score matrix is value-only: call it under no_grad")
        with torch.no_grad():
            return self.batch.column_logsumexp(self, row_offset.detach())
