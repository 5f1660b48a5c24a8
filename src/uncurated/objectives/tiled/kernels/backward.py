r"""The backward kernel: the gradient of one side's features, recomputing every score block on chip.

A launch computes ``dX = dG Y`` for one side ``X`` of the blocks ``X Y^T``
(the anchors ``A`` of the batch's ``G = A B^T``, or the candidates ``B`` of
a cross pairing, whose ``dB`` is ``dG^T A``: the same kernel with the roles
swapped). Each view that involves ``X`` is a *slot*: with its anchors along
the rows (``ON_ROWS``) or along the columns. For every block the kernel
recomputes the scores, each bitwise as the forward pass formed it: where the
block is ``G[J, I]^T`` (every slot of the ``dB`` launch; in a two-view
batch the slot with its anchors along the columns, which costs a second
product per block) it is formed as ``G[J, I]`` and transposed in registers
(see :mod:`.tile`). It then forms

.. math::

    dS'_{ij} = \sum_k g_{ik} w_k e^{w_k S'_{ij} - L_i(w_k)}
        + g^m_i e^{S'_{ij} - L_i(1)} (1 + S'_{ij} - m_i)
        - g^F_i \sigma(S'_{ij} + b)

on the negatives and ``dS_{i, p(i)} = g^s_i`` on the positives (zero
elsewhere), from the per-anchor statistics the forward pass saved and their
incoming gradients ``g``; then
``dG_{ij} = r_i dS'_{ij}`` summed over the slots, and ``dX += dG Y``.
Every per-sample quantity is a sum along the block's rows in the launch
where its sample runs along the rows, so nothing is added atomically:

* per anchor (``ON_ROWS``): the scale's gradient ``sum_j dS'_{ij} G_{ij}``
  (one per anchor, or a row's share of one scalar) and SigLIP's bias
  gradient ``sum_j g^F_i (-\sigma(S'_{ij} + b))``;
* per candidate (anchors along the columns): the offsets' gradient
  ``-sum_i dS'_{ij}`` and NUCLR's column statistic
  ``log sum_{i : j in N(i)} e^{S'_{ij} - r_i}`` for row offsets ``r``.

A program owns a block of rows and forms each of its score blocks, and
that block's ``dG``, once, whatever ``d``: where the padded dimension is
wider than one on-chip gradient block (``BLOCK_D`` columns), it applies
``dG Y`` slice by slice, adding each into float32 sums in global memory that
only this program touches (read, add, write: no atomics, and the order of the
sums is fixed). Each per-sample sum is stored once, by its row block's program.
"""

from __future__ import annotations

import triton
import triton.language as tl

from .tile import (
    along_anchors,
    finished_logsumexp,
    negative_log_sigmoid_term,
    running_logsumexp,
    score_block,
    view_scores,
)


@triton.jit
def logsumexp_slope(scores, negatives, weight, lse_ptr, grad_ptr, anchors, anchor_valid, ON_ROWS: tl.constexpr):
    """``g_i w e^{w S'_{ij} - L_i(w)}`` on the negatives, zero elsewhere."""
    lse = along_anchors(tl.load(lse_ptr + anchors, mask=anchor_valid, other=0.0), ON_ROWS)
    grad = along_anchors(tl.load(grad_ptr + anchors, mask=anchor_valid, other=0.0), ON_ROWS)
    return tl.exp(tl.where(negatives, scores * weight - lse, float("-inf"))) * (grad * weight)


