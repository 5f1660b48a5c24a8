"""The autograd Function of the kernels: every recorded statistic of every view, and their gradients.

**Forward.** One launch of :func:`~.forward.statistics_kernel` per view: the
rows view reads ``A`` against ``B``, the transposed view of a cross pairing
``B`` against ``A``, forming each block as ``A B^T``'s and transposing it
(``TRANSPOSED``: every launch computes a score as the same float). Each
writes its log-sum-exps, its negative sum and its mean score, O(R) numbers;
nothing of size R x C exists anywhere.

**Backward.** One launch of :func:`~.backward.gradient_kernel` per side of
``G = A B^T`` whose features, scales, offsets or column statistics are
wanted: the ``A`` launch sees the rows view with its anchors along the block
rows and the transposed view with its candidates there; the ``B`` launch the
reverse. A two-view batch (``A`` is ``B``, one view) needs one launch, with
the view in both roles. The column statistics deferred to the backward pass
(NUCLR's popularity update) come out of the launch where the view's
candidates run along the rows.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
import triton
from torch import Tensor

from .arguments import RowOutputs, Shape, Sides, SlotInputs, SlotSwitches, compact
from .backward import gradient_kernel
from .forward import statistics_kernel
from .interpreter import repair_loop_bounds
from .launch import launch
from .plan import MAX_WEIGHTS, KernelPlan, KernelView, unit_stride
from .support import Blocks, input_precision, interpreting

SLOT_OUTPUTS = ("SCALE_OUT", "BIAS_OUT", "OFFSET_OUT", "COLUMN_OUT")

if interpreting():
    repair_loop_bounds()


@dataclass
class ViewGradients:
    """The incoming gradients of one view's outputs (``None``: not needed) and the statistics they differentiate."""

    logsumexps: list[Tensor]
    lse_grads: list[Tensor | None]
    sum_grad: Tensor | None
    mean: Tensor | None
    mean_grad: Tensor | None
    positive_grad: Tensor | None

    def any(self) -> bool:
        singles = (self.sum_grad, self.mean_grad, self.positive_grad)
        return any(g is not None for g in self.lse_grads) or any(g is not None for g in singles)


@dataclass
class Slot:
    """One view in one backward launch, with its anchors along the block rows or along the columns."""

    index: int
    view: KernelView
    on_rows: bool
    outputs: dict[str, Tensor] = field(default_factory=dict)
    """The per-sample sums it writes, by switch name (``SCALE_OUT``, ...)."""


class KernelStatistics(torch.autograd.Function):
    """All recorded statistics of all views by the kernels, and their gradients by the backward kernel."""

    @staticmethod
    def forward(ctx, plan: KernelPlan, anchors: Tensor, candidates: Tensor, *inputs: Tensor):
        ctx.plan = plan
        ctx.set_materialize_grads(False)
        outputs: list[Tensor] = []
        saved: list[Tensor] = []
        for view in plan.bind(anchors, candidates, inputs):
            values = view_statistics(plan, view)
            outputs += values.unbind(0)
            saved.append(values)  # not an output: saved without a detach, unpacked by one unbind
        ctx.save_for_backward(anchors, candidates, *inputs, *saved)
        ctx.input_count = len(inputs)
        ctx.same = anchors is candidates  # SimCLR's two views: one gradient for both roles
        return tuple(outputs)

    @staticmethod
    def backward(ctx, *grads):
        plan: KernelPlan = ctx.plan
        anchors, candidates, *rest = ctx.saved_tensors
        anchors, candidates = unit_stride(anchors), unit_stride(candidates)
        inputs, saved = rest[: ctx.input_count], rest[ctx.input_count :]
        needs = ctx.needs_input_grad[3:]
        views = plan.bind(anchors, candidates, inputs)
        incoming = split_gradients(views, grads, saved)
        deferred, plan.deferred_columns = plan.deferred_columns, None  # computed by one backward pass only
        columns = dict(deferred[0]) if deferred else {}
        need_anchors, need_candidates = ctx.needs_input_grad[1], ctx.needs_input_grad[2]
        if ctx.same:
            need_anchors = need_anchors or need_candidates
        sides = [(anchors, candidates, need_anchors, [Slot(i, v, not v.transposed) for i, v in enumerate(views)])]
        sides.append((candidates, anchors, need_candidates, [Slot(i, v, v.transposed) for i, v in enumerate(views)]))
        if ctx.same and len(views) == 1:
            sides = [(anchors, anchors, need_anchors, sides[0][3] + sides[1][3])]
        features = []
        for rows, cols, need_features, slots in sides:
            slots = [s for s in slots if _wanted(s, incoming[s.index], needs, columns)]
            features.append(side_gradient(plan, rows, cols, need_features, slots, incoming, needs, columns))
        d_inputs: list[Tensor | None] = [None] * len(inputs)
        for *_, slots in sides:
            for slot in slots:
                _collect(slot, inputs, needs, d_inputs)
        if deferred:
            found = {
                s.index: s.outputs["COLUMN_OUT"] for *_, slots in sides for s in slots if "COLUMN_OUT" in s.outputs
            }
            deferred[1]([found[index] for index, _ in deferred[0]])
        if ctx.same:
            total = features[0] if len(features) == 1 else _add(features[0], features[1])
            return None, total, None, *d_inputs
        return None, features[0], features[1], *d_inputs


