"""What the views of one ``G = A B^T`` share: the features, the tile shape, the mode, and the passes over it.

The passes run in the Python engine (:class:`~.plan.Plan`, tile by tile) or,
where the tiling options say so, in the Triton kernels (:mod:`.kernels`),
which compute the same statistics from the same recorded requests. The kernels
have no slot for a declared statistic (:mod:`~uncurated.objectives.declarations`):
``tiling="triton"`` refuses one, and under ``tiling="auto"`` a pass that computes
one runs on the Python tiles.
"""

from __future__ import annotations

from torch import Tensor

from ...precision import statistics_dtype
from .columns import ColumnLogSumExp, column_pass
from .function import compute
from .kernels.plan import KernelPlan
from .plan import Plan
from .policy import Tiling
from .views import View
from .vocabulary import MatrixProtocol, Mode, Request, Statistic, ViewProtocol


class TiledBatch:
    """The anchors ``A``, the candidates ``B`` and the views (directions) of their score matrices."""

    def __init__(self, anchors: Tensor, candidates: Tensor, tiling: Tiling) -> None:
        self.anchors, self.candidates, self.tiling = anchors, candidates, tiling
        self.views: list[View] = []
        self.mode = Mode.DIRECT
        self.fused_plan: Plan | KernelPlan | None = None
        """The last fused pass (:meth:`run`), whose backward pass may accumulate column statistics."""
        self.dtype, self.device = statistics_dtype(anchors.dtype), anchors.device
        """``dtype``: the type of the tiles' scores, the statistics and the accumulated gradients (see
        :mod:`~uncurated.precision`); the products run in the features' type."""
        self.kernels = tiling.use_kernels(anchors)
        """Whether the Triton kernels run the passes."""

    def add_view(self, matrix: MatrixProtocol, transposed: bool) -> View:
        view = View(self, matrix, transposed)
        self.views.append(view)
        return view

    def reset(self) -> None:
        self.mode = Mode.DIRECT
        for view in self.views:
            view.clear()

    def block_shape(self) -> tuple[int, int]:
        rows, cols = self.anchors.shape[0], self.candidates.shape[0]
        return self.tiling.block_shape(rows, cols, self.anchors.shape[1], self.dtype, self.device)

    def run(self) -> None:
        """The fused pass over every view's recorded statistics; switches to serving them."""
        kernels = self.kernels_compute(any(view.declared for view in self.views))
        requests = [Request.recorded(view, kernels) for view in self.views]
        requests = [request for request in requests if request.output_count]
        self.fused_plan = None
        if requests:
            self.fused_plan, results = self._pass(requests, kernels)
            for request, values in zip(requests, results, strict=True):
                request.view.results = values
        self.mode = Mode.SERVE

    def run_single(self, request: Request) -> dict[Statistic, Tensor]:
        """One view's statistics on demand, in a pass of their own (outside :func:`~.matrix.fused_map`)."""
        (values,) = self._pass([request], self.kernels_compute(bool(request.declared)))[1]
        return values

    def kernels_compute(self, declared: bool) -> bool:
        """Whether the kernels run a pass, which computes ``declared`` statistics or not: where they run the
        passes, unless ``tiling="auto"`` chose them and the pass has a declared statistic, which they have no slot
        for (``"triton"`` refuses it)."""
        return self.kernels and (self.tiling.mode == "triton" or not declared)

    def _pass(self, requests: list[Request], kernels: bool) -> tuple[Plan | KernelPlan, list[dict[Statistic, Tensor]]]:
        if kernels:
            from .kernels.function import compute as compute_with_kernels  # imports triton

            kernel_plan = KernelPlan(self, requests)
            return kernel_plan, compute_with_kernels(kernel_plan)
        plan = Plan(self, requests)
        return plan, compute(plan)

    def column_logsumexp(self, view: ViewProtocol, row_offset: Tensor) -> Tensor:
        """``log sum_{i : j in N(i)} exp(S'_ij - r_i)`` per candidate ``j`` of ``view``: a value-only pass of its
        own."""
        if self.kernels:
            from .kernels.function import column_statistic  # imports triton

            return column_statistic(KernelPlan(self, [Request(view)]), 0, row_offset)
        plan = Plan(self, [Request(view)])
        return column_pass(plan, ColumnLogSumExp(plan, 0, row_offset))