@triton.jit
def slot_block(product, rows, cols, row_valid, col_valid, d_product, slot, SLOT: tl.constexpr, sums):
    """One slot on one block: its ``dS'`` folded into ``dG``, and its per-sample sums (:func:`slot_sums`) carried
    along the rows. The slot's tuples hold its view's fields too (read by :func:`~.tile.view_scores`)."""
    scale_total, bias_total, offset_total, column_max, column_total = sums
    ON_ROWS: tl.constexpr = SLOT.ON_ROWS
    scores, negatives, positives, scale = view_scores(product, rows, cols, row_valid, col_valid, slot, SLOT)
    if ON_ROWS:
        anchors = rows
        anchor_valid = row_valid
    else:
        anchors = cols
        anchor_valid = col_valid
    d_scores = tl.full(product.shape, 0.0, tl.float32)
    if SLOT.GRAD0:
        d_scores += logsumexp_slope(
            scores, negatives, slot.weight0, slot.lse0, slot.grad0, anchors, anchor_valid, ON_ROWS
        )
    if SLOT.GRAD1:
        d_scores += logsumexp_slope(
            scores, negatives, slot.weight1, slot.lse1, slot.grad1, anchors, anchor_valid, ON_ROWS
        )
    if SLOT.GRAD2:
        d_scores += logsumexp_slope(
            scores, negatives, slot.weight2, slot.lse2, slot.grad2, anchors, anchor_valid, ON_ROWS
        )
    if SLOT.MEAN:
        lse = along_anchors(tl.load(slot.mean_lse + anchors, mask=anchor_valid, other=0.0), ON_ROWS)
        mean = along_anchors(tl.load(slot.mean + anchors, mask=anchor_valid, other=0.0), ON_ROWS)
        grad = along_anchors(tl.load(slot.mean_grad + anchors, mask=anchor_valid, other=0.0), ON_ROWS)
        weights = tl.exp(tl.where(negatives, scores - lse, float("-inf")))
        d_scores += weights * (1.0 + tl.where(negatives, scores, 0.0) - mean) * grad
    if SLOT.SIGMOID_SUM:
        _, slope = negative_log_sigmoid_term(scores, tl.load(slot.bias).to(tl.float32))
        grad = along_anchors(tl.load(slot.sum_grad + anchors, mask=anchor_valid, other=0.0), ON_ROWS)
        term = tl.where(negatives, slope * grad, 0.0)
        d_scores += term
        if SLOT.BIAS_OUT:
            bias_total += tl.sum(term, 1)
    d_scores = tl.where(negatives, d_scores, 0.0)
    if SLOT.OFFSET_OUT:
        offset_total -= tl.sum(d_scores, 1)  # the positive score has no offset
    if SLOT.POSITIVE_GRAD:
        grad = along_anchors(tl.load(slot.positive_grad + anchors, mask=anchor_valid, other=0.0), ON_ROWS)
        d_scores += tl.where(positives, grad, 0.0)
    if SLOT.SCALE_OUT:
        scale_total += tl.sum(d_scores * product, 1)
    if SLOT.COLUMN_OUT:
        row_offset = along_anchors(tl.load(slot.row_offset + anchors, mask=anchor_valid, other=0.0), ON_ROWS)
        column_max, column_total, _, _ = running_logsumexp(
            column_max, column_total, tl.where(negatives, scores - row_offset, float("-inf"))
        )
    return d_product + d_scores * scale, (scale_total, bias_total, offset_total, column_max, column_total)


@triton.jit
def slot_sums(BLOCK_M: tl.constexpr):
    """A slot's per-sample sums before the first block: the scale's, the bias's and the offsets' gradients (zero),
    and the running maximum and sum of the column statistic."""
    zeros = tl.full((BLOCK_M,), 0.0, tl.float32)
    return zeros, zeros, zeros, tl.full((BLOCK_M,), float("-inf"), tl.float32), zeros


@triton.jit
def store_slot_sums(rows, row_valid, slot, SLOT: tl.constexpr, sums):
    """Write a slot's per-sample sums for the rows ``row_valid`` marks."""
    scale_total, bias_total, offset_total, column_max, column_total = sums
    if SLOT.SCALE_OUT:
        tl.store(slot.scale_out + rows, scale_total, mask=row_valid)
    if SLOT.BIAS_OUT:
        tl.store(slot.bias_out + rows, bias_total, mask=row_valid)
    if SLOT.OFFSET_OUT:
        tl.store(slot.offset_out + rows, offset_total, mask=row_valid)
    if SLOT.COLUMN_OUT:
        tl.store(slot.column_out + rows, finished_logsumexp(column_max, column_total, row_valid), mask=row_valid)


