"""What a row loss receives: the row statistics of a score matrix, the same on every engine.

A row loss (:meth:`~uncurated.objectives.base.ContrastiveObjective.row_loss`) maps a batch's score matrix to one
loss per anchor. It sees the matrix as :class:`RowStatistics` alone, whichever engine computes it: the dense
:class:`~uncurated.objectives.engine.ScoreMatrix`, the Python tiles or the Triton kernels
(:class:`~uncurated.objectives.tiled.TiledScoreMatrix`), or a batch split across processes
(:class:`~uncurated.objectives.local_rows.SplitCandidates`).

**The record-and-serve rule.** On the tiled engines a row loss runs twice: first against matrices that *record*
which statistics it asks for (each answer a placeholder), then, after one fused pass over the tiles has computed
all of them, against matrices that *serve* the results (:func:`~uncurated.objectives.tiled.fused_map`). Later
calls may skip the recording run and replay what was recorded. So a row loss must ask for the same statistics
whatever their values (no branch on a value), and must have no side effect beyond overwriting what the serving
run overwrites again (a diagnostic keyed by the matrix, say).

**The whole matrix is refused on every engine.** ``logits``, ``similarities``, ``negative_logits`` and
``negative_mask`` (:data:`DENSE_MATRICES`) raise ``AttributeError`` naming the statistics to use instead, on the
dense engine too. The alternative, handing a loss that reads them to the dense engine with a warning, would make
``tiling="auto"`` form the R x C matrix and its gradients exactly where it chose tiles because they do not fit
(about 8 buffers of 16 GiB each in float32 at B = 65,536), and a batch split across processes has no process
that holds the whole matrix to hand it to. A loss of any elementwise function of the negatives' scores is
``negative_sum(fn, *params)``; of their soft maximum, ``negative_logsumexp(weight)``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NoReturn, Protocol, runtime_checkable

from torch import Tensor

DENSE_MATRICES = ("similarities", "logits", "negative_logits", "negative_mask")
"""The R x C matrices a row loss may not read (see the module docstring)."""


def refuse_dense(name: str) -> NoReturn:
    """Raise the refusal of a dense matrix ``name``, the same on every engine."""
    raise AttributeError(
        f"a row loss reads a score matrix's row statistics, not its dense R x C matrices ({name}), on every engine "
        "(the tiled engines never form them): use positive_logit(), negative_logsumexp(weight), negative_sum(fn, "
        "*params) for an elementwise fn of the negatives' scores, negative_mean_score(), positive_logsumexp(weight) "
        "or statistic(name) for a declared one (uncurated.objectives.declarations)"
    )


@runtime_checkable
class RowStatistics(Protocol):
    """The per-anchor statistics of a score matrix ``S`` (R anchors, C candidates) a row loss may ask for, and the
    facts of its layout; see :mod:`uncurated.objectives.engine` for their definitions and the module docstring for
    the rules a row loss obeys."""

    scale: float | Tensor
    """The inverse temperature ``1/t``: a number, a 0-d tensor or one per anchor, (R,)."""
    positive_column: Tensor
    """(R,) the column of each anchor's positive (-1 where it is not among the candidates)."""

    @property
    def negative_slots(self) -> int:
        """``N``: the negatives per anchor before any label masking."""
        ...

    @property
    def positive_views(self) -> int:
        """``M``: the positive views per anchor (1 + extra views)."""
        ...

    def positive_logit(self) -> Tensor:
        """(R,) ``s_i = S[i, p(i)]``."""
        ...

    def negative_logsumexp(self, weight: float = 1.0) -> Tensor:
        """(R,) ``L_i(w) = log sum_{j in N(i)} exp(w S[i, j])``."""
        ...

    def negative_sum(self, fn: Callable[..., Tensor], *params: Tensor | float) -> Tensor:
        """(R,) ``F_i(f) = sum_{j in N(i)} f(S[i, j], *params)`` for an elementwise ``f``."""
        ...

    def negative_mean_score(self) -> Tensor:
        """(R,) the negatives' scores averaged under their softmax."""
        ...

    def positive_logsumexp(self, weight: float = 1.0) -> Tensor:
        """(R,) ``P_i(w) = log sum_m exp(w S+[i, m])`` over the positive and the extra views."""
        ...

    def statistic(self, name: str) -> Tensor:
        """(R,) the statistic declared as ``name`` (:mod:`~uncurated.objectives.declarations`)."""
        ...
