"""The backward pass of the fused statistics: per-anchor factors, each tile's ``dS``, and their accumulation.

Each statistic's derivative with respect to ``S_ij`` is a per-row factor
times a function of ``S_ij``:

* ``dL_i(w) / dS_ij = w e^{w S_ij - L_i(w)}``,
* ``dF_i(f) / dS_ij = f'(S_ij)`` (by autograd on the tile, which also gives
  the gradient of ``f``'s own parameters, SigLIP's bias),
* ``dm_i / dS_ij = e^{S_ij - L_i(1)} (1 + S_ij - m_i)``,
* a declared statistic's: its declaration's backward factor
  (:mod:`~uncurated.objectives.declarations`),

and zero on excluded entries. :func:`backward_tile` forms ``dS`` for one
view on one tile; :class:`Gradients` maps it back to the inner products
(``dG = r dS`` for the rows view, ``c dS'^T`` for the transposed one) and
accumulates ``dA += dG B[J]``, ``dB[J] += dG^T A[I]``, the temperature
gradient ``sum dS G`` and the offsets' ``-sum dS``.

Memory: two (R or C) x d accumulators, one when ``A`` and ``B`` are the same
tensor (SimCLR's two views), whose two gradients then go into one buffer;
nothing else of that size (a folded scale is applied per tile).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

from .plan import Plan, ViewPass
from .vocabulary import DeclaredFactor, Factors, Tile


def split_declared(saved: Sequence[Tensor], sizes: Sequence[int]) -> list[tuple[Tensor, ...]]:
    """The saved tensors of the declared statistics, one group (value, then the accumulator's) per statistic."""
    groups, start = [], 0
    for size in sizes:
        groups.append(tuple(saved[start : start + size]))
        start += size
    return groups


def backward_factors(
    plan: Plan, grads: Sequence[Tensor | None], saved: Sequence[Tensor], declared: Sequence[tuple[Tensor, ...]]
) -> list[Factors]:
    """Split the Function's output gradients, saved log-sum-exps and declared statistics per view."""
    per_view, g_start, s_start = [], 0, 0
    declared_saved = iter(declared)
    for i, request in enumerate(plan.requests):
        n_lse, n_sum = len(request.weights), len(request.sums)
        lse_grads = grads[g_start : g_start + n_lse]
        sum_grads = grads[g_start + n_lse : g_start + n_lse + n_sum]
        mean_grad = grads[g_start + n_lse + n_sum] if request.mean else None
        declared_start = g_start + n_lse + n_sum + int(request.mean)
        declared_grads = grads[declared_start : declared_start + len(request.declared)]
        logsumexps = saved[s_start : s_start + n_lse]
        g_start += request.output_count
        s_start += n_lse + int(request.mean)
        factors = Factors(sums=[(k, g) for k, g in enumerate(sum_grads) if g is not None])
        for weight, lse_grad, logsumexp in zip(request.weights, lse_grads, logsumexps, strict=True):
            if lse_grad is None or weight == 0.0:
                continue
            (factors.shared if plan.shared.handles(i, weight) else factors.logsumexps).append(
                (weight, lse_grad, logsumexp)
            )
        if mean_grad is not None:
            factors.mean = (mean_grad, logsumexps[request.weights.index(1.0)], saved[s_start - 1])
        for declaration, grad in zip(request.declared, declared_grads, strict=True):
            value, *kept = next(declared_saved)
            if grad is not None:
                factors.declared.append(DeclaredFactor(declaration, grad, value, tuple(kept)))
        per_view.append(factors)
    return per_view


def backward_tile(view: ViewPass, factors: Factors, tile: Tile, gradients: Gradients) -> Tensor | None:
    """``dS`` of one view on one tile (in ``G``'s orientation), summed over its statistics."""
    geometry = view.view
    d_scores = None

    def add(term: Tensor) -> None:
        nonlocal d_scores
        d_scores = term if d_scores is None else d_scores.add_(term)

    if factors.logsumexps or factors.mean:
        masked = view.scores(tile, masked=True)
    for weight, grad, logsumexp in factors.logsumexps:
        # d L(w) / d S_ij = w exp(w S_ij - L): one exponential, the row factor folded in where positive.
        scores = masked if weight == 1.0 else view.weighted(tile, weight)
        exps = scores.sub(geometry.anchor_vector(logsumexp, tile)).exp_()
        add(exps.mul_(geometry.anchor_vector(grad * weight, tile)))
    if factors.mean is not None:
        grad, logsumexp, mean = factors.mean
        finite = masked.clamp(min=torch.finfo(masked.dtype).min)
        weights = masked.sub(geometry.anchor_vector(logsumexp, tile)).exp_()
        term = finite.sub_(geometry.anchor_vector(mean, tile)).add_(1.0).mul_(weights)
        add(term.mul_(geometry.anchor_vector(grad, tile)))
    for k, grad in factors.sums:
        add(gradients.sum_tile(view, k, grad, tile))
    if factors.declared:
        add(declared_tile(view, factors.declared, tile))
    return d_scores


def declared_tile(view: ViewPass, declared: Sequence[DeclaredFactor], tile: Tile) -> Tensor:
    """``dS`` of a view's declared statistics on a tile (in ``G``'s orientation): each declaration's backward factor,
    zero off the negatives."""
    scores, negatives = view.anchored(tile)
    span = view.view.anchor_slice(tile)
    d_scores = torch.zeros_like(scores)

    def column(values: Tensor) -> Tensor:
        return values[span, None]

    for factor in declared:
        term = factor.declaration.backward(
            scores, negatives, column(factor.value), tuple(map(column, factor.saved)), column(factor.grad)
        )
        d_scores += torch.where(negatives, term, 0.0)
    return d_scores.T if view.view.transposed else d_scores


class Gradients:
    """Accumulates ``dA``, ``dB`` and the inputs' gradients over the tiles of the backward pass."""

    def __init__(
        self,
        plan: Plan,
        anchors: Tensor,
        candidates: Tensor,
        inputs: Sequence[Tensor],
        needs: Sequence[bool],
        *,
        same: bool = False,
    ) -> None:
        """``same``: ``anchors`` and ``candidates`` are one tensor, whose whole gradient goes to the anchors."""
        self.plan, self.anchors, self.inputs, self.needs, self.same = plan, anchors, inputs, needs, same
        self.candidates_dtype = candidates.dtype
        # Accumulated over tiles in the statistics' type, returned in the features'.
        self.d_anchors = torch.zeros_like(anchors, dtype=plan.batch.dtype)
        self.d_candidates = self.d_anchors if same else torch.zeros_like(candidates, dtype=plan.batch.dtype)
        self.d_inputs: list[Tensor | None] = [None] * len(inputs)

    def _accumulate(self, index: int, value: Tensor, where=None) -> None:
        current = self.d_inputs[index]
        if where is None:
            self.d_inputs[index] = value if current is None else current + value
            return
        if current is None:
            current = self.d_inputs[index] = torch.zeros_like(self.inputs[index])
        current[where].add_(value.to(self.inputs[index].dtype))

    def sum_tile(self, view: ViewPass, k: int, grad: Tensor, tile: Tile) -> Tensor:
        """``g_i f'(S_ij)`` on a tile (zero where excluded), and the tile's share of ``f``'s parameters' gradients."""
        fn = view.request.sums[k].fn
        positions = view.slots.params[k]
        scores = view.scores(tile, masked=False)
        weights = view.mask_(view.view.anchor_vector(grad, tile).expand_as(scores).clone(), tile, 0.0)
        with torch.enable_grad():
            scores = scores.detach().requires_grad_(True)
            params = [
                value.detach().requires_grad_(self.needs[i]) for i, value in zip(positions, view.params[k], strict=True)
            ]
            wanted = [scores] + [p for p in params if p.requires_grad]
            values = fn(scores, *params)
            found = torch.autograd.grad(values, wanted, grad_outputs=weights, allow_unused=True)
        for index, param_grad in zip([i for i in positions if self.needs[i]], found[1:], strict=True):
            if param_grad is not None:
                self._accumulate(index, param_grad)
        return found[0]

    def add_view(self, view: ViewPass, d_scores: Tensor | None, tile: Tile, tile_gradient: Tensor | None):
        """Fold one view's ``dS`` into the tile's ``dG`` (or ``d(rG)`` when the scale is folded)."""
        if d_scores is None:
            return tile_gradient
        geometry, slots = view.view, view.slots
        if slots.offset is not None and self.needs[slots.offset]:
            # S = ... - o_j: d o_j = -sum over the view's anchors.
            self._accumulate(slots.offset, -d_scores.sum(geometry.anchor_axis), where=geometry.candidate_slice(tile))
        if not self.plan.folded:
            scale = view.scale
            if slots.scale is not None and self.needs[slots.scale]:
                # S = r G: d r = sum dS G (per anchor, or in total for one scalar).
                assert isinstance(scale, Tensor)  # a scale whose gradient is needed is a tensor
                products = d_scores * tile.product
                if scale.ndim:
                    self._accumulate(slots.scale, geometry.reduce(products), where=geometry.anchor_slice(tile))
                else:
                    self._accumulate(slots.scale, products.sum().to(scale.dtype))
            if isinstance(scale, Tensor) and scale.ndim:
                d_scores = d_scores * geometry.anchor_vector(scale.to(d_scores.dtype), tile)
            else:
                d_scores = d_scores * scale
        return d_scores if tile_gradient is None else tile_gradient.add_(d_scores)

    def add_tile(self, tile_gradient: Tensor | None, tile: Tile, candidates: Tensor, views: list[ViewPass]) -> None:
        """``dA[I] += dG B[J]`` (times ``r`` where folded, and ``d r += <dG B[J], A[I]>``), ``dB[J] += dG^T A'[I]``."""
        if tile_gradient is None:
            return
        tile_gradient = tile_gradient.to(candidates.dtype)  # the products in the features' type
        rows = tile_gradient @ candidates[tile.cols]
        if self.plan.folded:
            index, scale = views[0].slots.scale, views[0].scale
            rows = rows.to(self.d_anchors.dtype)
            if index is not None and self.needs[index]:
                assert isinstance(scale, Tensor)  # a scale whose gradient is needed is a tensor
                dot = torch.tensordot(rows, self.anchors[tile.rows].to(rows.dtype), dims=2)
                self._accumulate(index, dot.to(scale.dtype))
            rows = rows.mul_(scale)
        self.d_anchors[tile.rows].add_(rows)
        self.d_candidates[tile.cols].add_(tile_gradient.T @ tile.left)

    def result(self, views: list[ViewPass], need_anchors: bool, need_candidates: bool) -> list:
        """``(dA, dB, *d inputs)``; with ``same``, ``dA`` holds both and ``dB`` is ``None``."""
        if self.plan.folded:
            index = views[0].slots.scale
            if index is not None and self.needs[index] and self.d_inputs[index] is None:  # no tile had a gradient
                self.d_inputs[index] = torch.zeros_like(self.inputs[index])
            for view in views[1:]:  # the same scale tensor listed again by another view
                if view.slots.scale is not None and view.slots.scale != index and self.needs[view.slots.scale]:
                    self.d_inputs[view.slots.scale] = torch.zeros_like(self.inputs[view.slots.scale])
        need_anchors = need_anchors or (self.same and need_candidates)
        return [
            self.d_anchors.to(self.anchors.dtype) if need_anchors else None,
            None if self.same or not need_candidates else self.d_candidates.to(self.candidates_dtype),
            *[g if need else None for g, need in zip(self.d_inputs, self.needs, strict=True)],
        ]