@triton.jit
def gradient_operand(d_product, sides, shape: tl.constexpr):
    """``dG`` as the left operand of ``dG Y`` in the features' type, formed once per block for all its feature
    slices, and the power of two each row of the product is scaled back by (zero but for float16).

    float32: as it is (multiplied as ``INPUT_PRECISION`` says). bfloat16: rounded to bfloat16 (float32's exponent
    range). float16: each row first scaled by a power of two that brings its largest entry into [1, 2). ``dG``'s
    entries are of order ``r / B^2`` for a loss averaged over ``B`` anchors (3e-9 at B = 65,536 and r = 14), below
    float16's smallest number (6e-8): cast as they are, they would vanish; scaled, every entry within 2^-14 of its
    row's largest keeps float16's 11 bits. ``WIDEN``: rounded to the features' type and widened back."""
    dtype = sides.y.dtype.element_ty
    exponent = tl.full((shape.BLOCK_M,), 0.0, tl.float32)
    if shape.WIDEN:
        operand = d_product.to(dtype).to(tl.float32)
    elif dtype == tl.float16:
        largest = tl.max(tl.abs(d_product), 1)
        exponent = tl.floor(tl.log2(tl.where(largest > 0.0, largest, 1.0)))
        operand = (d_product * tl.exp2(-exponent)[:, None]).to(tl.float16)
    elif dtype == tl.bfloat16:
        operand = d_product.to(tl.bfloat16)
    else:
        operand = d_product
    return operand, exponent


@triton.jit
def feature_step(gradient, operand, exponent, sides, cols, col_valid, depth, depth_valid, shape: tl.constexpr):
    """``gradient += dG[:, cols] Y[cols, depth]`` for ``dG``'s operand (:func:`gradient_operand`), accumulated in
    float32, the product in the features' type (tensor cores for bfloat16 and float16)."""
    y = tl.load(
        sides.y + cols[:, None].to(tl.int64) * sides.stride_y + depth[None, :],
        mask=col_valid[:, None] & depth_valid[None, :],
        other=0.0,
    )
    if shape.WIDEN:
        gradient = tl.dot(operand, y.to(tl.float32), gradient, input_precision="ieee")
    elif y.dtype == tl.float16:
        gradient += tl.dot(operand, y) * tl.exp2(exponent)[:, None]
    elif y.dtype == tl.bfloat16:
        gradient = tl.dot(operand, y, gradient)
    else:
        gradient = tl.dot(operand, y, gradient, input_precision=shape.INPUT_PRECISION)
    return gradient


@triton.jit
def sliced_step(rows, row_valid, started, operand, exponent, sides, cols, col_valid, shape, BLOCK_D):
    """``dX[rows] += dG[:, cols] Y[cols]`` over every ``BLOCK_D``-column slice of the features, each read from and
    written back to ``sides.grad``'s float32 sums (``started``: after the first column block; before it, nothing is
    read). The program owns its rows, so no other program writes them (no atomics). Within the program a slice's load
    and store share one pointer block, not always one layout: compiled for sm_90 (CLIP's backward at d = 1,024, triton
    3.6 and 3.9, with a launch's alignment), with float32 features a slice is loaded and stored in one blocked layout,
    but with bfloat16 features it is loaded 8 columns per thread and stored 4 per thread, the tensor cores' layout
    between them, so the thread that stores an element need not be the one that loaded it. Nothing relies on the
    layouts: an element's stored value is computed from its loaded one (handed between threads by the layout
    conversions), so the store follows that load; and the barrier orders every store of the previous column block before
    these loads (one barrier per column block, not per slice: the slices' addresses are disjoint)."""
    tl.static_assert(sides.grad.dtype.element_ty == tl.float32, "sliced gradients add into float32 sums")
    tl.debug_barrier()
    for start in range(0, shape.DIM, BLOCK_D):
        depth = start + tl.arange(0, BLOCK_D)
        depth_valid = depth < sides.dim
        pointers = sides.grad + rows[:, None].to(tl.int64) * sides.stride_grad + depth[None, :]
        inside = row_valid[:, None] & depth_valid[None, :]
        gradient = tl.load(pointers, mask=inside & started, other=0.0)
        gradient = feature_step(gradient, operand, exponent, sides, cols, col_valid, depth, depth_valid, shape)
        tl.store(pointers, gradient, mask=inside)


