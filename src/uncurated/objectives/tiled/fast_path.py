r"""The fast path for log-sum-exps: no running maximum, and one exponential per weight for all views.

It applies when every view has the same scalar scale ``r`` (folded into the
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
gradient, the mean score, too wide a spread) take the running-max path.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import torch
from torch import Tensor

if TYPE_CHECKING:
    from .gradients import Factors
    from .plan import Plan, Tile, ViewPass
    from .views import View

SAFE_SPREAD = {torch.float32: 78.0, torch.float64: 630.0}
"""How far below its shift an exponential may fall and stay a normal float (90 % of ``-log tiny``)."""


class SharedExponentials:
    """The log-sum-exps of a plan that take the fast path (its *terms*), and their accumulators."""

    def __init__(self, plan: Plan) -> None:
        self.plan = plan
        self.groups: dict[float, list[int]] = {}
        """The terms of each weight: one exponential per tile serves them all."""
        self.terms: list[tuple[int, float]] = []
        """(view, weight) of each term."""
        self.index: dict[tuple[int, float], int] = {}
        if not plan.folded or plan.batch.dtype not in SAFE_SPREAD:
            return
        bound = self.bound()
        for i, request in enumerate(plan.requests):
            offset = request.view.offset
            if request.mean or (offset is not None and offset.requires_grad):
                continue
            offset_spread = 0.0 if offset is None else float(offset.max() - offset.min())
            for w in request.weights:
                if w > 0 and 2 * w * bound + w * offset_spread <= SAFE_SPREAD[plan.batch.dtype]:
                    self.index[(i, w)] = len(self.terms)
                    self.terms.append((i, w))
                    self.groups.setdefault(w, []).append(self.index[(i, w)])

    def bound(self) -> float:
        """``max |r a_i| max |b_j|``, slightly enlarged: a bound on every ``|P_ij|``."""
        plan = self.plan
        scale = plan.requests[0].view.scale
        norm = lambda x: float(x.detach().norm(dim=1).max()) if x.shape[0] else 0.0  # noqa: E731
        return abs(float(scale.detach() if isinstance(scale, Tensor) else scale)) * norm(plan.batch.anchors) * norm(plan.batch.candidates) * (1 + 1e-6)

    def handles(self, view_index: int, weight: float) -> bool:
        return (view_index, weight) in self.index

    def start(self, views: list[ViewPass], rows: int, cols: int) -> None:
        """Prepare a pass over an ``rows`` x ``cols`` product: offset factors and (forward) accumulators."""
        self.factors, self.offsets, self.sums = [], [], []
        dtype, device = self.plan.batch.dtype, self.plan.batch.device
        for i, w in self.terms:
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

    def exponentials(self, tile: Tile, weight: float, last: bool) -> Tensor:
        """``E = exp(w P)`` on a tile, zero where excluded; overwrites the product if it is its ``last`` use."""
        product = tile.product
        if weight == 1.0:
            exps = product.exp_() if last else torch.exp(product)
        else:
            exps = (product.mul_(weight) if last else torch.mul(product, weight)).exp_()
        return self.plan.mask_(0, exps, tile, 0.0)

    def _view(self, term: int) -> View:
        return self.plan.requests[self.terms[term][0]].view

    def forward_tile(self, tile: Tile, keep: bool) -> None:
        """Accumulate the tile's sums; ``keep``: the running-max path needs the product afterwards."""
        for count, (weight, members) in enumerate(self.groups.items(), 1):
            exps = self.exponentials(tile, weight, last=not keep and count == len(self.groups))
            # every view excludes the same entries (a transposed view's are the transpose of its rows'),
            # so one masked tile of exponentials serves them all
            for term in members:
                view, factor = self._view(term), self.factors[term]
                if factor is None:
                    part = view.reduce(exps)
                elif view.transposed:
                    part = factor[tile.rows] @ exps
                else:
                    part = exps @ factor[tile.cols]
                self.sums[term][view.anchor_slice(tile)] += part

    def result(self, view_index: int, weight: float) -> Tensor:
        term = self.index[(view_index, weight)]
        return self.offsets[term] + torch.log(self.sums[term])

    def coefficients(self, factors: list[Factors]) -> dict[int, Tensor]:
        """``u = g w e^{k - L}`` per differentiated term (zero where ``L = -inf``)."""
        found = {}
        for i, view_factors in enumerate(factors):
            for weight, grad, logsumexp in view_factors.shared:
                term = self.index[(i, weight)]
                values = grad * weight * torch.exp(self.offsets[term] - logsumexp)
                found[term] = torch.where(torch.isfinite(logsumexp), values, 0.0)
        return found

    def _pieces(self, term: int, tile: Tile, anchor_values: Tensor) -> tuple[Tensor | None, Tensor | None]:
        """The term's per-anchor values and candidate factors on a tile, as (row vector, column vector)."""
        view, factor = self._view(term), self.factors[term]
        anchors = anchor_values[view.anchor_slice(tile)]
        candidates = None if factor is None else factor[view.candidate_slice(tile)]
        return (candidates, anchors) if view.transposed else (anchors, candidates)

    def active_groups(self, coefficients: dict[int, Tensor]) -> list[tuple[float, list[int]]]:
        """The weights the backward pass exponentiates, each with its differentiated terms."""
        groups = [(w, [t for t in members if t in coefficients]) for w, members in self.groups.items()]
        return [(w, active) for w, active in groups if active]

    def backward_tile(
        self, coefficients: dict[int, Tensor], tile: Tile, keep: bool,
        observe: Callable[[float, Tensor, Tile], None] | None = None,
    ) -> Tensor | None:
        """``dP`` of the shared terms on a tile: ``E * sum (row vector x column vector)`` per weight.

        ``observe(w, E, tile)`` sees each weight's masked exponentials before they are scaled.
        """
        total = None
        groups = self.active_groups(coefficients)
        for count, (weight, active) in enumerate(groups, 1):
            row_sum = col_sum = None
            outers = []
            for term in active:
                x, y = self._pieces(term, tile, coefficients[term])
                if y is None:
                    row_sum = x if row_sum is None else row_sum + x
                elif x is None:
                    col_sum = y if col_sum is None else col_sum + y
                else:
                    outers.append((x, y))
            exps = self.exponentials(tile, weight, last=not keep and count == len(groups))
            if observe is not None:
                observe(weight, exps, tile)
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