def view_statistics(plan: KernelPlan, view: KernelView) -> Tensor:
    """One view's statistics by one launch, as the rows of one (outputs, R) tensor: its log-sum-exps (one per
    weight), negative sum, mean score and positive scores, in the order of :attr:`Request.keys`."""
    rows, request = view.anchors.shape[0], view.request
    values = torch.empty((request.output_count, rows), dtype=plan.batch.dtype, device=view.anchors.device)
    written = list(values.unbind(0))
    logsumexps, rest = written[: len(view.weights)], iter(written[len(view.weights) :])
    sums = [next(rest)] if view.bias is not None else []
    mean = next(rest) if request.mean else None
    positive = next(rest) if request.positive else None
    blocks = plan.blocks
    weights: list[float | None] = [*view.weights, *[None] * (MAX_WEIGHTS - len(view.weights))]
    lse: list[Tensor | None] = [*logsumexps, *[None] * (MAX_WEIGHTS - len(logsumexps))]
    outputs = RowOutputs(
        lse0=lse[0],
        lse1=lse[1],
        lse2=lse[2],
        sum=sums[0] if sums else None,
        mean=mean,
        positive_score=positive,
        weight0=weights[0],
        weight1=weights[1],
        weight2=weights[2],
    )
    arguments = {
        "sides": compact(sides(view.anchors, view.candidates)),
        "view": compact(view.inputs()),
        "VIEW": view.switches(on_rows=True),
        "outputs": compact(outputs),
        "WEIGHTS": len(view.weights),
        "MEAN_INDEX": view.mean_index,
        "POSITIVE_SCORE": positive is not None,
        "shape": shape(blocks, view.anchors.dtype),
    }
    launch(statistics_kernel, (triton.cdiv(rows, blocks.rows),), arguments, blocks.warps, blocks.stages)
    return values


def sides(rows: Tensor, cols: Tensor, gradient: Tensor | None = None) -> Sides:
    """The features of a launch: ``rows`` along the block rows, ``cols`` along the columns; and the gradient of
    ``rows`` a backward launch writes."""
    stride_grad = None if gradient is None else gradient.stride(0)
    return Sides(
        rows, cols, rows.shape[0], cols.shape[0], rows.shape[1], rows.stride(0), cols.stride(0), gradient, stride_grad
    )


def shape(blocks: Blocks, dtype: torch.dtype) -> Shape:
    """The block shape, and how the blocks' products run: float32 ones as PyTorch's own setting allows
    (:func:`~.support.input_precision`), and ``WIDEN`` bfloat16 under the interpreter (see
    :func:`~.tile.block_product`)."""
    return Shape(
        blocks.rows,
        blocks.rows,
        blocks.depth,
        blocks.dim,
        INPUT_PRECISION=input_precision(),
        WIDEN=dtype == torch.bfloat16 and interpreting(),
    )


