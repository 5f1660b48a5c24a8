r"""The fast path for log-sum-exps: no running maximum, one exponential per tile and weight.

It applies where the scores provably stay where the float type exponentiates
them to normal numbers. A view's scores are ``P = r G`` for its inverse
temperature ``r`` (one, or one per anchor); with
``|P_ij| <= bound = max |r| max |a_i| max |b_j|``, a weight ``w > 0`` qualifies
when ``2 w bound + w (max o - min o) <= SAFE_SPREAD`` (78 in float32, so
``e^{w P}`` lies in ``[e^{-39}, e^{39}]``: t >= 0.026 for unit vectors).
Then, with no running maximum,

.. math::

    E_{ij} = e^{w P_{ij}}\ (0\text{ where excluded}),\qquad
    L_i(w) = k + \log \sum_j E_{ij} f_j

with ``f_j = e^{-w o_j - k}`` for column offsets ``o`` (``k = max_j(-w o_j)``,
so ``f <= 1``). Where every view has the same scalar scale (folded into the
tiles, ``P = r G``), the transposed view sums the same ``E`` over its other
axis: one exponential per tile serves both directions of a cross pairing.
Per-anchor scales (iSogCLR's temperatures) give each view its exponential
``e^{w r_i G_ij}``. The negatives' mean score of a view without offsets
comes with its ``L(1)``: ``m_i = sum_j E_ij P_ij / sum_j E_ij``.
The backward pass recomputes ``E`` and scales it by a sum of outer products,
``dP = E * sum_terms (u f^T)`` with ``u_i = g_i w e^{k - L_i}`` (times ``r_i``
where the scale is not folded, which makes it ``dG``).
Views and weights that do not qualify (scales or offsets with a gradient
where the scale is not folded, too wide a spread) take the running-max path.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cached_property, partial

import torch
from torch import Tensor

from . import compiled_tiles
from .vocabulary import Factors, PlanProtocol, Tile, ViewPassProtocol, ViewProtocol

SAFE_SPREAD = {torch.float32: 78.0, torch.float64: 630.0}
"""How far below its shift an exponential may fall and stay a normal float (90 % of ``-log tiny``)."""


@dataclass(frozen=True)
class Exponent:
    """What one tile exponential is of: ``w P`` for every view (``view`` is ``None``: the folded scale) or
    ``w r G`` for one view's own scale."""

    weight: float
    view: int | None


def bound_inputs(plan: PlanProtocol) -> dict[object, Tensor]:
    """The device values :class:`SharedExponentials` decides with, as 0-d tensors not yet read: the largest
    anchor and candidate norms, each view's largest scale (where a tensor) and its offsets' spread. The plan
    reads them with its other values in one synchronization and hands them over as numbers."""
    values: dict[object, Tensor] = {}
    for name, features in (("anchors", plan.batch.anchors), ("candidates", plan.batch.candidates)):
        if features.shape[0]:
            values[name] = features.detach().norm(dim=1).max()
    for i, request in enumerate(plan.requests):
        scale, offset = request.view.scale, request.view.offset
        if isinstance(scale, Tensor) and scale.numel():
            values["scale", i] = scale.detach().abs().max()
        if offset is not None and not offset.requires_grad and plan.batch.dtype in SAFE_SPREAD:
            values["offset", i] = _spread(offset)
    return values


def _spread(values: Tensor) -> Tensor:
    return values.max() - values.min()


