"""How a fused pass runs: the tiles, the entries each view leaves out of them, the tensors autograd sees.

A :class:`Plan` is made for one pass over ``G = A B^T``. It fixes the tile
shape, groups every view's excluded entries (positive, own view) by tile,
lists the tensors the autograd Function must differentiate besides ``A``
and ``B`` (each view's scale if a tensor, its offsets, its sums'
parameters), and decides whether one scalar scale shared by every view is
folded into ``A`` (``S = (r A) B^T``, one multiplication fewer per tile).
:meth:`Plan.bind` pairs each view's request with those tensors' values for
one pass (a :class:`ViewPass`), which computes the view's scores on a tile.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from ... import host_reads
from .columns import ColumnLogSumExp, DeferredColumns, shared_applies
from .fast_path import SharedExponentials, bound_inputs
from .vocabulary import BatchProtocol, InputSlots, Request, Tile, ViewPassProtocol, ViewProtocol


@dataclass
class ViewPass:
    """One view's request in one pass, with the (detached) values of its inputs."""

    plan: Plan
    index: int
    request: Request
    slots: InputSlots
    scale: float | Tensor
    offset: Tensor | None
    params: list[list[Tensor]]

    @property
    def view(self) -> ViewProtocol:
        return self.request.view

    def mask_(self, values: Tensor, tile: Tile, fill: float) -> Tensor:
        """Set the view's excluded entries of ``values`` (a tile) to ``fill``, in place."""
        return self.plan.mask_(self.index, values, tile, fill)

    def scores(self, tile: Tile, *, masked: bool) -> Tensor:
        """The view's scores on a tile, a new tensor in ``G``'s orientation; excluded entries ``-inf`` if ``masked``."""
        view, scores = self.view, tile.product
        if not self.plan.folded:
            scale = self.scale
            if isinstance(scale, Tensor):
                scale = view.anchor_vector(scale, tile) if scale.ndim else scale.to(scores.dtype)
            scores = scores * scale
        if self.offset is not None:
            scores = scores - view.candidate_vector(self.offset, tile)
        if scores is tile.product:
            scores = scores.clone()
        return self.mask_(scores, tile, -math.inf) if masked else scores

    def anchored(self, tile: Tile) -> tuple[Tensor, Tensor]:
        """The view's scores on a tile and the mask of its negatives, with its anchors along the rows: what a declared
        statistic's accumulator and backward factor read (:mod:`~uncurated.objectives.declarations`)."""
        scores = self.scores(tile, masked=False)
        negatives = self.mask_(torch.ones_like(scores, dtype=torch.bool), tile, False)
        return (scores.T, negatives.T) if self.view.transposed else (scores, negatives)

    def weighted(self, tile: Tile, weight: float) -> Tensor:
        """``w S`` with excluded entries ``-inf`` (weighting first, so that ``w = 0`` leaves no NaN)."""
        return self.mask_(self.scores(tile, masked=False).mul_(weight), tile, -math.inf)


