"""The core every batch objective shares: row statistics of a score matrix.

A batch of anchors ``x_1..x_R`` and candidates ``y_1..y_C`` (unit vectors by
default) defines the score matrix

    S[i, j] = <x_i, y_j> / t .

Each anchor ``i`` has one positive column ``p(i)`` and a set of negative
columns ``N(i)``: every column except ``p(i)``, the anchor's own column in a
two-view batch and, in the supervised oracle, the columns that share its label.
Every objective of this package is a closed-form combination of a few per-row
statistics of ``S``:

==============================  ===========================================
statistic                       definition
==============================  ===========================================
positive score                  ``s_i = S[i, p(i)]``
negative log-sum-exp            ``L_i(w) = log sum_{j in N(i)} exp(w S[i, j])``
negative sum                    ``F_i(f) = sum_{j in N(i)} f(S[i, j])``
positive log-sum-exp            ``P_i(w) = log sum_{m} exp(w S+[i, m])`` over
                                the positive and any extra positive views
negative mean score             ``sum_{j in N(i)} softmax_j(S[i, .]) S[i, j]``
==============================  ===========================================

plus any statistic declared in :mod:`~uncurated.objectives.declarations`
(``statistic(name)``), and, for the per-sample state updates of the global objectives, one column
statistic, ``log sum_{i : j in N(i)} exp(S[i, j] - r_i)`` for a per-row ``r``.

Two generalizations serve the global objectives of Wang et al. 2025: the inverse
temperature may be one per anchor (iSogCLR's individual temperatures), and
each column may carry an offset ``o_j`` that the negatives' scores are shifted
by (NUCLR's popularities ``zeta_j / t``): the negative statistics then see
``S[i, j] - o_j``, the positive score does not.

For instance InfoNCE is ``log(e^{s_i} + e^{L_i(1)}) - s_i``, HCL's importance-
weighted negative mean is ``exp(L_i(beta + 1) - L_i(beta))``, RINCE needs
``s_i`` and ``L_i(1)``, and SigLIP is ``F_i(log sigmoid(-(. + b)))`` plus the
positive term. The pairings at the bottom of this module lay out the two batch
shapes: ``cross`` (x_i pairs with y_i, one matrix per direction, CLIP style)
and ``two_view`` (the SimCLR batch of 2B anchors with the own view masked).

Why statistics rather than objectives compute on ``S``: the derivative of each
statistic with respect to ``S[i, j]`` is a per-row factor times a function of
``S[i, j]`` alone (``w exp(w S_ij - L_i)`` for ``L``, ``f'(S_ij)`` for ``F``).
So the statistics can be accumulated block by block with a running
log-sum-exp, and the backward pass can recompute each block, never holding the
R x C matrix. This module computes them densely; the tiled ``ScoreMatrix`` of
:mod:`uncurated.objectives.tiled` offers the same methods and serves every
objective unchanged.

Supervised oracle (thesis eq. 3.1, Q = N): when labels are given, negatives
that share the anchor's label are dropped and the negative statistics are
rescaled by ``N / N_i`` (``N`` in-batch negative slots, ``N_i`` of them with
another label), so that they estimate the sum over N true negatives and stay
on the scale of the unsupervised objective.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from functools import cached_property

import torch
from torch import Tensor

from ..precision import statistics_dtype
from .declarations import StatisticDeclaration, declared
from .row_statistics import refuse_dense

PAIRINGS = ("cross", "two_view")


class ScoreMatrix:
    """Scores of ``anchors`` against ``candidates`` and which entries are positive or negative.

    Args:
        anchors: (R, d) anchor embeddings, one row of ``S`` each.
        candidates: (C, d) candidate embeddings, one column of ``S`` each.
        scale: inverse temperature ``1/t``: a float, a scalar tensor, or one
            per anchor, shape (R,).
        positive_column: (R,) column of each anchor's positive, or -1 where the
            positive is not among the candidates (a cross pairing's reverse
            direction seen from one process's rows of a partitioned batch).
        own_column: (R,) column to leave out of the anchor's negatives (the
            anchor itself in a two-view batch), or ``None``.
        anchor_labels, candidate_labels: (R,) and (C,) class labels for the
            supervised oracle, or ``None``.
        extra_positives: (R, M - 1, d) further positive views per anchor, or
            ``None``; only ``positive_logsumexp`` uses them.
        column_offset: (C,) offsets ``o_j`` subtracted from the negatives'
            scores in column ``j``, or ``None``.
    """

    def __init__(
        self,
        anchors: Tensor,
        candidates: Tensor,
        scale: float | Tensor,
        positive_column: Tensor,
        own_column: Tensor | None = None,
        anchor_labels: Tensor | None = None,
        candidate_labels: Tensor | None = None,
        extra_positives: Tensor | None = None,
        column_offset: Tensor | None = None,
    ) -> None:
        self.anchors = anchors
        self.candidates = candidates
        self.scale = scale
        self.positive_column = positive_column
        self.own_column = own_column
        self.anchor_labels = anchor_labels
        self.candidate_labels = candidate_labels
        self.extra_positives = extra_positives
        self.column_offset = column_offset

    @property
    def negative_slots(self) -> int:
        """``N``: the number of negatives per anchor before any label masking."""
        return self.candidates.shape[0] - 1 - (self.own_column is not None)

    @property
    def positive_views(self) -> int:
        """``M``: the number of positive views per anchor (1 + extra views)."""
        return 1 if self.extra_positives is None else 1 + self.extra_positives.shape[1]

    @property
    def engine_parts(self) -> tuple[ScoreMatrix, ...]:
        """The matrices the engine computes for this one: itself (a combination of several names them)."""
        return (self,)

    @property
    def recording(self) -> bool:
        """Whether the statistics are placeholders of the tiled engine's recording run (never, densely)."""
        return False

    @property
    def row_scale(self) -> float | Tensor:
        """The inverse temperature, shaped to broadcast over rows: a scalar or (R, 1)."""
        if isinstance(self.scale, Tensor) and self.scale.ndim == 1:
            return self.scale[:, None]
        return self.scale

    # The dense matrices are the dense engine's own: a row loss reads the statistics (row_statistics).
    similarities = property(lambda self: refuse_dense("similarities"))
    logits = property(lambda self: refuse_dense("logits"))
    negative_logits = property(lambda self: refuse_dense("negative_logits"))
    negative_mask = property(lambda self: refuse_dense("negative_mask"))

    @cached_property
    def _similarities(self) -> Tensor:
        """The dense (R, C) matrix of inner products ``<x_i, y_j>``: the product in the features' type, the
        result in :func:`~uncurated.precision.statistics_dtype` (the precision contract)."""
        return (self.anchors @ self.candidates.T).to(statistics_dtype(self.anchors.dtype))

    @cached_property
    def _logits(self) -> Tensor:
        """The dense (R, C) score matrix ``S``."""
        return self.row_scale * self._similarities

    @cached_property
    def _negative_logits(self) -> Tensor:
        """The scores the negative statistics see: ``S[i, j] - o_j`` (``S`` without offsets)."""
        if self.column_offset is None:
            return self._logits
        return self._logits - self.column_offset

    @cached_property
    def _negative_mask(self) -> Tensor:
        """(R, C) boolean mask of each anchor's negatives ``N(i)``."""
        rows = torch.arange(self.anchors.shape[0], device=self.anchors.device)
        mask = torch.ones(self._logits.shape, dtype=torch.bool, device=self._logits.device)
        # -1: the positive is not among the candidates. Written as True into column 0 (left as it was) rather
        # than picked out by a boolean mask, whose size the host would have to read from the device.
        absent = self.positive_column < 0
        mask[rows, self.positive_column.clamp(min=0)] = absent
        if self.own_column is not None:
            mask[rows, self.own_column] = False
        if self.anchor_labels is not None:
            if self.candidate_labels is None:
                raise ValueError("labels: the anchors have labels, so the candidates need theirs")
            mask &= self.anchor_labels[:, None] != self.candidate_labels[None, :]
            counts = mask.sum(dim=1)
            if bool((counts == 0).any()):
                row = int(torch.nonzero(counts == 0)[0])
                raise ValueError(
                    f"labels: anchor {row} has no negative with another label in this batch; "
                    "the supervised oracle needs at least one per anchor"
                )
        return mask

    @cached_property
    def _oracle_log_rescale(self) -> Tensor | float:
        """``log(N / N_i)`` per row under the supervised oracle, else 0."""
        if self.anchor_labels is None:
            return 0.0
        kept = self._negative_mask.sum(dim=1).to(self._logits.dtype)
        return math.log(self.negative_slots) - torch.log(kept)

    def positive_logit(self) -> Tensor:
        """(R,) positive scores ``s_i = S[i, p(i)]``."""
        return self._logits.gather(1, self.positive_column[:, None]).squeeze(1)

    def negative_logsumexp(self, weight: float = 1.0) -> Tensor:
        """(R,) ``L_i(w) = log sum_{j in N(i)} exp(w S[i, j])``, oracle-rescaled."""
        weighted = self._negative_logits if weight == 1.0 else weight * self._negative_logits
        masked = weighted.masked_fill(~self._negative_mask, -math.inf)
        return torch.logsumexp(masked, dim=1) + self._oracle_log_rescale

    def negative_sum(self, fn: Callable[..., Tensor], *params: Tensor | float) -> Tensor:
        """(R,) ``F_i(f) = sum_{j in N(i)} f(S[i, j], *params)`` for an elementwise ``f``, oracle-rescaled.

        Tensors ``f`` depends on (SigLIP's learnable bias) are passed as
        ``params`` rather than captured, so that the tiled engine can
        differentiate them too.
        """
        values = torch.where(self._negative_mask, fn(self._negative_logits, *params), 0.0).sum(dim=1)
        if self.anchor_labels is None:
            return values
        rescale = self._oracle_log_rescale
        return values if isinstance(rescale, float) else values * torch.exp(rescale)

    def negative_mean_score(self) -> Tensor:
        """(R,) the negatives' scores averaged under their softmax, ``sum_j softmax_j(S'_i) S'_ij``.

        ``S'`` are the scores the negatives see (offsets included). Its
        product with ``exp(L_i(1))`` is ``sum_j S'_ij exp(S'_ij)``, which
        iSogCLR's temperature gradient needs and which overflows if formed
        directly.
        """
        masked = self._negative_logits.masked_fill(~self._negative_mask, -math.inf)
        weights = torch.softmax(masked, dim=1)
        return (weights * torch.where(self._negative_mask, self._negative_logits, 0.0)).sum(dim=1)

    def statistic(self, name: str) -> Tensor:
        """(R,) the statistic declared as ``name`` (:mod:`~uncurated.objectives.declarations`), oracle-rescaled as
        its declaration says."""
        declaration = declared(name)
        value = self._declared(declaration)
        if self.anchor_labels is None or declaration.oracle is None:
            return value
        return declaration.oracle(value, self._oracle_log_rescale)

    def _declared(self, declaration: StatisticDeclaration) -> Tensor:
        """A declared statistic before the oracle's rescaling: its dense formula on the negatives' scores."""
        return declaration.dense(self._negative_logits, self._negative_mask)

    def negative_column_logsumexp(self, row_offset: Tensor) -> Tensor:
        """(C,) ``log sum_{i : j in N(i)} exp(S'_ij - r_i)``: over the anchors that have column ``j`` as a negative.

        ``-inf`` for a column that is no anchor's negative.
        """
        shifted = self._negative_logits - row_offset[:, None]
        return torch.logsumexp(shifted.masked_fill(~self._negative_mask, -math.inf), dim=0)

    def positive_logsumexp(self, weight: float = 1.0) -> Tensor:
        """(R,) ``P_i(w) = log sum_m exp(w S+[i, m])`` over the positive and the extra views."""
        positive = self.positive_logit() if weight == 1.0 else weight * self.positive_logit()
        if self.extra_positives is None:
            return positive
        extra = torch.einsum("rd,rmd->rm", self.anchors, self.extra_positives).to(positive.dtype)
        extra = self.row_scale * extra
        return torch.logsumexp(torch.cat([positive[:, None], weight * extra], dim=1), dim=1)

    def transposed(
        self,
        scale: float | Tensor | None = None,
        column_offset: Tensor | None = None,
        positive_column: Tensor | None = None,
    ) -> ScoreMatrix:
        """The same pairs seen from the candidates, for cross pairings, sharing the inner products.

        The reverse direction has its own ``scale`` (default: this one, which
        must then be shared by all rows) and ``column_offset`` (default: none).
        Requires no own column. A candidate that is no anchor's positive gets
        the positive column -1 (one process's rows of a larger batch).
        ``positive_column``: the reverse direction's positives where the caller
        knows them (a diagonal is its own inverse), else computed.
        """
        if self.own_column is not None or self.extra_positives is not None:
            raise ValueError("only a cross-pairing score matrix can be transposed")
        if scale is None:
            if isinstance(self.scale, Tensor) and self.scale.ndim == 1:
                raise ValueError("a matrix with one scale per anchor needs a scale for its transpose")
            scale = self.scale
        return self._reverse(
            anchors=self.candidates,
            candidates=self.anchors,
            scale=scale,
            positive_column=(
                _reverse_positives(self.positive_column, self.candidates.shape[0])
                if positive_column is None
                else positive_column
            ),
            anchor_labels=self.candidate_labels,
            candidate_labels=self.anchor_labels,
            column_offset=column_offset,
        )

    def _reverse(self, **arguments) -> ScoreMatrix:
        """The matrix of :meth:`transposed`'s ``arguments``, reusing what this one computed."""
        flipped = ScoreMatrix(**arguments)
        flipped.__dict__["_similarities"] = self._similarities.T
        if arguments["scale"] is self.scale:
            flipped.__dict__["_logits"] = self._logits.T
        return flipped