class SharedExponentials:
    """The log-sum-exps of a plan that take the fast path (its *terms*), and their accumulators.

    ``values``: :func:`bound_inputs` read as numbers (read here, one by one, where not given).
    """

    def __init__(self, plan: PlanProtocol, values: dict[object, float] | None = None) -> None:
        self.plan = plan
        self.values = values or {}
        self.groups: dict[Exponent, list[int]] = {}
        """The terms of each exponential: one per tile serves them all."""
        self.terms: list[tuple[int, float]] = []
        """(view, weight) of each term."""
        self.index: dict[tuple[int, float], int] = {}
        self.means: set[int] = set()
        """The terms that also accumulate their view's mean score (weight 1, no offsets)."""
        self.compiled = plan.batch.tiling.compiles(plan.batch.device)
        """Whether each tile's work runs through the compiled functions of :mod:`.compiled_tiles`."""
        if plan.batch.dtype not in SAFE_SPREAD:
            return
        for i, request in enumerate(plan.requests):
            offset, scale = request.view.offset, request.view.scale
            if offset is not None and offset.requires_grad:
                continue
            if not plan.folded and isinstance(scale, Tensor) and scale.requires_grad:
                continue
            offset_spread = 0.0 if offset is None else self._read(("offset", i), partial(_spread, offset))
            bound = self.bound(i)
            for w in request.weights:
                if request.mean and w == 1.0 and offset is not None:
                    continue  # its mean score takes the running-max path, with L(1) beside it
                if w > 0 and 2 * w * bound + w * offset_spread <= SAFE_SPREAD[plan.batch.dtype]:
                    term = self.index[(i, w)] = len(self.terms)
                    self.terms.append((i, w))
                    self.groups.setdefault(Exponent(w, None if plan.folded else i), []).append(term)
                    if request.mean and w == 1.0 and offset is None:
                        self.means.add(term)

    @cached_property
    def norms(self) -> float:
        """``max |a_i| max |b_j|``, slightly enlarged: every view's bound before its scale."""
        batch = self.plan.batch
        norm = lambda name, x: self._read(name, lambda: x.detach().norm(dim=1).max()) if x.shape[0] else 0.0  # noqa: E731
        return norm("anchors", batch.anchors) * norm("candidates", batch.candidates) * (1 + 1e-6)

    def bound(self, view_index: int) -> float:
        """``max |r| max |a_i| max |b_j|``, slightly enlarged: a bound on every ``|P_ij|`` of a view."""
        scale = self.plan.requests[view_index].view.scale
        if isinstance(scale, Tensor) and scale.numel():
            largest = self._read(("scale", view_index), lambda: scale.detach().abs().max())
        else:
            largest = abs(float(scale))
        return largest * self.norms

    def _read(self, key: object, compute: Callable[[], Tensor]) -> float:
        """The value :func:`bound_inputs` names ``key``: as the plan read it, else read now."""
        return self.values[key] if key in self.values else float(compute())

    def handles(self, view_index: int, weight: float) -> bool:
        return (view_index, weight) in self.index

    def handles_mean(self, view_index: int) -> bool:
        return self.index.get((view_index, 1.0)) in self.means

    def start(self, views: Sequence[ViewPassProtocol], rows: int, cols: int) -> None:
        """Prepare a pass over an ``rows`` x ``cols`` product: offset factors, scales and (forward) accumulators."""
        self.views = views
        self.buffers: list[Tensor | None] = [None, None, None]
        self.factors: list[Tensor | None] = []
        self.offsets: list[float | Tensor] = []
        self.sums: list[Tensor] = []
        self.weighted = {}
        dtype, device = self.plan.batch.dtype, self.plan.batch.device
        for term, (i, w) in enumerate(self.terms):
            offset = views[i].offset
            if offset is None:
                self.factors.append(None)
                self.offsets.append(0.0)
            else:
                exponent = -w * offset
                top = exponent.max()
                self.factors.append(torch.exp(exponent - top))
                self.offsets.append(top)
            length = cols if views[i].view.transposed else rows
            self.sums.append(torch.zeros(length, dtype=dtype, device=device))
            if term in self.means:
                self.weighted[term] = torch.zeros(length, dtype=dtype, device=device)

    def _unfolded_scale(self, view_index: int) -> float | Tensor:
        """A view's own scale where it is not folded into the tiles (1 where it is)."""
        if self.plan.folded:
            return 1.0
        scale = self.views[view_index].scale
        return scale.to(self.plan.batch.dtype) if isinstance(scale, Tensor) else scale

    def release(self) -> None:
        """Drop the scratch buffers at the end of a pass (the plan lives on until the backward pass)."""
        self.buffers = [None, None, None]

    def buffer(self, slot: int, tile: Tile) -> Tensor:
        """Tile-sized scratch space ``slot`` (0 to 2), reused from tile to tile of a pass.

        A fresh tile-sized tensor per operation costs more than the operation: each is a new
        allocation whose pages the kernel maps on first touch.
        """
        shape = (tile.rows.stop - tile.rows.start, tile.cols.stop - tile.cols.start)
        flat = self.buffers[slot]
        if flat is None or flat.numel() < shape[0] * shape[1]:
            flat = self.buffers[slot] = tile.product.new_empty(shape[0] * shape[1])
        return flat[: shape[0] * shape[1]].view(shape)

    def factor(self, tile: Tile, exponent: Exponent) -> float | Tensor:
        """The factor of the product in the exponent on a tile: the weight, times the view's own scale (per
        anchor, shaped to broadcast) where the scale is not folded."""
        factor: float | Tensor = exponent.weight
        if exponent.view is not None:
            scale = self._unfolded_scale(exponent.view)
            if isinstance(scale, Tensor) and scale.ndim:
                scale = self.plan.requests[exponent.view].view.anchor_vector(scale, tile)
            factor = scale * factor
        return factor

    def exponentials(self, tile: Tile, exponent: Exponent, last: bool, slot: int = 0) -> Tensor:
        """``E`` on a tile, zero where excluded: in the product if it is its ``last`` use, else in buffer ``slot``."""
        product = tile.product
        factor = self.factor(tile, exponent)
        out = product if last else self.buffer(slot, tile)
        if isinstance(factor, float) and factor == 1.0:
            exps = torch.exp(product, out=out)
        else:
            exps = torch.mul(product, factor, out=out).exp_()
        # every view excludes the same entries (a transposed view's are the transpose of its rows'),
        # so one mask serves them all
        return self.plan.mask_(0, exps, tile, 0.0)

    def compiled_exponent(self, tile: Tile, exponent: Exponent) -> compiled_tiles.TileExponent:
        """What :func:`.compiled_tiles.exponentials` makes ``E`` of on a tile (the mask as flat positions and labels:
        every view excludes the same entries)."""
        flat, labels = self.plan.excluded(0, tile)
        return tile.product, self.factor(tile, exponent), flat, labels

    def _view(self, term: int) -> ViewProtocol:
        return self.plan.requests[self.terms[term][0]].view

    def forward_tile(self, tile: Tile, keep: bool) -> None:
        """Accumulate the tile's sums; ``keep``: the running-max path needs the product afterwards."""
        for count, (exponent, members) in enumerate(self.groups.items(), 1):
            if self.compiled:
                self._forward_compiled(tile, exponent, members)
                continue
            weighs_product = any(term in self.means for term in members)
            last = not keep and not weighs_product and count == len(self.groups)
            exps = self.exponentials(tile, exponent, last=last)
            for term in members:
                view, factor = self._view(term), self.factors[term]
                sums = self.sums[term][view.anchor_slice(tile)]
                if factor is None:
                    sums.add_(view.reduce(exps))
                elif view.transposed:
                    sums.addmv_(exps.T, factor[tile.rows])
                else:
                    sums.addmv_(exps, factor[tile.cols])
                if term in self.means:
                    weighted = torch.mul(exps, tile.product, out=self.buffer(1, tile))
                    self.weighted[term][view.anchor_slice(tile)].add_(view.reduce(weighted))

    def _forward_compiled(self, tile: Tile, exponent: Exponent, members: list[int]) -> None:
        """:meth:`forward_tile` for one exponential through :func:`.compiled_tiles.forward_group`."""
        terms, weights = [], []
        for term in members:
            view, factor = self._view(term), self.factors[term]
            terms.append((view.transposed, term in self.means))
            weights.append(None if factor is None else factor[view.candidate_slice(tile)])
        parts = iter(
            compiled_tiles.run(
                compiled_tiles.forward_group, self.compiled_exponent(tile, exponent), tuple(terms), weights
            )
        )
        for term in members:
            span = self._view(term).anchor_slice(tile)
            self.sums[term][span].add_(next(parts))
            if term in self.means:
                self.weighted[term][span].add_(next(parts))

    def result(self, view_index: int, weight: float) -> Tensor:
        term = self.index[(view_index, weight)]
        return self.offsets[term] + torch.log(self.sums[term])

    def mean(self, view_index: int) -> Tensor:
        """The view's negatives' mean score, ``sum_j E_ij P_ij / sum_j E_ij`` (times ``r_i`` where not folded)."""
        term = self.index[(view_index, 1.0)]
        return self.weighted[term] / self.sums[term] * self._unfolded_scale(view_index)

    def coefficients(self, factors: list[Factors]) -> dict[int, Tensor]:
        """``u = g w e^{k - L}`` per differentiated term, times the anchor's scale where it is not folded
        (zero where ``L = -inf``)."""
        found = {}
        for i, view_factors in enumerate(factors):
            for weight, grad, logsumexp in view_factors.shared:
                term = self.index[(i, weight)]
                values = grad * weight * torch.exp(self.offsets[term] - logsumexp) * self._unfolded_scale(i)
                found[term] = torch.where(torch.isfinite(logsumexp), values, 0.0)
        return found

    def _pieces(self, term: int, tile: Tile, anchor_values: Tensor) -> tuple[Tensor | None, Tensor | None]:
        """The term's per-anchor values and candidate factors on a tile, as (row vector, column vector)."""
        view, factor = self._view(term), self.factors[term]
        anchors = anchor_values[view.anchor_slice(tile)]
        candidates = None if factor is None else factor[view.candidate_slice(tile)]
        return (candidates, anchors) if view.transposed else (anchors, candidates)

    def active_groups(self, coefficients: dict[int, Tensor]) -> list[tuple[Exponent, list[int]]]:
        """The exponentials the backward pass computes, each with its differentiated terms."""
        groups = [(e, [t for t in members if t in coefficients]) for e, members in self.groups.items()]
        return [(e, active) for e, active in groups if active]

    def backward_tile(
        self,
        coefficients: dict[int, Tensor],
        tile: Tile,
        keep: bool,
        observe: Callable[[Exponent, Tensor, Tile], None] | None = None,
    ) -> Tensor | None:
        """``dP`` (``dG`` where the scale is not folded) of the shared terms on a tile: ``E * sum (row vector x
        column vector)`` per exponential.

        ``observe(exponent, E, tile)`` sees each exponential, masked, before it is scaled.
        """
        total: Tensor | None = None
        groups = self.active_groups(coefficients)
        for count, (exponent, active) in enumerate(groups, 1):
            row_sum = col_sum = None
            outers = []
            for term in active:
                x, y = self._pieces(term, tile, coefficients[term])  # the anchors' side is never None
                if x is not None and y is not None:
                    outers.append((x, y))
                elif x is not None:
                    row_sum = x if row_sum is None else row_sum + x
                elif y is not None:
                    col_sum = y if col_sum is None else col_sum + y
            if self.compiled:
                scaled, exps = compiled_tiles.run(
                    compiled_tiles.backward_group,
                    self.compiled_exponent(tile, exponent),
                    row_sum,
                    col_sum,
                    outers,
                    observe is not None,
                )
                if observe is not None:
                    observe(exponent, exps, tile)
                total = scaled if total is None else total.add_(scaled)
                continue
            # the first exponential holds the total; the others come in the second buffer
            exps = self.exponentials(
                tile, exponent, last=not keep and count == len(groups), slot=int(total is not None)
            )
            if observe is not None:
                observe(exponent, exps, tile)
            if outers:
                scale = torch.outer(*outers[0], out=self.buffer(2, tile))
                for x, y in outers[1:]:
                    scale.addr_(x, y)
                if row_sum is not None:
                    scale.add_(row_sum[:, None])
                if col_sum is not None:
                    scale.add_(col_sum[None, :])
            elif row_sum is not None and col_sum is not None:
                scale = torch.add(row_sum[:, None], col_sum[None, :], out=self.buffer(2, tile))
            elif row_sum is not None:
                scale = row_sum[:, None]
            elif col_sum is not None:
                scale = col_sum[None, :]
            else:
                raise RuntimeError("an exponential of the backward pass with no differentiated term")
            exps.mul_(scale)
            total = exps if total is None else total.add_(exps)
        return total
