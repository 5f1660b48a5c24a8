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

The gradient's feature columns may be split over programs (a second grid
axis) so that the on-chip gradient block stays small for wide features;
only the first writes the per-sample quantities.
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
def slot_block(
    product,
    rows,
    cols,
    row_valid,
    col_valid,
    d_product,
    scale_ptr,
    offset_ptr,
    positive_ptr,
    own_ptr,
    anchor_labels_ptr,
    candidate_labels_ptr,
    bias_ptr,
    lse0_ptr,
    lse1_ptr,
    lse2_ptr,
    grad0_ptr,
    grad1_ptr,
    grad2_ptr,
    weight0,
    weight1,
    weight2,
    mean_ptr,
    mean_lse_ptr,
    mean_grad_ptr,
    sum_grad_ptr,
    row_offset_ptr,
    positive_grad_ptr,
    scale_total,
    bias_total,
    offset_total,
    column_max,
    column_total,
    ON_ROWS: tl.constexpr,
    PER_ANCHOR: tl.constexpr,
    OFFSET: tl.constexpr,
    OWN: tl.constexpr,
    LABELS: tl.constexpr,
    GRAD0: tl.constexpr,
    GRAD1: tl.constexpr,
    GRAD2: tl.constexpr,
    MEAN: tl.constexpr,
    SIGMOID_SUM: tl.constexpr,
    SCALE_OUT: tl.constexpr,
    BIAS_OUT: tl.constexpr,
    OFFSET_OUT: tl.constexpr,
    COLUMN_OUT: tl.constexpr,
    POSITIVE_GRAD: tl.constexpr,
):
    """One slot on one block: its ``dS'`` folded into ``dG``, and its per-sample sums carried along the rows."""
    scores, negatives, positives, scale = view_scores(
        product,
        rows,
        cols,
        row_valid,
        col_valid,
        scale_ptr,
        offset_ptr,
        positive_ptr,
        own_ptr,
        anchor_labels_ptr,
        candidate_labels_ptr,
        ON_ROWS,
        PER_ANCHOR,
        OFFSET,
        OWN,
        LABELS,
    )
    if ON_ROWS:
        anchors = rows
        anchor_valid = row_valid
    else:
        anchors = cols
        anchor_valid = col_valid
    d_scores = tl.zeros(product.shape, tl.float32)
    if GRAD0:
        d_scores += logsumexp_slope(scores, negatives, weight0, lse0_ptr, grad0_ptr, anchors, anchor_valid, ON_ROWS)
    if GRAD1:
        d_scores += logsumexp_slope(scores, negatives, weight1, lse1_ptr, grad1_ptr, anchors, anchor_valid, ON_ROWS)
    if GRAD2:
        d_scores += logsumexp_slope(scores, negatives, weight2, lse2_ptr, grad2_ptr, anchors, anchor_valid, ON_ROWS)
    if MEAN:
        lse = along_anchors(tl.load(mean_lse_ptr + anchors, mask=anchor_valid, other=0.0), ON_ROWS)
        mean = along_anchors(tl.load(mean_ptr + anchors, mask=anchor_valid, other=0.0), ON_ROWS)
        grad = along_anchors(tl.load(mean_grad_ptr + anchors, mask=anchor_valid, other=0.0), ON_ROWS)
        weights = tl.exp(tl.where(negatives, scores - lse, float("-inf")))
        d_scores += weights * (1.0 + tl.where(negatives, scores, 0.0) - mean) * grad
    if SIGMOID_SUM:
        _, slope = negative_log_sigmoid_term(scores, tl.load(bias_ptr).to(tl.float32))
        grad = along_anchors(tl.load(sum_grad_ptr + anchors, mask=anchor_valid, other=0.0), ON_ROWS)
        term = tl.where(negatives, slope * grad, 0.0)
        d_scores += term
        if BIAS_OUT:
            bias_total += tl.sum(term, 1)
    d_scores = tl.where(negatives, d_scores, 0.0)
    if OFFSET_OUT:
        offset_total -= tl.sum(d_scores, 1)  # the positive score has no offset
    if POSITIVE_GRAD:
        grad = along_anchors(tl.load(positive_grad_ptr + anchors, mask=anchor_valid, other=0.0), ON_ROWS)
        d_scores += tl.where(positives, grad, 0.0)
    if SCALE_OUT:
        scale_total += tl.sum(d_scores * product, 1)
    if COLUMN_OUT:
        row_offset = along_anchors(tl.load(row_offset_ptr + anchors, mask=anchor_valid, other=0.0), ON_ROWS)
        column_max, column_total, _, _ = running_logsumexp(
            column_max, column_total, tl.where(negatives, scores - row_offset, float("-inf"))
        )
    return d_product + d_scores * scale, scale_total, bias_total, offset_total, column_max, column_total


