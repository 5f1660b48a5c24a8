"""The tiled engine's shared vocabulary: what its floors say to each other, with no engine in it.

The bottom floor of :mod:`uncurated.objectives.tiled`, imported by every other and importing none of them:

* the modes of a tiled matrix (:class:`Mode`) and the error of a statistic asked but never recorded;
* the statistics a row loss asks of a view, named by typed keys (:class:`LogSumExp`, :class:`NegativeSum`,
  :class:`MeanScore`, :class:`PositiveScore`, and a declared statistic's
  :class:`~uncurated.objectives.declarations.StatisticDeclaration` itself), the function of a negative sum
  (:class:`SumFunction`), and the :class:`Request` that lists those one fused pass computes;
* a tile of ``G = A B^T`` (:class:`Tile`), where a view's tensors sit among the autograd Function's inputs
  (:class:`InputSlots`) and the per-anchor factors of a view's backward pass (:class:`Factors`);
* protocols for what a lower floor reads of a higher one's objects (a batch, its score matrices, a view, a plan
  and a view's pass), so that a module names the type it reads without importing the module that makes it.

The floors above, bottom up: :mod:`.views`, the shared exponentials (:mod:`.fast_path`), the column statistics
(:mod:`.columns`), the plan of a pass (:mod:`.plan`), its gradients (:mod:`.gradients`) and autograd Function
(:mod:`.function`), the kernels' plan and Function (:mod:`.kernels`), the tiling policy (:mod:`.policy`), the
batch (:mod:`.batch`), the replay of requests (:mod:`.replay`) and the score matrix (:mod:`.matrix`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from enum import Enum
from typing import Protocol

import torch
from torch import Tensor

from ..declarations import StatisticDeclaration


class Mode(Enum):
    """What a tiled matrix does when a statistic is asked of it."""

    RECORD = "record"
    """Note the request and return a placeholder (the first run of a row loss)."""
    SERVE = "serve"
    """Return the statistic the fused pass computed (the second run)."""
    DIRECT = "direct"
    """Compute the statistic now, with a pass of its own (outside :func:`~.matrix.fused_map`)."""


class UnrecordedStatistic(RuntimeError):
    """A row loss asked, while served, for a statistic that was not recorded: its control flow depended on the
    values, or requests replayed from an earlier call (:mod:`.replay`) no longer hold."""


@dataclass(frozen=True)
class LogSumExp:
    """``L_i(w) = log sum_{j in N(i)} exp(w S_ij)``."""

    weight: float


@dataclass(frozen=True)
class NegativeSum:
    """``F_i(f) = sum_{j in N(i)} f(S_ij)``, the ``index``-th negative sum the row loss asked for."""

    index: int


@dataclass(frozen=True)
class MeanScore:
    """The negatives' softmax-mean score ``sum_j e^{S_ij - L_i(1)} S_ij``."""


@dataclass(frozen=True)
class PositiveScore:
    """``s_i = r_i G_{i, p(i)}``, computed with the negative statistics where the Triton kernels run (the Python
    engine computes it apart, :mod:`.positives`)."""


Statistic = LogSumExp | NegativeSum | MeanScore | PositiveScore | StatisticDeclaration


@dataclass(frozen=True)
class SumFunction:
    """The elementwise ``f`` of a negative sum and the tensors it takes besides the scores."""

    fn: Callable[..., Tensor]
    params: tuple[Tensor | float, ...]


