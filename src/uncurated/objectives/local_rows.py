"""The score matrices of one process's rows of a global batch split across processes.

With ``W`` processes each holding ``B_local`` pairs of a global batch of
``B = W B_local`` (:mod:`~uncurated.process.shard`), a process scores its
own anchors against every candidate of the global batch, so that the
objective's value on the process is the mean over its own rows and the sum
over processes is ``W`` times the one-process value on the whole batch
(open_clip's "local loss"). The pairings of
:mod:`~uncurated.objectives.engine` become:

* **two views**: the ``2 B_local`` anchors ``[a_local; b_local]`` against the
  ``2 B`` candidates ``[a; b]``, one rectangular matrix, each anchor's positive
  and own view at their global columns (:func:`partitioned_two_view_pairing`);
* **cross**: one block ``G = a_local b^T`` (``B_local x B``) serves both
  directions, as the whole matrix does in one process. Its rows are the
  local images against every text, complete. Its columns are every text
  against the local images: each process holds a part of every text's
  statistics, and :class:`SplitCandidates` adds the parts of all processes
  (one all-gather of ``B`` numbers per statistic, a reduce-scatter in the
  backward pass) and keeps this process's texts. So each process forms
  ``B_local x B`` scores, ``1/W`` of the single process's ``B x B``; scoring
  the local texts against all images in a second matrix would cost ``2/W``.
  With labels (the supervised oracle) the reverse direction is that second
  matrix, since the oracle's per-anchor rescaling counts the negatives of the
  whole batch (:func:`partitioned_cross_pairing`).

Per-sample scales and offsets (the global objectives' temperatures and
popularities) are given for every pair of the global batch; each matrix
takes the entries it needs.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar, cast

import torch
from torch import Tensor

from ..precision import statistics_dtype
from ..process.shard import Shard
from .declarations import declared, softmax_parts
from .engine import ScoreMatrix
from .tiled.positives import positive_products


def partitioned_cross_pairing(
    a: Tensor,
    b: Tensor,
    shard: Shard,
    scale: float | Tensor,
    labels: Tensor | None = None,
    *,
    scale_b: float | Tensor | None = None,
    offset_a: Tensor | None = None,
    offset_b: Tensor | None = None,
    matrix: Callable[..., ScoreMatrix] = ScoreMatrix,
) -> tuple[ScoreMatrix, ScoreMatrix]:
    """This process's directions of a cross pairing (a to b, b to a), anchors its own ``a`` and ``b``.

    ``a``, ``b``: this process's (B_local, d) features; ``labels``: theirs.
    ``scale`` and ``scale_b``: a scalar or one per pair of the global batch;
    ``offset_a``, ``offset_b``: one per pair of the global batch.
    """
    rows = torch.arange(shard.local_size, device=a.device) + shard.start
    b_all = shard.gather(b)
    scale_b = scale if scale_b is None else scale_b
    if labels is None:
        forward = matrix(a, b_all, _local(scale, shard), rows, column_offset=offset_b)
        part = forward.transposed(scale=scale_b, column_offset=_local(offset_a, shard))
        return forward, SplitCandidates(part, shard, b, a, _local(scale_b, shard))
    labels_all = shard.gather(labels, kind="labels")
    a_all = shard.gather(a)
    common = {"anchor_labels": labels, "candidate_labels": labels_all}
    forward = matrix(a, b_all, _local(scale, shard), rows, column_offset=offset_b, **common)
    backward = matrix(b, a_all, _local(scale_b, shard), rows, column_offset=offset_a, **common)
    return forward, backward


def partitioned_two_view_pairing(
    a: Tensor,
    b: Tensor,
    shard: Shard,
    scale: float | Tensor,
    labels: Tensor | None = None,
    extra_positives: Tensor | None = None,
    *,
    column_offset: Tensor | None = None,
    matrix: Callable[..., ScoreMatrix] = ScoreMatrix,
) -> tuple[ScoreMatrix]:
    """This process's ``2 B_local`` anchors ``[a_local; b_local]`` against the global ``[a; b]``.

    ``scale``: a scalar or one per view of the global batch (``[a; b]``, 2B);
    ``column_offset``: one per view of the global batch; ``extra_positives``:
    this process's (B_local, M - 1, d) further views.
    """
    batch, local = shard.global_size, shard.local_size
    both = shard.gather(torch.stack([a, b], dim=1))  # one collective for both views: (B, 2, d)
    views = both.transpose(0, 1).reshape(2 * batch, a.shape[1])
    own = torch.arange(local, device=a.device) + shard.start
    anchor_columns = torch.cat([own, own + batch])  # where [a_local; b_local] sit among the candidates
    labels_all = None if labels is None else shard.gather(labels, kind="labels")
    scores = matrix(
        torch.cat([a, b]),
        views,
        scale if not isinstance(scale, Tensor) or scale.ndim == 0 else scale[anchor_columns],
        positive_column=torch.cat([own + batch, own]),
        own_column=anchor_columns,
        anchor_labels=None if labels is None else torch.cat([labels, labels]),
        candidate_labels=None if labels_all is None else torch.cat([labels_all, labels_all]),
        extra_positives=None if extra_positives is None else torch.cat([extra_positives, extra_positives]),
        column_offset=column_offset,
    )
    return (scores,)


PerPair = TypeVar("PerPair", bound=float | Tensor | None)


def _local(values: PerPair, shard: Shard) -> PerPair:
    """This process's entries of a per-pair vector of the global batch (a scalar stays as it is)."""
    if isinstance(values, Tensor) and values.ndim:
        return cast(PerPair, values[shard.rows])
    return values


