"""One pass of the kernels over a tiled batch: what each view asked, as kernel arguments and switches.

A :class:`KernelPlan` takes the requests :func:`~uncurated.objectives.tiled.fused_map`
recorded (:class:`~uncurated.objectives.tiled.vocabulary.Request`), checks that
the kernels can compute them, and lists the tensors autograd differentiates
besides the features (each view's scale if a tensor, its offsets, its sum's
bias), as the Python engine's plan does. :meth:`KernelPlan.bind` turns each
request into a :class:`KernelView`: the tensors and switches of its kernels.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from ..vocabulary import BatchProtocol, InputSlots, Request
from .arguments import ViewInputs, ViewSwitches
from .configs import choose
from .support import check_features
from .transforms import KERNEL_TRANSFORMS

MAX_WEIGHTS = 3
"""Log-sum-exps one kernel accumulates per view (HCL with its fallback clamp asks three)."""


@dataclass
class KernelView:
    """One view's request as kernel arguments: its features, scale, offsets, excluded entries and statistics."""

    request: Request
    slots: InputSlots
    anchors: Tensor
    candidates: Tensor
    scale: Tensor
    """One inverse temperature (a one-element tensor) or one per anchor."""
    offset: Tensor | None
    positive: Tensor
    own: Tensor | None
    anchor_labels: Tensor | None
    candidate_labels: Tensor | None
    bias: Tensor | None
    """The parameter of SigLIP's negative term, where the view asked for it."""

    @property
    def transposed(self) -> bool:
        return self.request.view.transposed

    @property
    def per_anchor(self) -> bool:
        return self.scale.ndim == 1

    @property
    def weights(self) -> list[float]:
        return self.request.weights

    @property
    def mean_index(self) -> int:
        """Which log-sum-exp the mean score is accumulated beside (``L(1)``), or -1."""
        return self.request.weights.index(1.0) if self.request.mean else -1

    def inputs(self) -> ViewInputs:
        """The view's tensors as read by :func:`~.tile.view_scores` (``None`` where it has none)."""
        return ViewInputs(
            self.scale, self.offset, self.positive, self.own, self.anchor_labels, self.candidate_labels, self.bias
        )

    def switches(self, on_rows: bool) -> ViewSwitches:
        """How the view sees a launch's blocks, with its anchors along the rows (``on_rows``) or the columns."""
        return ViewSwitches(
            ON_ROWS=on_rows,
            TRANSPOSED=on_rows == self.transposed,  # G's rows (the anchors unless transposed) along the columns
            PER_ANCHOR=self.per_anchor,
            OFFSET=self.offset is not None,
            OWN=self.own is not None,
            LABELS=self.anchor_labels is not None,
            SIGMOID_SUM=self.bias is not None,
        )


class KernelPlan:
    """How the kernels compute one batch's recorded statistics; see the module docstring."""

    def __init__(self, batch: BatchProtocol, requests: list[Request]) -> None:
        check_features(batch.anchors, batch.candidates)
        self.batch, self.requests = batch, requests
        dim, dtype = batch.anchors.shape[1], batch.anchors.dtype
        self.blocks = choose(batch.anchors.device, dim, dtype, batch.tiling.block_size).blocks(dim)
        """The block shape, warps and stages of every launch of the pass (:func:`~.configs.choose`)."""
        self.inputs: list[Tensor] = []
        self.constant_scales: dict[Request, Tensor] = {}
        self.slots = [self._slots(request) for request in requests]
        self.backward_expected = False
        """Whether the pass's outputs require a gradient (set when it runs): a backward pass may follow."""
        self.deferred_columns: tuple[list[tuple[int, Tensor]], Callable[[list[Tensor]], None]] | None = None
        """``([(view index, row offsets)], callback)``: column statistics its backward pass computes."""

    def _slots(self, request: Request) -> InputSlots:
        if len(request.weights) > MAX_WEIGHTS:
            raise ValueError(
                f"tiling='triton' computes at most {MAX_WEIGHTS} negative log-sum-exps per direction; the row loss "
                f"asked for {len(request.weights)} (weights {request.weights})"
            )
        if request.declared:
            names = ", ".join(repr(declaration.name) for declaration in request.declared)
            raise ValueError(
                f"tiling='triton' has no kernel for the declared statistics {names} "
                "(uncurated.objectives.declarations); use tiling='always' or 'auto' (the Python tiles compute them)"
            )
        if len(request.sums) > 1:
            raise ValueError(
                f"tiling='triton' computes one negative sum per direction; the row loss asked for {len(request.sums)}"
            )
        slots = InputSlots()
        view = request.view
        if isinstance(view.scale, Tensor):
            slots.scale = self._add(view.scale)
        else:  # a number: one tensor for every launch of the pass
            self.constant_scales[request] = torch.full(
                (), float(view.scale), dtype=self.batch.dtype, device=self.batch.device
            )
        if view.offset is not None:
            slots.offset = self._add(view.offset)
        for function in request.sums:
            if function.fn not in KERNEL_TRANSFORMS or len(function.params) != 1:
                known = ", ".join(f"{fn.__module__}.{fn.__name__}(scores, bias)" for fn in KERNEL_TRANSFORMS)
                raise ValueError(
                    f"tiling='triton' computes negative sums of {known} only, got "
                    f"{getattr(function.fn, '__name__', function.fn)!r} with {len(function.params)} parameter(s); "
                    "use tiling='always' for other functions"
                )
            (bias,) = function.params
            if not isinstance(bias, Tensor):
                bias = torch.full((), float(bias), dtype=self.batch.dtype, device=self.batch.device)
            slots.params.append([self._add(bias)])
        return slots

    def _add(self, tensor: Tensor) -> int:
        self.inputs.append(tensor)
        return len(self.inputs) - 1

    def bind(self, anchors: Tensor, candidates: Tensor, inputs: Sequence[Tensor]) -> list[KernelView]:
        """Each request with the batch's features and the values of ``inputs`` (the Function's, which autograd does
        not follow inside it)."""
        anchors, candidates = unit_stride(anchors), unit_stride(candidates)
        views = []
        for request, slots in zip(self.requests, self.slots, strict=True):
            matrix = request.view.matrix
            scale = self.constant_scales[request] if slots.scale is None else inputs[slots.scale]
            bias = inputs[slots.params[0][0]] if slots.params else None
            views.append(
                KernelView(
                    request,
                    slots,
                    candidates if request.view.transposed else anchors,
                    anchors if request.view.transposed else candidates,
                    scale.to(anchors.device),
                    None if slots.offset is None else inputs[slots.offset],
                    matrix.positive_column,
                    matrix.own_column,
                    matrix.anchor_labels,
                    matrix.candidate_labels,
                    None if bias is None else bias.to(anchors.device),
                )
            )
        return views

    def defer_columns(self, requests: list[tuple[int, Tensor]], callback: Callable[[list[Tensor]], None]) -> None:
        """Have the backward pass compute the column statistics of ``(view index, row offsets)`` and call back
        (the offsets are constants: NUCLR computes them under ``no_grad``)."""
        indices = [index for index, _ in requests]
        if len(set(indices)) != len(indices):
            raise ValueError("one column statistic per direction")
        offsets = [(index, offset.to(self.batch.dtype).contiguous()) for index, offset in requests]
        self.deferred_columns = (offsets, callback)


def unit_stride(features: Tensor) -> Tensor:
    """``features`` with unit stride along the feature axis, as the kernels read them."""
    return features if features.stride(1) == 1 else features.contiguous()