@dataclass(eq=False)
class Request:
    """The statistics one fused pass computes for a view, in the order of its outputs."""

    view: ViewProtocol
    weights: list[float] = field(default_factory=list)
    sums: list[SumFunction] = field(default_factory=list)
    mean: bool = False
    declared: list[StatisticDeclaration] = field(default_factory=list)
    """The declared statistics (:mod:`~uncurated.objectives.declarations`), computed by their declarations."""
    positive: bool = False
    """The positive scores too (the kernels only)."""

    def __post_init__(self) -> None:
        if self.mean and 1.0 not in self.weights:
            self.weights.append(1.0)  # the mean score is accumulated beside L(1)

    @classmethod
    def recorded(cls, view: ViewProtocol, kernels: bool) -> Request:
        """What a row loss asked of ``view`` while recording, for a pass the kernels run (``kernels``) or not."""
        positive = view.wants_positive and kernels
        return cls(view, list(view.weights), list(view.sums), view.mean, list(view.declared), positive)

    @property
    def keys(self) -> list[Statistic]:
        """The statistics of the outputs, in order: the log-sum-exps, the sums, the mean score, the declared
        statistics, the positive scores."""
        keys: list[Statistic] = [LogSumExp(w) for w in self.weights]
        keys += [NegativeSum(k) for k in range(len(self.sums))]
        keys += [MeanScore()] if self.mean else []
        keys += self.declared
        return keys + [PositiveScore()] if self.positive else keys

    @property
    def output_count(self) -> int:
        return len(self.keys)


@dataclass
class Tile:
    """One block ``G[rows, cols]`` of the inner products (``r G`` where the scale is folded)."""

    rows: slice
    cols: slice
    product: Tensor
    left: Tensor
    """The anchors of the tile's rows (``r A[I]`` where the scale is folded), in the features' type."""

    @property
    def key(self) -> tuple[int, int]:
        return self.rows.start, self.cols.start


@dataclass
class InputSlots:
    """Where a view's tensors sit among the autograd Function's inputs (``None``: not a tensor input)."""

    scale: int | None = None
    offset: int | None = None
    params: list[list[int]] = field(default_factory=list)
    """For each negative sum, the positions of its parameters."""


@dataclass
class Factors:
    """The per-anchor factors of one view's backward pass."""

    logsumexps: list[tuple[float, Tensor, Tensor]] = field(default_factory=list)
    """``(w, dloss/dL(w), L(w))`` of the log-sum-exps on the running-max path."""
    shared: list[tuple[float, Tensor, Tensor]] = field(default_factory=list)
    """The same for the log-sum-exps the shared exponentials differentiate."""
    sums: list[tuple[int, Tensor]] = field(default_factory=list)
    """``(k, dloss/dF_k)`` of the negative sums."""
    mean: tuple[Tensor, Tensor, Tensor] | None = None
    """``(dloss/dm, L(1), m)`` of the mean score."""
    declared: list[DeclaredFactor] = field(default_factory=list)
    """The declared statistics' incoming gradients and what their backward factors read."""

    @property
    def empty(self) -> bool:
        """Nothing for the running-max path to differentiate."""
        return not (self.logsumexps or self.sums or self.mean or self.declared)


@dataclass
class DeclaredFactor:
    """One declared statistic in a view's backward pass: ``dloss/dvalue``, its value and the tensors its accumulator
    saved, each one per anchor."""

    declaration: StatisticDeclaration
    grad: Tensor
    value: Tensor
    saved: tuple[Tensor, ...]


# What a floor reads of the objects of the floors above it. Each protocol lists what is read, no more; members are
# read-only properties unless a lower floor writes them.


class TilingProtocol(Protocol):
    """What the passes read of the tiling options (:class:`~.policy.Tiling`)."""

    @property
    def block_size(self) -> int | None: ...

    def compiles(self, device: torch.device | str | None = None) -> bool: ...

    def device_policy(self, device: torch.device | str | None = None) -> str: ...


class MatrixProtocol(Protocol):
    """What a view and the replay of requests read of a score matrix (:class:`~.matrix.TiledScoreMatrix`)."""

    @property
    def anchors(self) -> Tensor: ...

    @property
    def candidates(self) -> Tensor: ...

    @property
    def scale(self) -> float | Tensor: ...

    @property
    def column_offset(self) -> Tensor | None: ...

    @property
    def positive_column(self) -> Tensor: ...

    @property
    def own_column(self) -> Tensor | None: ...

    @property
    def anchor_labels(self) -> Tensor | None: ...

    @property
    def candidate_labels(self) -> Tensor | None: ...

    @property
    def extra_positives(self) -> Tensor | None: ...