def _reverse_positives(positive_column: Tensor, candidates: int) -> Tensor:
    """(C,) the anchor whose positive each candidate is, -1 where none is (the inverse permutation if square)."""
    reverse = torch.full((candidates,), -1, dtype=torch.long, device=positive_column.device)
    reverse[positive_column] = torch.arange(positive_column.shape[0], device=positive_column.device)
    return reverse


def cross_pairing(
    a: Tensor,
    b: Tensor,
    scale: float | Tensor,
    labels: Tensor | None = None,
    *,
    scale_b: float | Tensor | None = None,
    offset_a: Tensor | None = None,
    offset_b: Tensor | None = None,
    matrix: Callable[..., ScoreMatrix] = ScoreMatrix,
) -> tuple[ScoreMatrix, ScoreMatrix]:
    """CLIP's batch: ``a[i]`` pairs with ``b[i]``; one matrix per direction (a to b, b to a).

    ``scale`` is the inverse temperature of ``a``'s anchors, and of ``b``'s
    unless ``scale_b`` is given; ``offset_a`` and ``offset_b`` shift the
    negatives' scores of ``a``'s and ``b``'s samples as candidates (the global
    objectives' per-sample temperatures and popularities). ``matrix`` builds
    the score matrix (``ScoreMatrix``, or a tiled one).
    """
    diagonal = torch.arange(a.shape[0], device=a.device)
    forward = matrix(a, b, scale, diagonal, anchor_labels=labels, candidate_labels=labels, column_offset=offset_b)
    return forward, forward.transposed(scale=scale_b, column_offset=offset_a, positive_column=diagonal)


