"""The autograd Function: every recorded statistic of every view in one pass over the tiles.

**Forward.** One pass over tiles ``G[I, J] = A[I] B[J]^T`` accumulates, for
every view, every statistic requested of it: the log-sum-exps by the
shared exponentials where they apply (:mod:`.fast_path`) and by the running
maximum elsewhere (:mod:`.logsumexp`), the negative sums by plain summation,
the negatives' mean score beside ``L(1)`` with the same rescaling, and each
declared statistic by its declaration's accumulator
(:mod:`~uncurated.objectives.declarations`).

**Backward.** The pass recomputes each tile once, forms ``dS`` for all
statistics of all views and accumulates the gradients (:mod:`.gradients`),
and the column statistics deferred to it (:mod:`.columns`).
Nothing larger than a tile is ever held: memory is O((R + C) d) plus the tiles.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from .gradients import Gradients, backward_factors, backward_tile, split_declared
from .logsumexp import RunningLogSumExp
from .plan import Plan, ViewPass
from .vocabulary import Tile


@dataclass
class Accumulators:
    """One view's running statistics during the forward pass."""

    logsumexps: list[RunningLogSumExp | None]
    """One per weight; ``None`` where the shared exponentials compute it."""
    sums: list[Tensor]
    declared: list[tuple[Tensor, ...]]
    """The state of each declared statistic's accumulator."""


class FusedStatistics(torch.autograd.Function):
    """All recorded statistics of all views in one pass over the tiles, and their gradients in one more."""

    @staticmethod
    def forward(ctx, plan: Plan, anchors: Tensor, candidates: Tensor, *inputs: Tensor):
        ctx.plan = plan
        ctx.set_materialize_grads(False)
        views = plan.bind(inputs)
        lengths = {False: anchors.shape[0], True: candidates.shape[0]}
        dtype, device = plan.batch.dtype, anchors.device  # the statistics' type (uncurated.precision)
        state = []
        for i, request in enumerate(plan.requests):
            n = lengths[request.view.transposed]
            state.append(
                Accumulators(
                    [
                        None if plan.shared.handles(i, w) else RunningLogSumExp(n, dtype, device)
                        for w in request.weights
                    ],
                    [torch.zeros(n, dtype=dtype, device=device) for _ in request.sums],
                    [declaration.accumulator.start(n, dtype, device) for declaration in request.declared],
                )
            )
        plan.shared.start(views, anchors.shape[0], candidates.shape[0])
        for tile in plan.tiles(anchors, candidates, views):
            plan.shared.forward_tile(tile, keep=plan.general)
            for view, accumulators in zip(views, state, strict=True):
                accumulate(view, accumulators, tile)
            del tile
        plan.shared.release()
        outputs, saved, declared = results(plan, state)
        ctx.save_for_backward(anchors, candidates, *inputs, *saved, *[t for group in declared for t in group])
        ctx.input_count, ctx.saved_count = len(inputs), len(saved)
        ctx.declared_sizes = [len(group) for group in declared]
        ctx.same = anchors is candidates  # SimCLR's two views: one gradient buffer for both roles
        return tuple(outputs)

    @staticmethod
    def backward(ctx, *grads):
        plan: Plan = ctx.plan
        anchors, candidates, *rest = ctx.saved_tensors
        inputs, saved = rest[: ctx.input_count], rest[ctx.input_count :]
        gradients = Gradients(plan, anchors, candidates, inputs, ctx.needs_input_grad[3:], same=ctx.same)
        declared = split_declared(saved[ctx.saved_count :], ctx.declared_sizes)
        factors = backward_factors(plan, grads, saved[: ctx.saved_count], declared)
        columns, plan.deferred_columns = plan.deferred_columns, None  # accumulated by one backward pass only
        if columns is None and all(view_factors.empty and not view_factors.shared for view_factors in factors):
            return (None, None, None, *[None] * len(inputs))
        views = plan.bind(inputs)
        plan.shared.start(views, anchors.shape[0], candidates.shape[0])
        coefficients = plan.shared.coefficients(factors)
        general = not all(view_factors.empty for view_factors in factors)
        if columns is not None:
            columns.start({exponent for exponent, _ in plan.shared.active_groups(coefficients)})
        for tile in plan.tiles(anchors, candidates, views):
            if columns is not None:
                columns.add_tile(tile, views)
            tile_gradient = plan.shared.backward_tile(
                coefficients, tile, keep=general, observe=None if columns is None else columns.observe
            )
            for view, view_factors in zip(views, factors, strict=True):
                if view_factors.empty:
                    continue
                d_scores = backward_tile(view, view_factors, tile, gradients)
                tile_gradient = gradients.add_view(view, d_scores, tile, tile_gradient)
            gradients.add_tile(tile_gradient, tile, candidates, views)
            del tile, tile_gradient
        plan.shared.release()
        if columns is not None:
            columns.finish()
        return (None, *gradients.result(views, ctx.needs_input_grad[1], ctx.needs_input_grad[2]))