def split_gradients(views: list[KernelView], grads, saved) -> list[ViewGradients]:
    """The Function's output gradients and saved statistics (one tensor of rows per view), per view (in the order
    of the outputs)."""
    per_view, g_start = [], 0
    for view, values in zip(views, saved, strict=True):
        n_lse, n_sum = len(view.weights), int(view.bias is not None)
        lse_grads = [
            g if w != 0.0 else None for g, w in zip(grads[g_start : g_start + n_lse], view.weights, strict=True)
        ]
        sum_grad = grads[g_start + n_lse] if n_sum else None
        mean_grad = grads[g_start + n_lse + n_sum] if view.request.mean else None
        positive_grad = grads[g_start + n_lse + n_sum + int(view.request.mean)] if view.request.positive else None
        rows = values.unbind(0) if n_lse or view.request.mean else ()
        logsumexps = list(rows[:n_lse])
        mean = rows[n_lse + n_sum] if view.request.mean else None
        g_start += view.request.output_count
        per_view.append(ViewGradients(logsumexps, lse_grads, sum_grad, mean, mean_grad, positive_grad))
    return per_view


def _wanted(slot: Slot, incoming: ViewGradients, needs, columns: dict[int, Tensor]) -> bool:
    """Whether a slot contributes to its launch: a gradient of the scores, or a per-sample sum it must write."""
    slots = slot.view.slots
    if slot.on_rows:
        outputs = (slots.scale is not None and needs[slots.scale]) or (bool(slots.params) and needs[slots.params[0][0]])
    else:
        outputs = (slots.offset is not None and needs[slots.offset]) or slot.index in columns
    return incoming.any() or outputs


def side_gradient(
    plan: KernelPlan,
    rows: Tensor,
    cols: Tensor,
    need_features: bool,
    slots: list[Slot],
    incoming: list[ViewGradients],
    needs,
    columns: dict[int, Tensor],
) -> Tensor | None:
    """The gradient of ``rows`` (``dG cols``) and the slots' per-sample sums, by one backward launch."""
    need_features = need_features and any(incoming[s.index].any() for s in slots)
    for slot in slots:
        slot.outputs = _slot_outputs(plan, slot, rows.shape[0], needs, columns, incoming[slot.index])
    if not slots or not (need_features or any(s.outputs for s in slots)):
        return None
    blocks = plan.blocks
    sliced = blocks.dim > blocks.gradient_depth  # the kernel adds slice by slice into float32 sums
    gradient = None
    if need_features:
        gradient = torch.empty(rows.shape, dtype=torch.float32 if sliced else rows.dtype, device=rows.device)
    arguments: dict[str, object] = {"sides": compact(sides(rows, cols, gradient))}
    for prefix, slot in zip("ab", slots + slots[:1] * (2 - len(slots)), strict=True):
        arguments.update(slot_arguments(prefix, slot, incoming[slot.index], columns))
    arguments.update(SLOTS=len(slots), FEATURE_GRAD=need_features, shape=shape(blocks, rows.dtype))
    arguments["BLOCK_D"] = blocks.gradient_depth
    launch(gradient_kernel, (triton.cdiv(rows.shape[0], blocks.rows),), arguments, blocks.warps, blocks.stages)
    return gradient if gradient is None or gradient.dtype == rows.dtype else gradient.to(rows.dtype)


def _slot_outputs(
    plan: KernelPlan, slot: Slot, length: int, needs, columns, incoming: ViewGradients
) -> dict[str, Tensor]:
    """The per-sample sums a slot writes; a bias whose sum has no incoming gradient gets none (zero)."""
    slots, make = slot.view.slots, lambda: torch.empty(length, dtype=plan.batch.dtype, device=slot.view.scale.device)
    outputs = {}
    if slot.on_rows:
        if slots.scale is not None and needs[slots.scale]:
            outputs["SCALE_OUT"] = make()
        if slots.params and needs[slots.params[0][0]] and incoming.sum_grad is not None:
            outputs["BIAS_OUT"] = make()
    else:
        if slots.offset is not None and needs[slots.offset]:
            outputs["OFFSET_OUT"] = make()
        if slot.index in columns:
            outputs["COLUMN_OUT"] = make()
    return outputs