def two_view_positives(batch: int, device: torch.device | None = None) -> Tensor:
    """(2B,) the positive column of each anchor of ``[a; b]``: view ``i`` of one side pairs with ``i`` of the other."""
    rows = torch.arange(2 * batch, device=device)
    return (rows + batch) % (2 * batch)


def two_view_pairing(
    a: Tensor,
    b: Tensor,
    scale: float | Tensor,
    labels: Tensor | None = None,
    extra_positives: Tensor | None = None,
    *,
    column_offset: Tensor | None = None,
    matrix: Callable[..., ScoreMatrix] = ScoreMatrix,
) -> tuple[ScoreMatrix]:
    """SimCLR's batch: 2B anchors ``[a; b]``, each positive with its other view, own view masked.

    Each anchor has ``N = 2B - 2`` negatives. ``scale`` is one inverse
    temperature or one per anchor of ``[a; b]``, ``column_offset`` one offset
    per candidate. ``extra_positives`` of shape (B, M - 1, d) are further views
    of each sample, positives of both its anchors; ``matrix`` builds the score
    matrix (``ScoreMatrix``, or a tiled one).
    """
    batch = a.shape[0]
    views = torch.cat([a, b])
    view_labels = None if labels is None else torch.cat([labels, labels])
    extra = None if extra_positives is None else torch.cat([extra_positives, extra_positives])
    scores = matrix(
        views,
        views,
        scale,
        positive_column=two_view_positives(batch, a.device),
        own_column=torch.arange(2 * batch, device=a.device),
        anchor_labels=view_labels,
        candidate_labels=view_labels,
        extra_positives=extra,
        column_offset=column_offset,
    )
    return (scores,)