@triton.jit
def store_slot_sums(
    rows,
    row_valid,
    scale_out_ptr,
    bias_out_ptr,
    offset_out_ptr,
    column_out_ptr,
    scale_total,
    bias_total,
    offset_total,
    column_max,
    column_total,
    SCALE_OUT: tl.constexpr,
    BIAS_OUT: tl.constexpr,
    OFFSET_OUT: tl.constexpr,
    COLUMN_OUT: tl.constexpr,
):
    """Write a slot's per-sample sums (the first program of a row block only: ``row_valid`` says so)."""
    if SCALE_OUT:
        tl.store(scale_out_ptr + rows, scale_total, mask=row_valid)
    if BIAS_OUT:
        tl.store(bias_out_ptr + rows, bias_total, mask=row_valid)
    if OFFSET_OUT:
        tl.store(offset_out_ptr + rows, offset_total, mask=row_valid)
    if COLUMN_OUT:
        tl.store(column_out_ptr + rows, finished_logsumexp(column_max, column_total, row_valid), mask=row_valid)


@triton.jit
def gradient_kernel(
    x_ptr,
    y_ptr,
    grad_ptr,
    n_rows,
    n_cols,
    dim,
    stride_x,
    stride_y,
    stride_grad,
    a_scale,
    a_offset,
    a_positive,
    a_own,
    a_anchor_labels,
    a_candidate_labels,
    a_bias,
    a_lse0,
    a_lse1,
    a_lse2,
    a_grad0,
    a_grad1,
    a_grad2,
    a_weight0,
    a_weight1,
    a_weight2,
    a_mean,
    a_mean_lse,
    a_mean_grad,
    a_sum_grad,
    a_row_offset,
    a_positive_grad,
    a_scale_out,
    a_bias_out,
    a_offset_out,
    a_column_out,
    b_scale,
    b_offset,
    b_positive,
    b_own,
    b_anchor_labels,
    b_candidate_labels,
    b_bias,
    b_lse0,
    b_lse1,
    b_lse2,
    b_grad0,
    b_grad1,
    b_grad2,
    b_weight0,
    b_weight1,
    b_weight2,
    b_mean,
    b_mean_lse,
    b_mean_grad,
    b_sum_grad,
    b_row_offset,
    b_positive_grad,
    b_scale_out,
    b_bias_out,
    b_offset_out,
    b_column_out,
    A_ON_ROWS: tl.constexpr,
    A_PER_ANCHOR: tl.constexpr,
    A_OFFSET: tl.constexpr,
    A_OWN: tl.constexpr,
    A_LABELS: tl.constexpr,
    A_GRAD0: tl.constexpr,
    A_GRAD1: tl.constexpr,
    A_GRAD2: tl.constexpr,
    A_MEAN: tl.constexpr,
    A_SIGMOID_SUM: tl.constexpr,
    A_SCALE_OUT: tl.constexpr,
    A_BIAS_OUT: tl.constexpr,
    A_OFFSET_OUT: tl.constexpr,
    A_COLUMN_OUT: tl.constexpr,
    A_POSITIVE_GRAD: tl.constexpr,
    A_TRANSPOSED: tl.constexpr,
    B_ON_ROWS: tl.constexpr,
    B_PER_ANCHOR: tl.constexpr,
    B_OFFSET: tl.constexpr,
    B_OWN: tl.constexpr,
    B_LABELS: tl.constexpr,
    B_GRAD0: tl.constexpr,
    B_GRAD1: tl.constexpr,
    B_GRAD2: tl.constexpr,
    B_MEAN: tl.constexpr,
    B_SIGMOID_SUM: tl.constexpr,
    B_SCALE_OUT: tl.constexpr,
    B_BIAS_OUT: tl.constexpr,
    B_OFFSET_OUT: tl.constexpr,
    B_COLUMN_OUT: tl.constexpr,
    B_POSITIVE_GRAD: tl.constexpr,
    B_TRANSPOSED: tl.constexpr,
    SLOTS: tl.constexpr,
    FEATURE_GRAD: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    DIM: tl.constexpr,
    BLOCK_D: tl.constexpr,
    IEEE: tl.constexpr,
    WIDEN: tl.constexpr,
):
    """``dX`` for one block of rows and ``BLOCK_D`` feature columns, and the per-sample sums of slots ``a`` and
    (with ``SLOTS == 2``) ``b``."""
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    row_valid = rows < n_rows
    depth = tl.program_id(1) * BLOCK_D + tl.arange(0, BLOCK_D)
    depth_valid = depth < dim
    gradient = tl.zeros((BLOCK_M, BLOCK_D), tl.float32)
    zeros = tl.zeros((BLOCK_M,), tl.float32)
    lowest = tl.full((BLOCK_M,), float("-inf"), tl.float32)
    a_scale_total, a_bias_total, a_offset_total, a_column_max, a_column_total = zeros, zeros, zeros, lowest, zeros
    b_scale_total, b_bias_total, b_offset_total, b_column_max, b_column_total = zeros, zeros, zeros, lowest, zeros
    for col_start in range(0, n_cols, BLOCK_N):
        cols = col_start + tl.arange(0, BLOCK_N)
        col_valid = cols < n_cols
        a_product = score_block(
            x_ptr,
            y_ptr,
            rows,
            cols,
            row_valid,
            col_valid,
            dim,
            stride_x,
            stride_y,
            BLOCK_M,
            BLOCK_N,
            BLOCK_K,
            DIM,
            IEEE,
            WIDEN,
            A_TRANSPOSED,
        )
        d_product = tl.zeros((BLOCK_M, BLOCK_N), tl.float32)
        d_product, a_scale_total, a_bias_total, a_offset_total, a_column_max, a_column_total = slot_block(
            a_product,
            rows,
            cols,
            row_valid,
            col_valid,
            d_product,
            a_scale,
            a_offset,
            a_positive,
            a_own,
            a_anchor_labels,
            a_candidate_labels,
            a_bias,
            a_lse0,
            a_lse1,
            a_lse2,
            a_grad0,
            a_grad1,
            a_grad2,
            a_weight0,
            a_weight1,
            a_weight2,
            a_mean,
            a_mean_lse,
            a_mean_grad,
            a_sum_grad,
            a_row_offset,
            a_positive_grad,
            a_scale_total,
            a_bias_total,
            a_offset_total,
            a_column_max,
            a_column_total,
            A_ON_ROWS,
            A_PER_ANCHOR,
            A_OFFSET,
            A_OWN,
            A_LABELS,
            A_GRAD0,
            A_GRAD1,
            A_GRAD2,
            A_MEAN,
            A_SIGMOID_SUM,
            A_SCALE_OUT,
            A_BIAS_OUT,
            A_OFFSET_OUT,
            A_COLUMN_OUT,
            A_POSITIVE_GRAD,
        )
        if SLOTS == 2:
            if B_TRANSPOSED == A_TRANSPOSED:
                b_product = a_product
            else:  # a two-view batch's view in both roles: G[I, J] for one, G[J, I]^T for the other
                b_product = score_block(
                    x_ptr,
                    y_ptr,
                    rows,
                    cols,
                    row_valid,
                    col_valid,
                    dim,
                    stride_x,
                    stride_y,
                    BLOCK_M,
                    BLOCK_N,
                    BLOCK_K,
                    DIM,
                    IEEE,
                    WIDEN,
                    B_TRANSPOSED,
                )
            d_product, b_scale_total, b_bias_total, b_offset_total, b_column_max, b_column_total = slot_block(
                b_product,
                rows,
                cols,
                row_valid,
                col_valid,
                d_product,
                b_scale,
                b_offset,
                b_positive,
                b_own,
                b_anchor_labels,
                b_candidate_labels,
                b_bias,
                b_lse0,
                b_lse1,
                b_lse2,
                b_grad0,
                b_grad1,
                b_grad2,
                b_weight0,
                b_weight1,
                b_weight2,
                b_mean,
                b_mean_lse,
                b_mean_grad,
                b_sum_grad,
                b_row_offset,
                b_positive_grad,
                b_scale_total,
                b_bias_total,
                b_offset_total,
                b_column_max,
                b_column_total,
                B_ON_ROWS,
                B_PER_ANCHOR,
                B_OFFSET,
                B_OWN,
                B_LABELS,
                B_GRAD0,
                B_GRAD1,
                B_GRAD2,
                B_MEAN,
                B_SIGMOID_SUM,
                B_SCALE_OUT,
                B_BIAS_OUT,
                B_OFFSET_OUT,
                B_COLUMN_OUT,
                B_POSITIVE_GRAD,
            )
        if FEATURE_GRAD:
            y = tl.load(
                y_ptr + cols[:, None].to(tl.int64) * stride_y + depth[None, :],
                mask=col_valid[:, None] & depth_valid[None, :],
                other=0.0,
            )
            d_product = d_product.to(y.dtype)  # the product in the features' type (the precision contract)
            if WIDEN:
                gradient = tl.dot(d_product.to(tl.float32), y.to(tl.float32), gradient, input_precision="ieee")
            elif IEEE:
                gradient = tl.dot(d_product, y, gradient, input_precision="ieee")
            else:
                gradient = tl.dot(d_product, y, gradient)
    if FEATURE_GRAD:
        tl.store(
            grad_ptr + rows[:, None].to(tl.int64) * stride_grad + depth[None, :],
            gradient.to(grad_ptr.dtype.element_ty),
            mask=row_valid[:, None] & depth_valid[None, :],
        )
    first = row_valid & ((rows * 0 + tl.program_id(1)) == 0)
    store_slot_sums(
        rows,
        first,
        a_scale_out,
        a_bias_out,
        a_offset_out,
        a_column_out,
        a_scale_total,
        a_bias_total,
        a_offset_total,
        a_column_max,
        a_column_total,
        A_SCALE_OUT,
        A_BIAS_OUT,
        A_OFFSET_OUT,
        A_COLUMN_OUT,
    )
    if SLOTS == 2:
        store_slot_sums(
            rows,
            first,
            b_scale_out,
            b_bias_out,
            b_offset_out,
            b_column_out,
            b_scale_total,
            b_bias_total,
            b_offset_total,
            b_column_max,
            b_column_total,
            B_SCALE_OUT,
            B_BIAS_OUT,
            B_OFFSET_OUT,
            B_COLUMN_OUT,
        )