class SplitCandidates(ScoreMatrix):
    """This process's anchors against candidates split across the processes: each holds a part of every
    anchor's statistics, and the parts are added here.

    ``part`` is the engine's matrix of *every* anchor of the global batch
    against this process's candidates (the columns of the local block, seen
    as anchors). Each statistic is the part's, combined over the processes
    (one all-gather of the global batch's values, differentiable), at this
    process's anchors ``anchors``, whose positives are its ``candidates`` in
    order. ``negative_slots`` counts the whole batch. Its dense matrices (``logits``, ...) are refused as on
    every engine (:mod:`uncurated.objectives.row_statistics`).
    """

    def __init__(
        self,
        part: ScoreMatrix,
        shard: Shard,
        anchors: Tensor,
        candidates: Tensor,
        scale: float | Tensor,
    ) -> None:
        positives = torch.arange(shard.local_size, device=anchors.device)
        super().__init__(anchors, candidates, scale, positives, column_offset=part.column_offset)
        if min(shard.counts) < 2:  # the same verdict on every process
            raise ValueError(
                "a cross pairing split across processes needs at least 2 pairs on every process (a process's only "
                f"image would be its text's positive, leaving it no negative there), got {list(shard.counts)}"
            )
        self.part, self.shard = part, shard

    @property
    def engine_parts(self) -> tuple[ScoreMatrix, ...]:
        return (self.part,)

    @property
    def recording(self) -> bool:
        return self.part.recording

    @property
    def negative_slots(self) -> int:
        return self.shard.global_size - 1

    def _everyone(self, *partials: Tensor) -> Tensor:
        """(W, k, B_local): every process's parts of the statistics ``partials`` (each (B,)) at this process's
        anchors; the gradient of each part goes back to its process."""
        stacked = torch.stack(partials)[None]
        return self.shard.gather_parts(stacked, kind="row statistics")[:, :, self.shard.rows]

    def _placeholder(self) -> Tensor:
        return torch.zeros(
            self.shard.local_size, dtype=statistics_dtype(self.anchors.dtype), device=self.anchors.device
        )

    def positive_logit(self) -> Tensor:
        if self.recording:
            return self._placeholder()
        products = positive_products(
            self.anchors, self.candidates, self.positive_column, statistics_dtype(self.anchors.dtype)
        )
        return self.scale * products

    def negative_logsumexp(self, weight: float = 1.0) -> Tensor:
        partial = self.part.negative_logsumexp(weight)
        if self.recording:
            return self._placeholder()
        return torch.logsumexp(self._everyone(partial)[:, 0], dim=0)

    def negative_sum(self, fn: Callable[..., Tensor], *params: Tensor | float) -> Tensor:
        partial = self.part.negative_sum(fn, *params)
        if self.recording:
            return self._placeholder()
        return self._everyone(partial)[:, 0].sum(dim=0)

    def negative_mean_score(self) -> Tensor:
        return self._combined(self.part.negative_mean_score, softmax_parts)

    def statistic(self, name: str) -> Tensor:
        """The declared statistic ``name``, the processes' parts combined by its declaration's split rule."""
        return self._combined(lambda: self.part.statistic(name), declared(name).combine)

    def _combined(self, partial: Callable[[], Tensor], combine: Callable[[Tensor, Tensor], Tensor]) -> Tensor:
        """A statistic of the part, ``partial()``, combined over the processes by ``combine`` from every part and
        its ``L(1)``, its share of the negatives' exponentials."""
        logsumexp, part = self.part.negative_logsumexp(1.0), partial()
        if self.recording:
            return self._placeholder()
        everyone = self._everyone(logsumexp, part)
        return combine(everyone[:, 1], everyone[:, 0])


@dataclass
class ColumnRequest:
    """How to compute a matrix's column statistic ``log sum_i exp(S'_ij - r_i)`` over the whole batch's anchors,
    at each of this process's anchors' positives (NUCLR's popularity update)."""

    matrix: ScoreMatrix
    """The engine's matrix whose column statistic is computed."""
    row_offset: Tensor
    """Its anchors' offsets ``r_i``."""
    complete: Callable[[Tensor], Tensor]
    """From the matrix's (C,) statistic to the whole batch's at each anchor's positive, (R,) in row order."""


def column_request(scores: ScoreMatrix, row_offset: Tensor, shard: Shard | None) -> ColumnRequest:
    """The :class:`ColumnRequest` for ``scores`` (one process's, or a shard's rows) and its anchors' offsets.

    * One process: the statistic at the positives.
    * A shard's rows against the global batch: each process's statistic sums
      over its own anchors; their log-sum-exp over the processes (two
      all-reduces of the batch's columns) is the whole batch's.
    * :class:`SplitCandidates`: its part holds every anchor of the batch
      against this process's candidates, which are its anchors' positives; the
      anchors' offsets are gathered (one all-gather), and the part's statistic
      is complete.
    """
    positives = scores.positive_column
    if isinstance(scores, SplitCandidates):
        gathered = scores.shard.gather(row_offset.detach(), kind="column statistics")
        return ColumnRequest(scores.part, gathered, lambda statistic: statistic[positives])
    if shard is None:
        return ColumnRequest(scores, row_offset, lambda statistic: statistic[positives])

    return ColumnRequest(
        scores, row_offset, lambda partial: shard.logsumexp(partial, kind="column statistics")[positives]
    )