@triton.jit
def gradient_kernel(
    sides,
    a,
    A: tl.constexpr,
    b,
    B: tl.constexpr,
    SLOTS: tl.constexpr,
    FEATURE_GRAD: tl.constexpr,
    shape: tl.constexpr,
    BLOCK_D: tl.constexpr,
):
    """``dX`` (into ``sides.grad``) for one block of rows, and the per-sample sums of slot ``a`` and (with
    ``SLOTS == 2``) ``b``: each slot a view and what it reads and writes (``a``, ``A``:
    :class:`~.arguments.SlotInputs`, :class:`~.arguments.SlotSwitches`).

    Each score block and its ``dG`` are formed once and applied to every feature column: in one on-chip
    accumulator where the padded dimension fits one ``BLOCK_D`` slice, otherwise slice by slice into the float32
    sums at ``sides.grad`` (:func:`sliced_step`)."""
    rows = tl.program_id(0) * shape.BLOCK_M + tl.arange(0, shape.BLOCK_M)
    row_valid = rows < sides.n_rows
    depth = tl.arange(0, BLOCK_D)
    depth_valid = depth < sides.dim
    gradient = tl.full((shape.BLOCK_M, BLOCK_D), 0.0, tl.float32)
    a_sums = slot_sums(shape.BLOCK_M)
    b_sums = slot_sums(shape.BLOCK_M)
    for col_start in range(0, sides.n_cols, shape.BLOCK_N):
        cols = col_start + tl.arange(0, shape.BLOCK_N)
        col_valid = cols < sides.n_cols
        a_product = score_block(sides, rows, cols, row_valid, col_valid, shape, A.TRANSPOSED)
        d_product = tl.full((shape.BLOCK_M, shape.BLOCK_N), 0.0, tl.float32)
        d_product, a_sums = slot_block(a_product, rows, cols, row_valid, col_valid, d_product, a, A, a_sums)
        if SLOTS == 2:
            if B.TRANSPOSED == A.TRANSPOSED:
                b_product = a_product
            else:  # a two-view batch's view in both roles: G[I, J] for one, G[J, I]^T for the other
                b_product = score_block(sides, rows, cols, row_valid, col_valid, shape, B.TRANSPOSED)
            d_product, b_sums = slot_block(b_product, rows, cols, row_valid, col_valid, d_product, b, B, b_sums)
        if FEATURE_GRAD:
            operand, exponent = gradient_operand(d_product, sides, shape)
            if shape.DIM <= BLOCK_D:
                gradient = feature_step(gradient, operand, exponent, sides, cols, col_valid, depth, depth_valid, shape)
            else:
                started = col_start > 0
                sliced_step(
                    rows,
                    row_valid,
                    started,
                    operand,
                    exponent,
                    sides,
                    cols,
                    col_valid,
                    shape,
                    BLOCK_D,
                )
    if FEATURE_GRAD:
        if shape.DIM <= BLOCK_D:
            tl.store(
                sides.grad + rows[:, None].to(tl.int64) * sides.stride_grad + depth[None, :],
                gradient.to(sides.grad.dtype.element_ty),
                mask=row_valid[:, None] & depth_valid[None, :],
            )
    store_slot_sums(rows, row_valid, a, A, a_sums)
    if SLOTS == 2:
        store_slot_sums(rows, row_valid, b, B, b_sums)
