"""What a row loss asked of the views the last time it was recorded, replayed while the batch keeps its layout.

:func:`~.matrix.fused_map` learns which statistics a row loss needs by
running it once against recording matrices. Those requests depend on the
objective's settings and on the batch's layout (which directions, labels,
offsets, own views), never on the values, so an objective keeps them in a
:class:`RecordedRequests` and later calls skip the recording run: its
operators on placeholders are a fixed cost of every step, as large as the
row loss itself.

A replay is checked, not trusted: a row loss that asks for a statistic the
replayed requests lack raises :class:`~.vocabulary.UnrecordedStatistic` while
serving, and :func:`~.matrix.fused_map` then records afresh. Requests for a
negative sum ``F_i(f)`` are never replayed, because ``f``'s parameters (SigLIP's
bias) are the call's own tensors.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from torch import Tensor

from ..declarations import StatisticDeclaration

if TYPE_CHECKING:
    from .batch import TiledBatch
    from .views import View

Asked = tuple[tuple[list[float], bool, list[StatisticDeclaration], bool], ...]
"""Per view: the log-sum-exp weights, the mean score, the declared statistics, the positive scores."""


class RecordedRequests:
    """The statistics each view was asked for, by row loss and batch layout (see the module docstring)."""

    def __init__(self) -> None:
        self._asked: dict[tuple, Asked] = {}

    def replay(self, compute: Callable, batches: Sequence[TiledBatch]) -> bool:
        """Put the recorded requests of ``compute`` on ``batches``' views if their layout was recorded before."""
        asked = self._asked.get(_key(compute, batches))
        if asked is None:
            return False
        for view, (weights, mean, declared, positive) in zip(_views(batches), asked, strict=True):
            view.weights, view.mean, view.declared, view.wants_positive = list(weights), mean, list(declared), positive
        return True

    def keep(self, compute: Callable, batches: Sequence[TiledBatch]) -> None:
        """Keep what ``compute`` asked of ``batches``' views in the recording run just made."""
        views = _views(batches)
        if any(view.sums for view in views):
            return
        self._asked[_key(compute, batches)] = tuple(
            (list(v.weights), v.mean, list(v.declared), v.wants_positive) for v in views
        )

    def forget(self, compute: Callable, batches: Sequence[TiledBatch]) -> None:
        self._asked.pop(_key(compute, batches), None)


def _views(batches: Sequence[TiledBatch]) -> list[View]:
    return [view for batch in batches for view in batch.views]


def _key(compute: Callable, batches: Sequence[TiledBatch]) -> tuple:
    """The row loss and what its requests may depend on besides the objective's settings."""
    layout = tuple(
        tuple(
            (
                view.transposed,
                _scale_kind(view.matrix.scale),
                view.matrix.column_offset is not None,
                view.matrix.own_column is not None,
                view.matrix.anchor_labels is not None,
                view.matrix.extra_positives is not None,
            )
            for view in batch.views
        )
        for batch in batches
    )
    return getattr(compute, "__func__", compute), layout


def _scale_kind(scale: float | Tensor) -> int:
    """-1 for a number, else the tensor's dimensions (one per anchor: 1)."""
    return scale.ndim if isinstance(scale, Tensor) else -1
