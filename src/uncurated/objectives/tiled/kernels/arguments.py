"""The kernels' arguments in named groups: one tuple per side, view and slot, read in the kernels by field name.

Triton (3.3 and later) takes named tuples as kernel arguments, under its
interpreter and compiled alike: a tuple's fields are bound and specialized
one by one, so a field holding a ``tl.constexpr`` is a compile-time switch
and one holding ``None`` compiles to nothing. Every pointer a launch does not
need is ``None``; only the values a kernel variant reads are runtime
arguments. A group of switches is passed whole as one ``tl.constexpr``
argument, whose fields the kernels read by name: the launcher specializes it
as one value, where a tuple's fields cost one each
(``benchmarks/triton_launcher.py``). Nothing here imports triton.
"""

from __future__ import annotations

from typing import Any, NamedTuple


class Sides(NamedTuple):
    """The features of a launch's blocks ``X Y^T``: ``X`` along the block rows, ``Y`` along the columns."""

    x: Any
    y: Any
    n_rows: Any
    n_cols: Any
    dim: Any
    stride_x: Any
    stride_y: Any


class Shape(NamedTuple):
    """The block shape and how its products run (switches)."""

    BLOCK_M: Any
    BLOCK_N: Any
    BLOCK_K: Any
    DIM: Any
    INPUT_PRECISION: Any
    """How ``tl.dot`` multiplies float32 operands: ``"ieee"`` or ``"tf32"`` (:func:`~.support.input_precision`)."""
    WIDEN: Any


class ViewInputs(NamedTuple):
    """One view's scale, offsets, excluded entries and SigLIP's bias (``None`` where it has none)."""

    scale: Any
    offset: Any
    positive: Any
    own: Any
    anchor_labels: Any
    candidate_labels: Any
    bias: Any


class ViewSwitches(NamedTuple):
    """How a view sees the block (switches): its anchors along the rows, ``G``'s rows along the columns, one scale
    per anchor, offsets, an own view, labels, SigLIP's negative sum."""

    ON_ROWS: Any
    TRANSPOSED: Any
    PER_ANCHOR: Any
    OFFSET: Any
    OWN: Any
    LABELS: Any
    SIGMOID_SUM: Any


class RowOutputs(NamedTuple):
    """What the forward kernel writes per anchor (``None`` where not asked), and the log-sum-exps' weights."""

    lse0: Any
    lse1: Any
    lse2: Any
    sum: Any
    mean: Any
    positive_score: Any
    weight0: Any
    weight1: Any
    weight2: Any


class SlotInputs(NamedTuple):
    """One slot of the backward kernel: the saved statistics and their incoming gradients it reads, and the
    per-sample sums it writes (``None`` where not wanted)."""

    lse0: Any
    lse1: Any
    lse2: Any
    grad0: Any
    grad1: Any
    grad2: Any
    weight0: Any
    weight1: Any
    weight2: Any
    mean: Any
    mean_lse: Any
    mean_grad: Any
    sum_grad: Any
    row_offset: Any
    positive_grad: Any
    scale_out: Any
    bias_out: Any
    offset_out: Any
    column_out: Any


class SlotSwitches(NamedTuple):
    """Which of a slot's gradient terms and per-sample sums a launch computes (switches)."""

    GRAD0: Any
    GRAD1: Any
    GRAD2: Any
    MEAN: Any
    POSITIVE_GRAD: Any
    SCALE_OUT: Any
    BIAS_OUT: Any
    OFFSET_OUT: Any
    COLUMN_OUT: Any