class BatchProtocol(Protocol):
    """What views and plans read of their batch (:class:`~.batch.TiledBatch`)."""

    @property
    def anchors(self) -> Tensor: ...

    @property
    def candidates(self) -> Tensor: ...

    @property
    def tiling(self) -> TilingProtocol: ...

    @property
    def mode(self) -> Mode: ...

    @property
    def dtype(self) -> torch.dtype: ...

    @property
    def device(self) -> torch.device: ...

    def block_shape(self) -> tuple[int, int]: ...

    def run_single(self, request: Request) -> dict[Statistic, Tensor]: ...

    def column_logsumexp(self, view: ViewProtocol, row_offset: Tensor) -> Tensor: ...


class ViewProtocol(Protocol):
    """What requests, plans and passes read of a view (:class:`~.views.View`)."""

    results: dict[Statistic, Tensor]
    """The statistics the fused pass computed, which the batch hands the view to serve."""

    @property
    def batch(self) -> BatchProtocol: ...

    @property
    def matrix(self) -> MatrixProtocol: ...

    @property
    def transposed(self) -> bool: ...

    @property
    def weights(self) -> list[float]: ...

    @property
    def sums(self) -> list[SumFunction]: ...

    @property
    def mean(self) -> bool: ...

    @property
    def declared(self) -> list[StatisticDeclaration]: ...

    @property
    def wants_positive(self) -> bool: ...

    @property
    def scale(self) -> float | Tensor: ...

    @property
    def offset(self) -> Tensor | None: ...

    @property
    def anchor_axis(self) -> int: ...

    def anchor_vector(self, values: Tensor, tile: Tile) -> Tensor: ...

    def candidate_vector(self, values: Tensor, tile: Tile) -> Tensor: ...

    def anchor_slice(self, tile: Tile) -> slice: ...

    def candidate_slice(self, tile: Tile) -> slice: ...

    def reduce(self, values: Tensor) -> Tensor: ...

    def excluded(self) -> tuple[Tensor, Tensor]: ...

    def tile_labels(self, tile: Tile) -> tuple[Tensor, Tensor] | None: ...


class ViewPassProtocol(Protocol):
    """What the shared exponentials and the column statistics read of a view's pass (:class:`~.plan.ViewPass`)."""

    @property
    def view(self) -> ViewProtocol: ...

    @property
    def scale(self) -> float | Tensor: ...

    @property
    def offset(self) -> Tensor | None: ...

    def scores(self, tile: Tile, *, masked: bool) -> Tensor: ...


class BoundsProtocol(Protocol):
    """What the column statistics read of a plan's shared exponentials (:class:`~.fast_path.SharedExponentials`)."""

    def bound(self, view_index: int) -> float: ...


class PlanProtocol(Protocol):
    """What the shared exponentials and the column statistics read of the plan of a pass (:class:`~.plan.Plan`)."""

    @property
    def batch(self) -> BatchProtocol: ...

    @property
    def requests(self) -> Sequence[Request]: ...

    @property
    def inputs(self) -> Sequence[Tensor]: ...

    @property
    def folded(self) -> bool: ...

    @property
    def shared(self) -> BoundsProtocol: ...

    def bind(self, inputs: Sequence[Tensor]) -> Sequence[ViewPassProtocol]: ...

    def tiles(self, anchors: Tensor, candidates: Tensor, views: Sequence[ViewPassProtocol]) -> Iterator[Tile]: ...

    def mask_(self, index: int, values: Tensor, tile: Tile, fill: float) -> Tensor: ...

    def excluded(self, index: int, tile: Tile) -> tuple[Tensor | None, tuple[Tensor, Tensor] | None]: ...
