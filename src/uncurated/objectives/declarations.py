"""One declaration per row statistic: its dense formula, tile accumulator, backward factor and split rule, registered.

A row statistic beyond the built-in ones of :class:`~uncurated.objectives.row_statistics.RowStatistics` is declared
once, as a :class:`StatisticDeclaration`, and registered with :func:`declare`. A row loss reads it as
``scores.statistic(name)``, and every engine computes it from the declaration alone, naming no statistic:

* the dense engine (:class:`~uncurated.objectives.engine.ScoreMatrix`) evaluates :attr:`~StatisticDeclaration.dense`
  on the whole matrix, the reference the other engines are held to;
* the Python tiles (:mod:`uncurated.objectives.tiled`) record it by its declaration (the key a replay keeps),
  accumulate it tile by tile with its :attr:`~StatisticDeclaration.accumulator` in the fused pass, beside the
  built-in statistics, and differentiate it with its :attr:`~StatisticDeclaration.backward` factor, tile by tile;
* a batch split across processes (:class:`~uncurated.objectives.local_rows.SplitCandidates`) adds the parts of the
  processes by its :attr:`~StatisticDeclaration.combine` rule;
* the Triton kernels have no slot for it: ``tiling="triton"`` refuses it, naming it, and ``tiling="auto"`` runs
  that pass on the Python tiles.

The derivative of a statistic of the negatives' scores with respect to ``S'_ij`` is a per-anchor factor times a
function of ``S'_ij`` (the reason the engine computes statistics, not objectives): ``w e^{w S'_ij - L_i(w)}`` for a
log-sum-exp, ``f'(S'_ij)`` for a sum. The backward factor is that derivative on a tile, from the tile's scores and
the per-anchor values the accumulator saved.

Every function of a declaration takes a tile (or the whole matrix) with its anchors along the rows: ``scores``
``S'_ij`` (offsets included), finite everywhere, and ``negatives``, the boolean mask of the entries that are the
anchor's negatives (its positive, its own view and, under the supervised oracle, its label left out). Per-anchor
values come as columns, shape (n, 1).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

import torch
from torch import Tensor


class TileAccumulator(Protocol):
    """How a statistic accumulates over the tiles of a matrix: per-anchor state, a tile's share, the value."""

    def start(self, length: int, dtype: torch.dtype, device: torch.device) -> tuple[Tensor, ...]:
        """The state before any tile: tensors of ``length`` entries, one per anchor."""
        ...

    def add(self, state: tuple[Tensor, ...], scores: Tensor, negatives: Tensor) -> None:
        """Add one tile of ``scores`` and ``negatives`` (its anchors along the rows) to ``state``, the tile's
        anchors' entries of the state's tensors, in place."""
        ...

    def finish(self, state: tuple[Tensor, ...]) -> tuple[Tensor, tuple[Tensor, ...]]:
        """The statistic (one per anchor) and the per-anchor tensors its backward factor reads besides it."""
        ...


BackwardFactor = Callable[[Tensor, Tensor, Tensor, tuple[Tensor, ...], Tensor], Tensor]
"""``(scores, negatives, value, saved, grad) -> dS'``: the gradient the statistic puts on each entry of a tile, from
the statistic's value, the accumulator's saved tensors and the incoming gradient, each (n, 1); zero off the
negatives (the engine masks it again)."""

SplitRule = Callable[[Tensor, Tensor], Tensor]
"""``(parts, logsumexps) -> value``: the statistic of an anchor whose negatives are split across ``W`` processes,
from each process's part (W, n) and each part's ``L(1)``, its share of the negatives' exponentials (W, n)."""


@dataclass(frozen=True, eq=False)
class StatisticDeclaration:
    """Everything the engines know of one row statistic of the negatives' scores (see the module docstring).

    Hashed by identity: the declaration itself is the key the tiled engine records, serves and replays it by.
    """

    name: str
    """What a row loss asks for: ``scores.statistic(name)``."""
    dense: Callable[[Tensor, Tensor], Tensor]
    """``(scores, negatives) -> (R,)`` on the whole (R, C) matrix: the dense engine's formula and the reference."""
    accumulator: TileAccumulator
    """How a tile's share combines with the tiles before it (the Python tiles)."""
    backward: BackwardFactor
    """The gradient it puts on a tile's entries (the Python tiles' backward pass)."""
    combine: SplitRule
    """How the parts of the processes combine (a cross pairing split across processes)."""
    oracle: Callable[[Tensor, Tensor | float], Tensor] | None = None
    """``(value, log(N / N_i)) -> value`` under the supervised oracle, which keeps ``N_i`` of ``N`` negatives: how
    the statistic is rescaled to the scale of ``N`` (``None``: it is not, as a mean is not)."""


DECLARED: dict[str, StatisticDeclaration] = {}
"""The registered declarations, by name."""


def declare(declaration: StatisticDeclaration) -> StatisticDeclaration:
    """Register ``declaration`` (and return it); a name registered twice is an error naming both."""
    found = DECLARED.get(declaration.name)
    if found is not None and found is not declaration:
        raise ValueError(
            f"the statistic {declaration.name!r} is declared twice: by {_origin(found)} and by {_origin(declaration)}"
        )
    DECLARED[declaration.name] = declaration
    return declaration


def declared(name: str) -> StatisticDeclaration:
    """The registered declaration of ``name`` (``ValueError`` naming the registered ones if none is)."""
    if name not in DECLARED:
        known = ", ".join(sorted(DECLARED)) or "none"
        raise ValueError(f"statistic(name): no statistic {name!r} is declared (registered: {known}); see declare()")
    return DECLARED[name]


def _origin(declaration: StatisticDeclaration) -> str:
    """Where a declaration's dense formula is defined: the module that declared it, as far as it can be told."""
    return getattr(declaration.dense, "__module__", None) or "an unknown module"


def add_parts(parts: Tensor, logsumexps: Tensor) -> Tensor:
    """The split rule of a sum over the negatives: the processes' parts added."""
    return parts.sum(dim=0)


def softmax_parts(parts: Tensor, logsumexps: Tensor) -> Tensor:
    """The split rule of a mean under the negatives' softmax: the parts weighted by their shares of the
    exponentials."""
    return (torch.softmax(logsumexps, dim=0) * parts).sum(dim=0)