class Plan:
    """How one fused pass over a batch's tiles runs; see the module docstring."""

    def __init__(self, batch: BatchProtocol, requests: list[Request]) -> None:
        self.batch, self.requests = batch, requests
        self.block = batch.block_shape()
        self.inputs: list[Tensor] = []
        self.slots = [self._slots(request) for request in requests]
        self.folded = self._shared_scalar_scale()
        # One read from the device for the whole plan: where the excluded entries fall, and the bounds that
        # decide the fast path, read together (each is a value the host must branch on).
        sorted_exclusions = [self._sort_exclusions(*request.view.excluded()) for request in requests]
        bounds = bound_inputs(self)
        parts = [counts.double() for _, _, counts in sorted_exclusions] + [
            v.reshape(1).double() for v in bounds.values()
        ]
        read = host_reads.read(*parts)  # with the call's argument checks, if queued
        self.exclusions, start = [], 0
        for rows, cols, counts in sorted_exclusions:
            self.exclusions.append(self._bucket(rows, cols, [int(n) for n in read[start : start + counts.numel()]]))
            start += counts.numel()
        self.shared = SharedExponentials(self, dict(zip(bounds, read[start:], strict=True)))
        self.general = any(
            request.sums
            or request.declared
            or (request.mean and not self.shared.handles_mean(i))
            or any(not self.shared.handles(i, w) for w in request.weights)
            for i, request in enumerate(requests)
        )
        """Whether some statistic takes the running-max path (which reads the tile's scores)."""
        self.backward_expected = False
        """Whether the fused pass's outputs require a gradient (set when it runs): a backward pass may follow."""
        self.deferred_columns: DeferredColumns | None = None
        """Column statistics its backward pass accumulates (:func:`~.matrix.column_logsumexp_after_backward`)."""

    def defer_columns(self, requests: list[tuple[int, Tensor]], callback: Callable[[list[Tensor]], None]) -> None:
        """Have the backward pass accumulate the column statistics of ``(view index, row offsets)`` and call back."""
        shared = shared_applies(self, [offset.detach().to(self.batch.dtype) for _, offset in requests])
        statistics = [ColumnLogSumExp(self, i, offset, way) for (i, offset), way in zip(requests, shared, strict=True)]
        self.deferred_columns = DeferredColumns(statistics, callback)

    def _slots(self, request: Request) -> InputSlots:
        slots = InputSlots()
        if isinstance(request.view.scale, Tensor):
            slots.scale = self._add(request.view.scale)
        if request.view.offset is not None:
            slots.offset = self._add(request.view.offset)
        for function in request.sums:
            slots.params.append([self._add(_as_tensor(p, self.batch)) for p in function.params])
        return slots

    def _add(self, tensor: Tensor) -> int:
        self.inputs.append(tensor)
        return len(self.inputs) - 1

    def _shared_scalar_scale(self) -> bool:
        scales = [request.view.scale for request in self.requests]
        if any(isinstance(s, Tensor) and s.ndim > 0 for s in scales):
            return False
        first = scales[0]
        return all(
            s is first or (not isinstance(s, Tensor) and not isinstance(first, Tensor) and s == first) for s in scales
        )

    def _sort_exclusions(self, rows: Tensor, cols: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """The excluded entries (``-1``: none, for that anchor) sorted by tile, and how many each tile holds, not
        read: one count per tile, accumulated on the device (sizes read from it would cost a read each)."""
        block_rows, block_cols = self.block
        anchors, candidates = self.batch.anchors.shape[0], self.batch.candidates.shape[0]
        per_row = 1 + candidates // block_cols
        tile_count = (1 + anchors // block_rows) * per_row
        present = (rows >= 0) & (cols >= 0)
        tile_rows = torch.div(rows, block_rows, rounding_mode="floor")
        tile_cols = torch.div(cols, block_cols, rounding_mode="floor")
        tiles = torch.where(present, tile_rows * per_row + tile_cols, tile_count)  # the absent last, uncounted
        order = torch.argsort(tiles, stable=True)
        counts = torch.zeros(tile_count + 1, dtype=torch.long, device=tiles.device)
        counts.index_add_(0, tiles, torch.ones_like(tiles))
        return rows[order], cols[order], counts[:tile_count]

    def _bucket(self, rows: Tensor, cols: Tensor, counts: list[int]) -> dict[tuple[int, int], Tensor]:
        """The excluded entries grouped by tile (keyed by its first row and column), as flat positions within it,
        from :meth:`_sort_exclusions` and its counts, read."""
        block_rows, block_cols = self.block
        candidates = self.batch.candidates.shape[0]
        per_row = 1 + candidates // block_cols
        buckets, start = {}, 0
        for tile, count in enumerate(counts):
            if not count:
                continue
            stop = start + count
            first_row, first_col = (tile // per_row) * block_rows, (tile % per_row) * block_cols
            width = min(block_cols, candidates - first_col)
            buckets[first_row, first_col] = (rows[start:stop] - first_row) * width + (cols[start:stop] - first_col)
            start = stop
        return buckets

    def bind(self, inputs: Sequence[Tensor]) -> list[ViewPass]:
        """Each view's request with the detached values of ``inputs`` (the Function's, or :attr:`inputs`)."""

        def value(index: int | None):
            return None if index is None else inputs[index].detach()

        return [
            ViewPass(
                self,
                i,
                request,
                slots,
                scale=request.view.scale if slots.scale is None else value(slots.scale),
                offset=value(slots.offset),
                params=[[value(k) for k in positions] for positions in slots.params],
            )
            for i, (request, slots) in enumerate(zip(self.requests, self.slots, strict=True))
        ]

    def tiles(self, anchors: Tensor, candidates: Tensor, views: Sequence[ViewPassProtocol]) -> Iterator[Tile]:
        """Every tile of ``anchors @ candidates.T`` (``(r A) B^T`` where the scale is folded), row block by row
        block: the product in the features' type, the tile in the statistics' type.

        The scale is folded into each row block as it comes, so no scaled copy of the whole ``A`` is held.
        The caller must drop its reference to a tile before asking for the next (``del tile``), so that two
        are never alive at once.
        """
        block_rows, block_cols = self.block
        for row_start in range(0, anchors.shape[0], block_rows):
            rows = slice(row_start, min(row_start + block_rows, anchors.shape[0]))
            left = anchors[rows] * views[0].scale if self.folded else anchors[rows]
            for col_start in range(0, candidates.shape[0], block_cols):
                cols = slice(col_start, min(col_start + block_cols, candidates.shape[0]))
                yield Tile(rows, cols, (left @ candidates[cols].T).to(self.batch.dtype), left)

    def mask_(self, index: int, values: Tensor, tile: Tile, fill: float) -> Tensor:
        """Set view ``index``'s excluded entries of ``values`` (a contiguous tile) to ``fill``, in place."""
        flat, labels = self.excluded(index, tile)
        if flat is not None:
            values.view(-1).index_fill_(0, flat, fill)
        if labels is not None:
            values.masked_fill_(labels[0] == labels[1], fill)
        return values

    def excluded(self, index: int, tile: Tile) -> tuple[Tensor | None, tuple[Tensor, Tensor] | None]:
        """View ``index``'s excluded entries of a tile: the flat positions of the positive and own entries, and
        the labels of the rows and columns (same label: left out), each ``None`` where there are none."""
        return self.exclusions[index].get(tile.key), self.requests[index].view.tile_labels(tile)


def _as_tensor(value, batch: BatchProtocol) -> Tensor:
    return value if isinstance(value, Tensor) else torch.as_tensor(value, dtype=batch.dtype, device=batch.device)