def results(plan: Plan, state: list[Accumulators]) -> tuple[list[Tensor], list[Tensor], list[tuple[Tensor, ...]]]:
    """The outputs of a forward pass, in the order of each request's keys, what its backward pass reads of the
    built-in statistics (each view's log-sum-exps and mean score) and, per declared statistic, its value and the
    tensors its accumulator saved."""
    outputs, saved, declared = [], [], []
    for i, (request, accumulators) in enumerate(zip(plan.requests, state, strict=True)):
        logsumexps = [
            plan.shared.result(i, w) if running is None else running.result()
            for w, running in zip(request.weights, accumulators.logsumexps, strict=True)
        ]
        outputs += logsumexps + accumulators.sums
        if request.mean:
            running = accumulators.logsumexps[request.weights.index(1.0)]
            outputs.append(plan.shared.mean(i) if running is None else running.mean())
        saved += logsumexps + ([outputs[-1]] if request.mean else [])
        for declaration, running_state in zip(request.declared, accumulators.declared, strict=True):
            value, kept = declaration.accumulator.finish(running_state)
            outputs.append(value)
            declared.append((value, *kept))
    return outputs, saved, declared


def accumulate(view: ViewPass, accumulators: Accumulators, tile: Tile) -> None:
    """Add one tile to a view's negative sums, declared statistics and running-max log-sum-exps."""
    request, geometry = view.request, view.view
    span, dim = geometry.anchor_slice(tile), geometry.anchor_axis
    if request.declared:
        scores, negatives = view.anchored(tile)
        for declaration, running_state in zip(request.declared, accumulators.declared, strict=True):
            declaration.accumulator.add(tuple(part[span] for part in running_state), scores, negatives)
    if request.sums:
        scores = view.scores(tile, masked=False)
        for k, function in enumerate(request.sums):
            values = function.fn(scores, *view.params[k])
            if values is scores or values._base is scores:  # masked in place below, and scores is read again
                values = values.clone()
            values = view.mask_(values.expand_as(scores).contiguous(), tile, 0.0)
            accumulators.sums[k][span].add_(geometry.reduce(values))
    if all(running is None for running in accumulators.logsumexps):
        return
    scores = view.scores(tile, masked=True)
    running_mean = request.mean and accumulators.logsumexps[request.weights.index(1.0)] is not None
    finite = scores.clamp(min=torch.finfo(scores.dtype).min) if running_mean else None
    for weight, running in zip(request.weights, accumulators.logsumexps, strict=True):
        if running is None:
            continue  # computed by the shared exponentials
        weighted = scores if weight == 1.0 else view.weighted(tile, weight)
        running.add(weighted, span, dim, values=finite if weight == 1.0 else None)


def compute(plan: Plan) -> list[dict]:
    """Run the fused Function for ``plan`` and name its outputs per view: ``{statistic: value}``."""
    outputs = FusedStatistics.apply(plan, plan.batch.anchors, plan.batch.candidates, *plan.inputs)
    if not isinstance(outputs, tuple):
        outputs = (outputs,)
    plan.backward_expected = outputs[0].requires_grad
    named, start = [], 0
    for request in plan.requests:
        named.append(dict(zip(request.keys, outputs[start : start + request.output_count], strict=True)))
        start += request.output_count
    return named