def slot_arguments(prefix: str, slot: Slot, incoming: ViewGradients, columns: dict[int, Tensor]) -> dict:
    """A slot's arguments of :func:`~.backward.gradient_kernel`: its view and what it reads and writes (``a``,
    ``A``), for ``prefix`` ``a`` or ``b``; a field is left out wherever a switch is off."""
    view = slot.view
    grads = [_contiguous(g) for g in incoming.lse_grads] + [None] * (MAX_WEIGHTS - len(incoming.lse_grads))
    wanted = [g is not None for g in grads]
    lse = incoming.logsumexps + [None] * (MAX_WEIGHTS - len(incoming.logsumexps))
    weights = view.weights + [0.0] * (MAX_WEIGHTS - len(view.weights))
    mean = incoming.mean_grad is not None
    sigmoid_sum = incoming.sum_grad is not None or "BIAS_OUT" in slot.outputs
    kept = [lse[k] if wanted[k] else None for k in range(MAX_WEIGHTS)]
    factors = [weights[k] if wanted[k] else None for k in range(MAX_WEIGHTS)]
    outputs = [slot.outputs.get(name) for name in SLOT_OUTPUTS]
    view_inputs = view.inputs()
    inputs = SlotInputs(
        *view_inputs._replace(bias=view_inputs.bias if sigmoid_sum else None),
        lse0=kept[0],
        lse1=kept[1],
        lse2=kept[2],
        grad0=grads[0],
        grad1=grads[1],
        grad2=grads[2],
        weight0=factors[0],
        weight1=factors[1],
        weight2=factors[2],
        mean=incoming.mean if mean else None,
        mean_lse=lse[view.mean_index] if mean else None,
        mean_grad=_contiguous(incoming.mean_grad),
        sum_grad=_contiguous(incoming.sum_grad),
        row_offset=columns.get(slot.index),
        positive_grad=_contiguous(incoming.positive_grad),
        scale_out=outputs[0],
        bias_out=outputs[1],
        offset_out=outputs[2],
        column_out=outputs[3],
    )
    switches = SlotSwitches(
        *view.switches(slot.on_rows)._replace(SIGMOID_SUM=sigmoid_sum),
        GRAD0=wanted[0],
        GRAD1=wanted[1],
        GRAD2=wanted[2],
        MEAN=mean,
        POSITIVE_GRAD=incoming.positive_grad is not None,
        SCALE_OUT="SCALE_OUT" in slot.outputs,
        BIAS_OUT="BIAS_OUT" in slot.outputs,
        OFFSET_OUT="OFFSET_OUT" in slot.outputs,
        COLUMN_OUT="COLUMN_OUT" in slot.outputs,
    )
    return {prefix: compact(inputs), prefix.upper(): switches}


def _collect(slot: Slot, inputs, needs, d_inputs: list[Tensor | None]) -> None:
    """Turn a slot's per-sample sums into the gradients of the Function's inputs."""
    slots = slot.view.slots
    for name, index in (("SCALE_OUT", slots.scale), ("BIAS_OUT", slots.params[0][0] if slots.params else None)):
        if name in slot.outputs and index is not None:
            value, target = slot.outputs[name], inputs[index]
            d_inputs[index] = (value if target.ndim else value.sum()).to(target.dtype)
    if "OFFSET_OUT" in slot.outputs and slots.offset is not None:
        d_inputs[slots.offset] = slot.outputs["OFFSET_OUT"].to(inputs[slots.offset].dtype)


def _contiguous(tensor: Tensor | None) -> Tensor | None:
    return None if tensor is None else tensor.contiguous()


def _add(first: Tensor | None, second: Tensor | None) -> Tensor | None:
    if first is None or second is None:
        return second if first is None else first
    return first.add_(second)


def compute(plan: KernelPlan) -> list[dict]:
    """Run the kernels' Function for ``plan`` and name its outputs per view: ``{statistic: value}``."""
    outputs = KernelStatistics.apply(plan, plan.batch.anchors, plan.batch.candidates, *plan.inputs)
    if not isinstance(outputs, tuple):
        outputs = (outputs,)
    plan.backward_expected = bool(outputs) and outputs[0].requires_grad
    named, start = [], 0
    for request in plan.requests:
        named.append(dict(zip(request.keys, outputs[start : start + request.output_count], strict=True)))
        start += request.output_count
    return named


def column_statistic(plan: KernelPlan, index: int, row_offset: Tensor) -> Tensor:
    """``log sum_{i : j in N(i)} exp(S'_ij - r_i)`` per candidate ``j`` of view ``index``: a value-only launch."""
    view = plan.bind(plan.batch.anchors, plan.batch.candidates, plan.inputs)[index]
    slot = Slot(index, view, on_rows=False)
    columns = {index: row_offset.detach().to(plan.batch.dtype).contiguous()}
    incoming = [ViewGradients([], [], None, None, None, None)] * (index + 1)
    side_gradient(plan, view.candidates, view.anchors, False, [slot], incoming, [False] * len(plan.inputs), columns)
    return slot.outputs["COLUMN_OUT"]
