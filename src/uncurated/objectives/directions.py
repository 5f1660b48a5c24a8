"""The pieces of a global objective's batch: its directions (a score matrix with the dataset positions and state of
its rows and columns) and what an objective computes for each (see :mod:`uncurated.objectives.stateful`)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from torch import Tensor

from .engine import ScoreMatrix

Segments = list[tuple[str, Tensor]]
"""The dataset positions of a direction's rows (or their positives), as ``(side, index)`` pieces in order."""


@dataclass
class Direction:
    """One score matrix of a batch and the dataset positions and state of its rows and columns."""

    scores: ScoreMatrix
    rows: Segments
    positives: Segments
    """The dataset positions of each anchor's positive, in row order: the contrast samples whose updates
    this process computes (with a shard, the global batch's others are another process's positives)."""
    pool: int
    """Negatives per anchor in the whole dataset (``n - 1`` across modalities, ``2n - 2`` for two views)."""
    contrast_size: int
    """Contrast samples in the whole dataset (``n`` across modalities, ``2n`` for two views)."""
    batch_anchors: int
    """The direction's anchors in the global batch (``B`` across modalities, ``2B`` for two views)."""
    temperature: float
    row_state: dict[str, Tensor] = field(default_factory=dict)
    """Every state field of the anchors, in row order."""
    column_state: dict[str, Tensor] = field(default_factory=dict)
    """Every state field of the contrast samples, in the score matrix's column order."""


@dataclass
class ColumnPass:
    """A state update of the contrast samples that needs the column statistic of the scores.

    ``finish`` turns the column statistic at each anchor's positive,
    ``scores.negative_column_logsumexp(row_offset)[positive_column]`` over the
    whole (global) batch's anchors, into the updates of those positives, in
    row order. The statistic sums over the anchors, so the tiled engine
    accumulates it in the backward pass (see :meth:`StatefulObjective.compute`).
    """

    row_offset: Tensor
    finish: Callable[[Tensor], dict[str, Tensor]]


@dataclass
class DirectionResult:
    """What an objective computes for one direction."""

    values: Tensor
    """(R,) per-anchor objective estimates (their mean is the reported value)."""
    surrogates: Tensor
    """(R,) per-anchor surrogates whose gradient is the algorithm's model gradient."""
    row_updates: dict[str, Tensor] = field(default_factory=dict)
    column_pass: ColumnPass | None = None
