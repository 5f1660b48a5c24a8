"""The kernels' arguments in named groups: one tuple per side, view and slot, read in the kernels by field name.

Triton (3.3 and later) takes named tuples as kernel arguments, under its
interpreter and compiled alike: a tuple's fields are bound and specialized
one by one, so a field holding a ``tl.constexpr`` is a compile-time switch.
A group of switches is passed whole as one ``tl.constexpr`` argument, whose
fields the kernels read by name: the launcher specializes it as one value,
where a tuple's fields cost one each. A group of runtime values is passed
:func:`compact`: without the fields a launch does not need (``None``), which
the kernel never reads (each is read only under the switch that says it is
there). Every tuple and every field costs the launcher time on each call
(``benchmarks/triton_launcher.py``). Nothing here imports triton.
"""

from __future__ import annotations

from collections import namedtuple
from functools import cache
from typing import Any, NamedTuple


def compact(group: Any) -> Any:
    """``group`` (a named tuple) without its ``None`` fields: a named tuple of the same name with the other fields,
    in order."""
    kept = tuple(name for name, value in zip(group._fields, group, strict=True) if value is not None)
    return compact_type(type(group).__name__, kept)(*(value for value in group if value is not None))


@cache
def compact_type(name: str, fields: tuple[str, ...]) -> Any:
    """One named-tuple class per group and set of fields, so that a launch's specialization is the same each call."""
    return namedtuple(name, fields)


class Sides(NamedTuple):
    """The features of a launch's blocks ``X Y^T``: ``X`` along the block rows, ``Y`` along the columns."""

    x: Any
    y: Any
    n_rows: Any
    n_cols: Any
    dim: Any
    stride_x: Any
    stride_y: Any
    grad: Any = None
    """The backward kernel's output ``dX``, with ``X``'s shape (in float32 where it adds slice by slice)."""
    stride_grad: Any = None


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


def extended(name: str, group: Any, *fields: str) -> Any:
    """A named-tuple class ``name`` whose fields are ``group``'s (a named-tuple class) followed by ``fields``: a slot's
    group holds its view's, declared once."""
    return namedtuple(name, (*group._fields, *fields))


#: One slot of the backward kernel: its view's inputs (:class:`ViewInputs`' fields), the saved statistics and their
#: incoming gradients it reads, and the per-sample sums it writes (``None`` where not wanted).
SlotInputs = extended(
    "SlotInputs",
    ViewInputs,
    *("lse0", "lse1", "lse2", "grad0", "grad1", "grad2", "weight0", "weight1", "weight2"),
    *("mean", "mean_lse", "mean_grad", "sum_grad", "row_offset", "positive_grad"),
    *("scale_out", "bias_out", "offset_out", "column_out"),
)

#: How a slot's view sees the block (:class:`ViewSwitches`' fields), and which of its gradient terms and per-sample
#: sums a launch computes (switches).
SlotSwitches = extended(
    "SlotSwitches",
    ViewSwitches,
    *("GRAD0", "GRAD1", "GRAD2", "MEAN", "POSITIVE_GRAD", "SCALE_OUT", "BIAS_OUT", "OFFSET_OUT", "COLUMN_OUT"),
)
