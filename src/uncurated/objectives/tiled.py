r"""The memory-linear engine: every row statistic of a score matrix, computed tile by tile.

:class:`TiledScoreMatrix` offers the methods of
:class:`~uncurated.objectives.engine.ScoreMatrix` without ever holding the
R x C matrix. Anchors ``A`` (R x d) and candidates ``B`` (C x d) define the
inner products ``G = A B^T``; a *view* of ``G`` is one direction's score
matrix, ``S = r G - o`` (rows of ``G`` as anchors) or ``S = c G^T - o'``
(columns of ``G`` as anchors, the transposed direction of a cross pairing),
with its own inverse temperature (one, or one per anchor), column offsets and
excluded entries (positive, own view, same label).

**Forward.** One pass over tiles ``G[I, J] = A[I] B[J]^T`` accumulates, for
every view, every statistic requested of it:

* ``L_i(w) = log sum_{j in N(i)} exp(w S_ij)`` by the running-max
  log-sum-exp: with ``M`` the running maximum and ``Z`` the running sum,
  a tile with maximum ``m`` updates ``M' = max(M, m)``,
  ``Z' = Z e^{M - M'} + sum_j e^{w S_ij - M'}``, and ``L = M + log Z`` at the end;
* ``F_i(f) = sum_{j in N(i)} f(S_ij)`` by plain summation;
* the negatives' softmax-mean score ``m_i = sum_j e^{S_ij - L_i(1)} S_ij``,
  accumulated beside ``L_i(1)`` with the same rescaling.

**Backward.** Each statistic's derivative with respect to ``S_ij`` is a
per-row factor times a function of ``S_ij``:

* ``dL_i(w) / dS_ij = w e^{w S_ij - L_i(w)}``,
* ``dF_i(f) / dS_ij = f'(S_ij)`` (by autograd on the tile, which also gives
  the gradient of ``f``'s own parameters, SigLIP's bias),
* ``dm_i / dS_ij = e^{S_ij - L_i(1)} (1 + S_ij - m_i)``,

and zero on excluded entries. The backward pass recomputes each tile once,
forms ``dS`` for all statistics of all views, maps it back to the inner
products (``dG = r dS`` for the rows view, ``c dS'^T`` for the transposed
one) and accumulates ``dA += dG B[J]``, ``dB[J] += dG^T A[I]``, the
temperature gradient ``sum dS G`` and the offsets' ``-sum dS``. Nothing
larger than a tile is ever held: memory is O((R + C) d) plus the tiles.

**One pass for all statistics.** Objectives are written as row losses that
call the statistics one at a time. :func:`evaluate` runs a row loss twice:
first against matrices that *record* what is asked of them (returning
placeholders), then, after a single fused pass has computed everything
recorded for both directions, against matrices that *serve* the results,
connected to the autograd graph. Called outside :func:`evaluate`, a tiled
matrix computes each statistic on demand with its own pass (correct, slower).

Positive scores ``s_i = r_i <a_i, b_{p(i)}>`` are O(R d) and use plain
autograd. ``negative_column_logsumexp`` (NUCLR's popularity update, whose row
offsets depend on the forward statistics) is a separate value-only pass.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import torch
from torch import Tensor

from .engine import ScoreMatrix
from .tiling import Tiling

_RECORD, _SERVE, _DIRECT = "record", "serve", "direct"


class TiledScoreMatrix(ScoreMatrix):
    """A :class:`ScoreMatrix` whose negative statistics are computed in tiles (see the module docstring).

    Takes the arguments of :class:`ScoreMatrix` and the :class:`Tiling`
    options. The dense attributes (``logits``, ``negative_mask``, ...) are not
    available.
    """

    def __init__(self, *args, tiling: Tiling | None = None, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._batch = _TiledBatch(self.anchors, self.candidates, tiling or Tiling(mode="always"))
        self._view = self._batch.add_view(self, transposed=False)

    # -- what is not available ------------------------------------------------------------

    def _dense(self, name: str):
        raise AttributeError(
            f"a tiled score matrix never forms the dense matrix ({name}); use its row statistics, "
            "or tiling='never'"
        )

    similarities = property(lambda self: self._dense("similarities"))
    logits = property(lambda self: self._dense("logits"))
    negative_logits = property(lambda self: self._dense("negative_logits"))
    negative_mask = property(lambda self: self._dense("negative_mask"))

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
            dtype = self.anchors.dtype
            self.__dict__["_log_rescale"] = math.log(self.negative_slots) - torch.log(kept.to(dtype))
        return self.__dict__["_log_rescale"]

    def positive_logit(self) -> Tensor:
        """(R,) positive scores ``s_i = r_i <a_i, b_{p(i)}>``, O(R d)."""
        return self.scale * (self.anchors * self.candidates[self.positive_column]).sum(dim=1)

    def negative_logsumexp(self, weight: float = 1.0) -> Tensor:
        return self._view.statistic(("lse", _as_weight(weight))) + self._oracle_log_rescale

    def negative_sum(self, fn: Callable[..., Tensor], *params: Tensor) -> Tensor:
        _check_closure(fn)
        values = self._view.sum_statistic(fn, params)
        if self.anchor_labels is None:
            return values
        return values * torch.exp(self._oracle_log_rescale)

    def negative_mean_score(self) -> Tensor:
        return self._view.statistic(("mean",))

    def negative_column_logsumexp(self, row_offset: Tensor) -> Tensor:
        """(C,) ``log sum_{i : j in N(i)} exp(S'_ij - r_i)``: a value-only tiled pass (no gradient)."""
        return self._view.column_logsumexp(row_offset)

    def transposed(self, scale: float | Tensor | None = None, column_offset: Tensor | None = None) -> TiledScoreMatrix:
        """The reverse direction of a cross pairing: the columns of the same tiles, computed in the same pass."""
        if self.own_column is not None or self.extra_positives is not None:
            raise ValueError("only a cross-pairing score matrix can be transposed")
        if self._view.transposed or len(self._batch.views) > 1:
            raise ValueError("a tiled score matrix is transposed once, from its rows")
        if scale is None:
            if isinstance(self.scale, Tensor) and self.scale.ndim == 1:
                raise ValueError("a matrix with one scale per anchor needs a scale for its transpose")
            scale = self.scale
        flipped = TiledScoreMatrix.__new__(TiledScoreMatrix)
        ScoreMatrix.__init__(
            flipped,
            self.candidates,
            self.anchors,
            scale,
            positive_column=torch.argsort(self.positive_column),
            anchor_labels=self.candidate_labels,
            candidate_labels=self.anchor_labels,
            column_offset=column_offset,
        )
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


# -- evaluation protocol ----------------------------------------------------------------------


def evaluate(compute: Callable, items: Sequence, matrices: Sequence[ScoreMatrix] | None = None) -> list:
    """``[compute(item) for item in items]``, with one fused tiled pass for the tiled matrices among ``matrices``.

    ``matrices`` (default: ``items`` themselves) are the score matrices the
    items use. ``compute`` is first run against recording matrices (under
    ``no_grad``, results discarded), then once more against the computed
    statistics. It must ask for the same statistics both times (its control
    flow may not depend on their values) and have no side effects.
    """
    matrices = items if matrices is None else matrices
    batches = list({id(m._batch): m._batch for m in matrices if isinstance(m, TiledScoreMatrix)}.values())
    if not batches:
        return [compute(item) for item in items]
    for batch in batches:
        batch.mode = _RECORD
    try:
        with torch.no_grad():
            for item in items:
                compute(item)
        for batch in batches:
            batch.run()
        return [compute(item) for item in items]
    finally:
        for batch in batches:
            batch.reset()


# -- one direction's score matrix as a view of G -------------------------------------------------


class _View:
    """One direction of a tiled batch: its scale, offsets, excluded entries and requested statistics.

    Tile arrays are in ``G``'s orientation (rows of ``A``, columns of ``B``).
    For a transposed view the anchors run along the tile's columns: per-anchor
    vectors broadcast as ``[None, :]`` and statistics reduce over dim 0.
    """

    def __init__(self, batch: _TiledBatch, matrix: TiledScoreMatrix, transposed: bool) -> None:
        self.batch, self.matrix, self.transposed = batch, matrix, transposed
        self.weights: list[float] = []
        self.sums: list[tuple[Callable, tuple[Tensor, ...]]] = []
        self.mean = False
        self.results: dict = {}
        self.sum_calls = 0

    # anchors and candidates in G's orientation
    @property
    def anchor_axis(self) -> int:
        return 1 if self.transposed else 0

    def anchor_vector(self, values: Tensor, rows: slice, cols: slice) -> Tensor:
        """Per-anchor values of a tile, shaped to broadcast over it."""
        return values[cols][None, :] if self.transposed else values[rows][:, None]

    def candidate_vector(self, values: Tensor, rows: slice, cols: slice) -> Tensor:
        return values[rows][:, None] if self.transposed else values[cols][None, :]

    def anchor_slice(self, rows: slice, cols: slice) -> slice:
        return cols if self.transposed else rows

    def reduce(self, tile: Tensor, op: str) -> Tensor:
        dim = 1 - self.anchor_axis
        return tile.sum(dim) if op == "sum" else tile.amax(dim)

    # requests
    def statistic(self, key: tuple) -> Tensor:
        batch = self.batch
        if batch.mode == _RECORD:
            if key[0] == "lse" and key[1] not in self.weights:
                self.weights.append(key[1])
            elif key[0] == "mean":
                self.mean = True
            return self.placeholder()
        if batch.mode == _SERVE:
            if key not in self.results:
                raise RuntimeError(f"the row loss asked for {key} now but did not when recorded")
            return self.results[key]
        return batch.run_single(self, key)

    def sum_statistic(self, fn: Callable, params: tuple[Tensor, ...]) -> Tensor:
        batch = self.batch
        if batch.mode == _RECORD:
            self.sums.append((fn, tuple(params)))
            return self.placeholder()
        if batch.mode == _SERVE:
            index = self.sum_calls
            self.sum_calls += 1
            if index >= len(self.sums):
                raise RuntimeError("the row loss asked for more negative sums than it did when recorded")
            return self.results[("sum", index)]
        return batch.run_single(self, ("sum", 0), sums=[(fn, tuple(params))])

    def placeholder(self) -> Tensor:
        return torch.zeros(self.matrix.anchors.shape[0], dtype=self.batch.dtype, device=self.batch.device)

    def clear(self) -> None:
        self.weights, self.sums, self.mean, self.results, self.sum_calls = [], [], False, {}, 0

    # scores of a tile
    @property
    def scale(self) -> float | Tensor:
        return self.matrix.scale

    @property
    def offset(self) -> Tensor | None:
        return self.matrix.column_offset

    def excluded(self) -> tuple[Tensor, Tensor]:
        """The (row, column) coordinates in ``G`` of the entries left out besides labels: positive and own."""
        matrix = self.matrix
        anchors = torch.arange(matrix.anchors.shape[0], device=self.batch.device)
        columns = [matrix.positive_column]
        if matrix.own_column is not None:
            columns.append(matrix.own_column)
        anchor_index = torch.cat([anchors] * len(columns))
        candidate_index = torch.cat(columns).to(anchors.device)
        if self.transposed:
            return candidate_index, anchor_index
        return anchor_index, candidate_index

    def same_label(self, rows: slice, cols: slice) -> Tensor | None:
        """The tile's entries whose anchor and candidate share a label (left out by the oracle), or ``None``."""
        matrix = self.matrix
        if matrix.anchor_labels is None:
            return None
        row_labels, col_labels = (
            (matrix.candidate_labels, matrix.anchor_labels) if self.transposed else (matrix.anchor_labels, matrix.candidate_labels)
        )
        return row_labels[rows][:, None] == col_labels[cols][None, :]

    def kept_negatives(self) -> Tensor:
        """(R,) ``N_i``: candidates with another label than the anchor, less positive and own if they differ."""
        matrix = self.matrix
        anchor, candidate = matrix.anchor_labels, matrix.candidate_labels
        values, counts = torch.unique(candidate, return_counts=True)
        position = torch.searchsorted(values, anchor).clamp(max=values.numel() - 1)
        same = torch.where(values[position] == anchor, counts[position], 0)
        kept = candidate.numel() - same
        kept = kept - (candidate[matrix.positive_column] != anchor).long()
        if matrix.own_column is not None:
            kept = kept - (candidate[matrix.own_column] != anchor).long()
        return kept

    def column_logsumexp(self, row_offset: Tensor) -> Tensor:
        if self.batch.mode == _RECORD:
            return torch.zeros(self.matrix.candidates.shape[0], dtype=self.batch.dtype, device=self.batch.device)
        if torch.is_grad_enabled() and row_offset.requires_grad:
            raise ValueError("negative_column_logsumexp of a tiled score matrix is value-only: call it under no_grad")
        with torch.no_grad():
            return self.batch.column_logsumexp(self, row_offset.detach())


# -- the batch: A, B, the views, the fused passes --------------------------------------------------


class _TiledBatch:
    """What the views of one ``G = A B^T`` share: the features, the tiles, the mode."""

    def __init__(self, anchors: Tensor, candidates: Tensor, tiling: Tiling) -> None:
        self.anchors, self.candidates, self.tiling = anchors, candidates, tiling
        self.views: list[_View] = []
        self.mode = _DIRECT
        self.dtype, self.device = anchors.dtype, anchors.device

    def add_view(self, matrix: TiledScoreMatrix, transposed: bool) -> _View:
        view = _View(self, matrix, transposed)
        self.views.append(view)
        return view

    def reset(self) -> None:
        self.mode = _DIRECT
        for view in self.views:
            view.clear()

    def block_shape(self) -> tuple[int, int]:
        rows, cols = self.anchors.shape[0], self.candidates.shape[0]
        return self.tiling.block_shape(rows, cols, self.anchors.shape[1], self.dtype)

    def run(self) -> None:
        """The fused pass over every view's recorded statistics; switches to serving them."""
        specs = [_ViewSpec.of(view) for view in self.views]
        specs = [spec for spec in specs if spec.output_count]
        if specs:
            for spec, values in zip(specs, _compute(self, specs)):
                spec.view.results = spec.name(values)
        self.mode = _SERVE

    def run_single(self, view: _View, key: tuple, sums=None) -> Tensor:
        """One statistic of one view on demand (outside :func:`evaluate`)."""
        spec = _ViewSpec(view, weights=[key[1]] if key[0] == "lse" else [], sums=sums or [], mean=key[0] == "mean")
        (values,) = _compute(self, [spec])
        return spec.name(values)[key]

    def column_logsumexp(self, view: _View, row_offset: Tensor) -> Tensor:
        """``log sum_{i : j in N(i)} exp(S'_ij - r_i)`` per candidate ``j`` of ``view``: one forward pass."""
        spec = _ViewSpec(view)
        plan = _Plan(self, [spec])
        fast = _column_logsumexp_shared(plan, view, row_offset)
        if fast is not None:
            return fast
        tiles = plan.tiles(_folded_anchors(plan, self.anchors, plan.inputs), self.candidates)
        candidates = view.matrix.candidates.shape[0]
        running = _RunningLogSumExp(candidates, self.dtype, self.device)
        for rows, cols, product in tiles:
            scores = plan.scores(spec, product, rows, cols, masked=True)
            scores = scores.sub_(view.anchor_vector(row_offset.to(self.dtype), rows, cols))
            other = rows if view.transposed else cols
            running.add(scores, other, dim=1 - view.anchor_axis)
            del product, scores
        return running.result()


def _column_logsumexp_shared(plan: _Plan, view: _View, row_offset: Tensor) -> Tensor | None:
    r"""The column pass with one unshifted exponential per tile, or ``None`` where it does not apply.

    ``S'_ij - r_i = P_ij - o_j - r_i``: the offset of column ``j`` comes out of
    the sum exactly, and the row offsets become factors ``q_i = e^{-r_i - k}``
    (``k = max(-r)``), so ``log sum_i e^{S'_ij - r_i} = -o_j + k + log (q^T E)_j``
    with ``E = e^{P}``. Applies under the condition of :class:`_SharedExponentials`
    with the spread of ``r`` in place of the offsets'.
    """
    dtype = plan.batch.dtype
    if not plan.folded or dtype not in SAFE_SPREAD or not bool(torch.isfinite(row_offset).all()):
        return None
    bound = plan.shared._bound()
    spread = float(row_offset.max() - row_offset.min()) if row_offset.numel() else 0.0
    if 2 * bound + spread > SAFE_SPREAD[dtype]:
        return None
    exponent = -row_offset.to(dtype)
    top = exponent.max()
    weights = torch.exp(exponent - top)
    left = _folded_anchors(plan, plan.batch.anchors, plan.inputs)
    totals = torch.zeros(view.matrix.candidates.shape[0], dtype=dtype, device=plan.batch.device)
    for rows, cols, product in plan.tiles(left, plan.batch.candidates):
        exps = plan.mask_(plan.specs[0], product.exp_(), rows, cols, 0.0)
        if view.transposed:  # anchors along the tile's columns, candidates along its rows
            totals[rows] += exps @ weights[cols]
        else:
            totals[cols] += weights[rows] @ exps
        del product, exps
    result = top + torch.log(totals)
    offset = view.offset
    return result if offset is None else result - offset.detach().to(dtype)


@dataclass(eq=False)
class _ViewSpec:
    """The statistics one fused pass computes for a view, in the order of its outputs."""

    view: _View
    weights: list[float] = field(default_factory=list)
    sums: list[tuple[Callable, tuple[Tensor, ...]]] = field(default_factory=list)
    mean: bool = False

    def __post_init__(self) -> None:
        if self.mean and 1.0 not in self.weights:
            self.weights.append(1.0)  # the mean score is accumulated beside L(1)

    @classmethod
    def of(cls, view: _View) -> _ViewSpec:
        return cls(view, list(view.weights), list(view.sums), view.mean)

    @property
    def output_count(self) -> int:
        return len(self.weights) + len(self.sums) + int(self.mean)

    def name(self, values: Sequence[Tensor]) -> dict:
        keys = [("lse", w) for w in self.weights] + [("sum", k) for k in range(len(self.sums))]
        keys += [("mean",)] if self.mean else []
        return dict(zip(keys, values))


def _as_tensor(value, like: Tensor) -> Tensor:
    return value if isinstance(value, Tensor) else torch.as_tensor(value, dtype=like.dtype, device=like.device)


def _compute(batch: _TiledBatch, specs: list[_ViewSpec]) -> list[list[Tensor]]:
    """Run the fused autograd function and split its flat outputs per view."""
    plan = _Plan(batch, specs)
    outputs = _FusedStatistics.apply(plan, batch.anchors, batch.candidates, *plan.inputs)
    if not isinstance(outputs, tuple):
        outputs = (outputs,)
    split, start = [], 0
    for spec in specs:
        split.append(list(outputs[start : start + spec.output_count]))
        start += spec.output_count
    return split


class _Plan:
    """How a fused pass runs: the tile shape, the excluded entries per tile, the tensor inputs.

    ``inputs`` lists the tensors autograd must differentiate besides ``A`` and
    ``B``: each view's scale (if a tensor), offset (if any) and sum parameters.
    When every view has the same scalar scale it is folded into ``A``
    (``S = (r A) B^T``), saving a multiplication per tile.
    """

    def __init__(self, batch: _TiledBatch, specs: list[_ViewSpec]) -> None:
        self.batch, self.specs = batch, specs
        self.block = batch.block_shape()
        self.inputs: list[Tensor] = []
        self.slots: list[dict] = []
        for spec in specs:
            slot = {"scale": None, "offset": None, "params": []}
            if isinstance(spec.view.scale, Tensor):
                slot["scale"] = self._add(spec.view.scale)
            if spec.view.offset is not None:
                slot["offset"] = self._add(spec.view.offset)
            for _, params in spec.sums:
                slot["params"].append([self._add(_as_tensor(p, batch.anchors)) for p in params])
            self.slots.append(slot)
        self.folded = self._shared_scalar_scale()
        self.exclusions = [self._bucket(*spec.view.excluded()) for spec in specs]
        self.shared = _SharedExponentials(self)
        self.general = any(
            spec.sums or spec.mean or any(not self.shared.handles(i, w) for w in spec.weights)
            for i, spec in enumerate(specs)
        )
        """Whether some statistic takes the running-max path (which reads the tile's scores)."""

    def _add(self, tensor: Tensor) -> int:
        self.inputs.append(tensor)
        return len(self.inputs) - 1

    def _shared_scalar_scale(self) -> bool:
        scales = [spec.view.scale for spec in self.specs]
        if any(isinstance(s, Tensor) and s.ndim > 0 for s in scales):
            return False
        first = scales[0]
        return all(s is first or (not isinstance(s, Tensor) and not isinstance(first, Tensor) and s == first) for s in scales)

    def _bucket(self, rows: Tensor, cols: Tensor) -> dict[tuple[int, int], tuple[Tensor, Tensor]]:
        """The excluded coordinates grouped by tile, as coordinates within the tile."""
        block_rows, block_cols = self.block
        tile_rows, tile_cols = torch.div(rows, block_rows, rounding_mode="floor"), torch.div(cols, block_cols, rounding_mode="floor")
        tiles = tile_rows * (1 + self.batch.candidates.shape[0] // block_cols) + tile_cols
        order = torch.argsort(tiles, stable=True)
        rows, cols, tile_rows, tile_cols = rows[order], cols[order], tile_rows[order], tile_cols[order]
        unique, counts = torch.unique_consecutive(tiles[order], return_counts=True)
        buckets, start = {}, 0
        for count in counts.tolist():
            stop = start + count
            key = (int(tile_rows[start]), int(tile_cols[start]))
            buckets[key] = (rows[start:stop] - key[0] * block_rows, cols[start:stop] - key[1] * block_cols)
            start = stop
        return buckets

    def tiles(self, anchors: Tensor, candidates: Tensor):
        """Yield ``(rows, cols, product)`` for every tile; ``product`` is ``A[I] B[J]^T``.

        The caller must drop its reference to a tile before asking for the
        next (``del product``), so that two are never alive at once.
        """
        block_rows, block_cols = self.block
        for row_start in range(0, anchors.shape[0], block_rows):
            rows = slice(row_start, min(row_start + block_rows, anchors.shape[0]))
            left = anchors[rows]
            for col_start in range(0, candidates.shape[0], block_cols):
                cols = slice(col_start, min(col_start + block_cols, candidates.shape[0]))
                yield rows, cols, left @ candidates[cols].T

    def tile_key(self, rows: slice, cols: slice) -> tuple[int, int]:
        return rows.start // self.block[0], cols.start // self.block[1]

    def scores(self, spec: _ViewSpec, product: Tensor, rows: slice, cols: slice, *, masked: bool,
               scale=None, offset=None, fresh: bool = True) -> Tensor:
        """A view's scores on a tile, in ``G``'s orientation; excluded entries ``-inf`` if ``masked``.

        ``scale`` and ``offset`` default to the view's (pass the detached
        inputs inside the autograd function). The result is a new tensor
        unless ``fresh=False`` and nothing had to change.
        """
        view = spec.view
        scale = view.scale if scale is None else scale
        offset = view.offset if offset is None else offset
        scores = product
        if not self.folded:
            factor = view.anchor_vector(scale, rows, cols) if isinstance(scale, Tensor) and scale.ndim else scale
            scores = scores * factor
        if offset is not None:
            scores = scores - view.candidate_vector(offset, rows, cols)
        if masked:
            if scores is product and fresh:
                scores = scores.clone()
            self.mask_(spec, scores, rows, cols, -math.inf)
        elif scores is product and fresh:
            scores = scores.clone()
        return scores

    def mask_(self, spec: _ViewSpec, tile: Tensor, rows: slice, cols: slice, value: float) -> Tensor:
        """Set the view's excluded entries of ``tile`` to ``value``, in place."""
        index = self.specs.index(spec)
        local = self.exclusions[index].get(self.tile_key(rows, cols))
        if local is not None:
            tile.index_put_(local, torch.tensor(value, dtype=tile.dtype, device=tile.device))
        same = spec.view.same_label(rows, cols)
        if same is not None:
            tile.masked_fill_(same, value)
        return tile


SAFE_SPREAD = {torch.float32: 78.0, torch.float64: 630.0}
"""How far below its shift an exponential may fall and stay a normal float (90 % of ``-log tiny``)."""


class _SharedExponentials:
    r"""The fast path for log-sum-exps: no shift at all, and one exponential per weight for all views.

    Applies when every view has the same scalar scale ``r`` (folded into the
    tiles, ``P = r G``) and the scores provably stay where the float type
    exponentiates them to normal numbers: with
    ``|P_ij| <= bound = max |r a_i| max |b_j|``, a weight ``w > 0`` qualifies
    when ``2 w bound + w (max o - min o) <= SAFE_SPREAD`` (78 in float32, so
    ``e^{w P}`` lies in ``[e^{-39}, e^{39}]``: t >= 0.026 for unit vectors).
    Then, with no running maximum,

    .. math::

        E_{ij} = e^{w P_{ij}}\ (0\text{ where excluded}),\qquad
        L_i(w) = k + \log \sum_j E_{ij} f_j

    with ``f_j = e^{-w o_j - k}`` for column offsets ``o`` (``k = max_j(-w o_j)``,
    so ``f <= 1``), and the transposed view sums the same ``E`` over its other
    axis: one exponential per tile serves both directions of a cross pairing.
    The backward pass recomputes ``E`` once per weight and scales it by a sum
    of outer products, ``dP = E * sum_terms (u f^T)`` with ``u_i = g_i w e^{k - L_i}``.
    Views and weights that do not qualify (per-anchor scales, offsets with a
    gradient, the mean score, too wide a spread) use the running-max path.
    """

    def __init__(self, plan: _Plan) -> None:
        self.plan = plan
        self.groups: dict[float, list[int]] = {}
        self.terms: list[tuple[int, float]] = []
        self.index: dict[tuple[int, float], int] = {}
        if not plan.folded or plan.batch.dtype not in SAFE_SPREAD:
            return
        bound = self._bound()
        for i, spec in enumerate(plan.specs):
            offset = spec.view.offset
            if spec.mean or (offset is not None and offset.requires_grad):
                continue
            offset_spread = 0.0 if offset is None else float(offset.max() - offset.min())
            for w in spec.weights:
                if w > 0 and 2 * w * bound + w * offset_spread <= SAFE_SPREAD[plan.batch.dtype]:
                    self.index[(i, w)] = len(self.terms)
                    self.terms.append((i, w))
                    self.groups.setdefault(w, []).append(self.index[(i, w)])

    def _bound(self) -> float:
        """``max |r a_i| max |b_j|``, slightly enlarged: a bound on every ``|P_ij|``."""
        plan = self.plan
        scale = plan.specs[0].view.scale
        norm = lambda x: float(x.detach().norm(dim=1).max()) if x.shape[0] else 0.0  # noqa: E731
        return abs(float(scale.detach() if isinstance(scale, Tensor) else scale)) * norm(plan.batch.anchors) * norm(plan.batch.candidates) * (1 + 1e-6)

    def handles(self, spec_index: int, weight: float) -> bool:
        return (spec_index, weight) in self.index

    def start(self, left: Tensor, candidates: Tensor, inputs) -> None:
        """Prepare a pass: shifts, offset factors and (forward) accumulators."""
        plan = self.plan
        self.factors, self.offsets, self.sums = [], [], []
        for i, w in self.terms:
            offset = _offset_value(plan, i, inputs)
            length = candidates.shape[0] if plan.specs[i].view.transposed else left.shape[0]
            if offset is None:
                self.factors.append(None)
                self.offsets.append(0.0)
            else:
                exponent = -w * offset
                top = exponent.max()
                self.factors.append(torch.exp(exponent - top))
                self.offsets.append(top)
            self.sums.append(torch.zeros(length, dtype=left.dtype, device=left.device))

    def exponentials(self, product: Tensor, weight: float, rows: slice, cols: slice, last: bool) -> Tensor:
        """``E = exp(w P)`` on a tile, zero where excluded; overwrites ``product`` if it is its ``last`` use."""
        if weight == 1.0:
            exps = product.exp_() if last else torch.exp(product)
        else:
            exps = (product.mul_(weight) if last else torch.mul(product, weight)).exp_()
        return self.plan.mask_(self.plan.specs[0], exps, rows, cols, 0.0)

    def _pieces(self, term: int, rows: slice, cols: slice, anchor_values: Tensor):
        """The term's per-anchor values and candidate factors on a tile, as (row vector, column vector)."""
        spec_index, _ = self.terms[term]
        view = self.plan.specs[spec_index].view
        factor = self.factors[term]
        anchors = anchor_values[view.anchor_slice(rows, cols)]
        candidates = None if factor is None else factor[rows if view.transposed else cols]
        return (candidates, anchors) if view.transposed else (anchors, candidates)

    def forward_tile(self, product: Tensor, rows: slice, cols: slice, keep: bool) -> None:
        """Accumulate the tile's sums; ``keep``: the running-max path needs ``product`` afterwards."""
        for count, (weight, members) in enumerate(self.groups.items(), 1):
            exps = self.exponentials(product, weight, rows, cols, last=not keep and count == len(self.groups))
            # every view excludes the same entries (a transposed view's are the transpose of its rows'),
            # so one masked tile of exponentials serves them all
            for term in members:
                view = self.plan.specs[self.terms[term][0]].view
                factor = self.factors[term]
                if factor is None:
                    part = view.reduce(exps, "sum")
                elif view.transposed:
                    part = factor[rows] @ exps
                else:
                    part = exps @ factor[cols]
                self.sums[term][view.anchor_slice(rows, cols)] += part

    def result(self, spec_index: int, weight: float) -> Tensor:
        term = self.index[(spec_index, weight)]
        return self.offsets[term] + torch.log(self.sums[term])

    def coefficients(self, per_view: list[_Factors]) -> dict[int, Tensor]:
        """``u = g w e^{k - L}`` per differentiated term (zero where ``L = -inf``)."""
        found = {}
        for i, factors in enumerate(per_view):
            for weight, grad, logsumexp in factors.shared:
                term = self.index[(i, weight)]
                exponent = self.offsets[term] - logsumexp
                values = grad * weight * torch.exp(exponent)
                found[term] = torch.where(torch.isfinite(logsumexp), values, 0.0)
        return found

    def backward_tile(self, coefficients: dict[int, Tensor], product: Tensor, rows: slice, cols: slice, keep: bool):
        """``dP`` of the shared terms on a tile: ``E * sum (row vector x column vector)`` per weight."""
        total = None
        groups = [(w, [t for t in members if t in coefficients]) for w, members in self.groups.items()]
        groups = [(w, active) for w, active in groups if active]
        for count, (weight, active) in enumerate(groups, 1):
            row_sum = col_sum = None
            outers = []
            for term in active:
                x, y = self._pieces(term, rows, cols, coefficients[term])
                if y is None:
                    row_sum = x if row_sum is None else row_sum + x
                elif x is None:
                    col_sum = y if col_sum is None else col_sum + y
                else:
                    outers.append((x, y))
            exps = self.exponentials(product, weight, rows, cols, last=not keep and count == len(groups))
            if outers:
                scale = torch.outer(*outers[0])
                for x, y in outers[1:]:
                    scale.addr_(x, y)
                if row_sum is not None:
                    scale.add_(row_sum[:, None])
                if col_sum is not None:
                    scale.add_(col_sum[None, :])
            elif row_sum is not None and col_sum is not None:
                scale = row_sum[:, None] + col_sum[None, :]
            else:
                scale = row_sum[:, None] if row_sum is not None else col_sum[None, :]
            exps.mul_(scale)
            total = exps if total is None else total.add_(exps)
        return total


class _RunningLogSumExp:
    """``log sum exp`` over tiles with a running maximum (the online log-sum-exp)."""

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
        self.total[span] = self.total[span] * decay + exps.sum(reduce)
        if values is not None:
            if self.weighted is None:
                self.weighted = torch.zeros_like(self.total)
            self.weighted[span] = self.weighted[span] * decay + (exps * values).sum(reduce)
        self.maximum[span] = new

    def result(self) -> Tensor:
        return self.maximum + torch.log(self.total)


class _FusedStatistics(torch.autograd.Function):
    """All recorded statistics of all views in one pass over the tiles, and their gradients in one more."""

    @staticmethod
    def forward(ctx, plan: _Plan, anchors: Tensor, candidates: Tensor, *inputs: Tensor):
        ctx.plan = plan
        ctx.set_materialize_grads(False)
        left = _folded_anchors(plan, anchors, inputs)
        lengths = {False: anchors.shape[0], True: candidates.shape[0]}
        dtype, device = anchors.dtype, anchors.device
        state = []
        for i, spec in enumerate(plan.specs):
            n = lengths[spec.view.transposed]
            state.append({
                "lse": [
                    None if plan.shared.handles(i, w) else _RunningLogSumExp(n, dtype, device)
                    for w in spec.weights
                ],
                "sums": [torch.zeros(n, dtype=dtype, device=device) for _ in spec.sums],
            })
        plan.shared.start(left, candidates, inputs)
        for rows, cols, product in plan.tiles(left, candidates):
            plan.shared.forward_tile(product, rows, cols, keep=plan.general)
            for spec, slot, acc in zip(plan.specs, plan.slots, state):
                _forward_tile(plan, spec, slot, acc, inputs, product, rows, cols)
            del product
        outputs = []
        saved = []
        for i, (spec, acc) in enumerate(zip(plan.specs, state)):
            logsumexps = [
                plan.shared.result(i, w) if running is None else running.result()
                for w, running in zip(spec.weights, acc["lse"])
            ]
            outputs += logsumexps + acc["sums"]
            if spec.mean:
                running = acc["lse"][spec.weights.index(1.0)]
                outputs.append(running.weighted / running.total)
            saved += logsumexps + ([outputs[-1]] if spec.mean else [])
        ctx.save_for_backward(anchors, candidates, *inputs, *saved)
        ctx.input_count = len(inputs)
        return tuple(outputs)

    @staticmethod
    def backward(ctx, *grads):
        plan: _Plan = ctx.plan
        anchors, candidates, *rest = ctx.saved_tensors
        inputs, saved = rest[: ctx.input_count], rest[ctx.input_count :]
        gradients = _Gradients(plan, anchors, candidates, inputs, ctx.needs_input_grad[3:])
        per_view = _backward_factors(plan, grads, saved)
        if all(factors.empty and not factors.shared for factors in per_view):
            return (None, None, None, *[None] * len(inputs))
        left = _folded_anchors(plan, anchors, inputs)
        plan.shared.start(left, candidates, inputs)
        coefficients = plan.shared.coefficients(per_view)
        general = not all(factors.empty for factors in per_view)
        for rows, cols, product in plan.tiles(left, candidates):
            tile_gradient = plan.shared.backward_tile(coefficients, product, rows, cols, keep=general)
            for spec, slot, factors in zip(plan.specs, plan.slots, per_view):
                if factors.empty:
                    continue
                d_scores = _backward_tile(plan, spec, slot, factors, inputs, product, rows, cols, gradients)
                tile_gradient = gradients.add_view(spec, slot, d_scores, product, rows, cols, tile_gradient)
            gradients.add_tile(tile_gradient, left, candidates, rows, cols)
            del product, tile_gradient
        return (None, *gradients.result(ctx.needs_input_grad[1], ctx.needs_input_grad[2]))


def _folded_anchors(plan: _Plan, anchors: Tensor, inputs: Sequence[Tensor]) -> Tensor:
    """``r A`` when the scale is folded into the anchors, else ``A``."""
    if not plan.folded:
        return anchors
    scale = _scale_value(plan, 0, inputs)
    return anchors * scale


def _scale_value(plan: _Plan, index: int, inputs: Sequence[Tensor]):
    slot = plan.slots[index]
    if slot["scale"] is None:
        return plan.specs[index].view.scale
    return inputs[slot["scale"]].detach()


def _offset_value(plan: _Plan, index: int, inputs: Sequence[Tensor]) -> Tensor | None:
    slot = plan.slots[index]
    return None if slot["offset"] is None else inputs[slot["offset"]].detach()


def _tile_scores(plan, spec, slot, inputs, product, rows, cols, masked):
    index = plan.specs.index(spec)
    scale = _scale_value(plan, index, inputs)
    if isinstance(scale, Tensor) and scale.ndim == 0:
        scale = scale.to(product.dtype)
    return plan.scores(spec, product, rows, cols, masked=masked, scale=scale, offset=_offset_value(plan, index, inputs))


def _forward_tile(plan, spec, slot, acc, inputs, product, rows, cols) -> None:
    view = spec.view
    span = view.anchor_slice(rows, cols)
    dim = view.anchor_axis
    if spec.sums:
        scores = _tile_scores(plan, spec, slot, inputs, product, rows, cols, masked=False)
        for k, (fn, _) in enumerate(spec.sums):
            params = [inputs[i].detach() for i in slot["params"][k]]
            values = fn(scores, *params)
            if values.data_ptr() == scores.data_ptr():
                values = values.clone()
            values = plan.mask_(spec, values.expand_as(scores).contiguous(), rows, cols, 0.0)
            acc["sums"][k][span] += view.reduce(values, "sum")
    if all(running is None for running in acc["lse"]):
        return
    scores = _tile_scores(plan, spec, slot, inputs, product, rows, cols, masked=True)
    finite = scores.clamp(min=torch.finfo(scores.dtype).min) if spec.mean else None
    for w, running in zip(spec.weights, acc["lse"]):
        if running is None:
            continue  # computed by the shared exponentials
        weighted = scores if w == 1.0 else _weighted(plan, spec, product, w, rows, cols, slot, inputs)
        running.add(weighted, span, dim, values=finite if w == 1.0 else None)


def _weighted(plan, spec, product, weight, rows, cols, slot, inputs) -> Tensor:
    """``w S`` with excluded entries ``-inf`` (weighting first, so that ``w = 0`` leaves no NaN)."""
    scores = _tile_scores(plan, spec, slot, inputs, product, rows, cols, masked=False)
    return plan.mask_(spec, scores.mul_(weight), rows, cols, -math.inf)


@dataclass
class _Factors:
    """The per-anchor factors of one view's backward: ``(w, dL/dL(w), L(w))`` and the rest."""

    logsumexps: list[tuple[float, Tensor, Tensor]]
    shared: list[tuple[float, Tensor, Tensor]]
    """The log-sum-exps the shared exponentials differentiate (moved out of ``logsumexps``)."""
    sums: list[tuple[int, Tensor]]
    mean: tuple[Tensor, Tensor, Tensor] | None

    @property
    def empty(self) -> bool:
        """Nothing for the running-max path to differentiate."""
        return not (self.logsumexps or self.sums or self.mean)


def _backward_factors(plan: _Plan, grads, saved) -> list[_Factors]:
    per_view, g_start, s_start = [], 0, 0
    for i, spec in enumerate(plan.specs):
        n_lse, n_sum = len(spec.weights), len(spec.sums)
        lse_grads = grads[g_start : g_start + n_lse]
        sum_grads = grads[g_start + n_lse : g_start + n_lse + n_sum]
        mean_grad = grads[g_start + n_lse + n_sum] if spec.mean else None
        logsumexps = saved[s_start : s_start + n_lse]
        mean_value = saved[s_start + n_lse] if spec.mean else None
        g_start += spec.output_count
        s_start += n_lse + int(spec.mean)
        factors = _Factors(
            [(w, g, L) for w, g, L in zip(spec.weights, lse_grads, logsumexps) if g is not None and w != 0.0],
            [],
            [(k, g) for k, g in enumerate(sum_grads) if g is not None],
            None,
        )
        if mean_grad is not None:
            factors.mean = (mean_grad, logsumexps[spec.weights.index(1.0)], mean_value)
        factors.shared = [term for term in factors.logsumexps if plan.shared.handles(i, term[0])]
        factors.logsumexps = [term for term in factors.logsumexps if not plan.shared.handles(i, term[0])]
        per_view.append(factors)
    return per_view


def _backward_tile(plan, spec, slot, factors: _Factors, inputs, product, rows, cols, gradients) -> Tensor | None:
    """``dS`` of one view on one tile (in ``G``'s orientation), summed over its statistics."""
    view = spec.view
    d_scores = None

    def add(term: Tensor) -> None:
        nonlocal d_scores
        d_scores = term if d_scores is None else d_scores.add_(term)

    if factors.logsumexps or factors.mean:
        masked = _tile_scores(plan, spec, slot, inputs, product, rows, cols, masked=True)
    for weight, grad, logsumexp in factors.logsumexps:
        # d L(w) / d S_ij = w exp(w S_ij - L): one exponential, the row factor folded in where positive.
        scores = masked if weight == 1.0 else _weighted(plan, spec, product, weight, rows, cols, slot, inputs)
        coefficient = grad * weight
        exps = scores.sub(view.anchor_vector(logsumexp, rows, cols)).exp_()
        add(exps.mul_(view.anchor_vector(coefficient, rows, cols)))
    if factors.mean is not None:
        grad, logsumexp, mean = factors.mean
        finite = masked.clamp(min=torch.finfo(masked.dtype).min)
        weights = masked.sub(view.anchor_vector(logsumexp, rows, cols)).exp_()
        term = finite.sub_(view.anchor_vector(mean, rows, cols)).add_(1.0).mul_(weights)
        add(term.mul_(view.anchor_vector(grad, rows, cols)))
    for k, grad in factors.sums:
        add(gradients.sum_tile(plan, spec, slot, k, grad, inputs, product, rows, cols))
    return d_scores


class _Gradients:
    """Accumulates ``dA``, ``dB`` and the inputs' gradients over the tiles of the backward pass."""

    def __init__(self, plan: _Plan, anchors: Tensor, candidates: Tensor, inputs, needs) -> None:
        self.plan, self.anchors, self.candidates, self.inputs, self.needs = plan, anchors, candidates, inputs, needs
        self.d_left = torch.zeros_like(anchors)
        self.d_candidates = torch.zeros_like(candidates)
        self.d_inputs: list[Tensor | None] = [None] * len(inputs)

    def _accumulate(self, index: int, value: Tensor, where=None) -> None:
        if where is None:
            self.d_inputs[index] = value if self.d_inputs[index] is None else self.d_inputs[index] + value
            return
        if self.d_inputs[index] is None:
            self.d_inputs[index] = torch.zeros_like(self.inputs[index])
        self.d_inputs[index][where] += value.to(self.inputs[index].dtype)

    def sum_tile(self, plan, spec, slot, k, grad, inputs, product, rows, cols) -> Tensor:
        """``g_i f'(S_ij)`` on a tile (zero where excluded), and the tile's share of ``f``'s parameters' gradients."""
        view = spec.view
        fn, _ = spec.sums[k]
        indices = slot["params"][k]
        scores = _tile_scores(plan, spec, slot, inputs, product, rows, cols, masked=False)
        weights = plan.mask_(spec, view.anchor_vector(grad, rows, cols).expand_as(scores).clone(), rows, cols, 0.0)
        with torch.enable_grad():
            scores = scores.detach().requires_grad_(True)
            params = [inputs[i].detach().requires_grad_(self.needs[i]) for i in indices]
            wanted = [scores] + [p for p in params if p.requires_grad]
            values = fn(scores, *params)
            found = torch.autograd.grad(values, wanted, grad_outputs=weights, allow_unused=True)
        for index, param_grad in zip([i for i in indices if self.needs[i]], found[1:]):
            if param_grad is not None:
                self._accumulate(index, param_grad)
        return found[0]

    def add_view(self, spec, slot, d_scores, product, rows, cols, tile_gradient):
        """Fold one view's ``dS`` into the tile's ``dG`` (or ``d(rG)`` when the scale is folded)."""
        if d_scores is None:
            return tile_gradient
        view = spec.view
        if slot["offset"] is not None and self.needs[slot["offset"]]:
            # S = ... - o_j: d o_j = -sum over the view's anchors.
            other = rows if view.transposed else cols
            self._accumulate(slot["offset"], -d_scores.sum(view.anchor_axis), where=other)
        if not self.plan.folded:
            scale = view.scale if slot["scale"] is None else self.inputs[slot["scale"]].detach()
            if slot["scale"] is not None and self.needs[slot["scale"]]:
                # S = r G: d r = sum dS G (per anchor, or in total for one scalar).
                products = d_scores * product
                if scale.ndim:
                    self._accumulate(slot["scale"], view.reduce(products, "sum"), where=view.anchor_slice(rows, cols))
                else:
                    self._accumulate(slot["scale"], products.sum().to(scale.dtype))
            if isinstance(scale, Tensor) and scale.ndim:
                d_scores = d_scores * view.anchor_vector(scale.to(d_scores.dtype), rows, cols)
            else:
                d_scores = d_scores * scale
        return d_scores if tile_gradient is None else tile_gradient.add_(d_scores)

    def add_tile(self, tile_gradient, left, candidates, rows, cols) -> None:
        if tile_gradient is None:
            return
        self.d_left[rows] += tile_gradient @ candidates[cols]
        self.d_candidates[cols] += tile_gradient.T @ left[rows]

    def result(self, need_anchors: bool, need_candidates: bool) -> list:
        """``(dA, dB, *d inputs)``; a folded scale ``r`` gets ``sum (dA' * A)`` (``A' = r A``)."""
        plan = self.plan
        d_anchors = self.d_left
        if plan.folded:
            index = plan.slots[0]["scale"]
            scale = _scale_value(plan, 0, self.inputs)
            if index is not None and self.needs[index]:
                shared = (self.d_left * self.anchors).sum().to(scale.dtype)
                self._accumulate(index, shared)
                for slot in plan.slots[1:]:  # the same scale tensor listed again by another view
                    if slot["scale"] is not None and slot["scale"] != index:
                        self.d_inputs[slot["scale"]] = torch.zeros_like(self.inputs[slot["scale"]])
            d_anchors = self.d_left * scale
        return [
            d_anchors if need_anchors else None,
            self.d_candidates if need_candidates else None,
            *[g if need else None for g, need in zip(self.d_inputs, self.needs)],
        ]
