r"""What every kernel does on one block: the inner products, one view's scores and negatives, the running sums.

A launch reads features ``X`` along a block's rows and ``Y`` along its
columns; its block ``X[I] Y[J]^T`` is, for each view, a block of the batch's
``G = A B^T``: ``G[I, J]`` where ``X`` holds ``G``'s rows, ``G[J, I]^T``
where ``Y`` does (the candidates' side of a cross pairing; the view's role
along the columns in a two-view batch, where ``A`` is ``B``). It is always
formed in ``G``'s orientation, ``A``-rows times ``B``-columns, and in the
second case transposed in registers (``TRANSPOSED``, :func:`score_block`),
so that every launch, forward and backward, computes a score as the same
float. A *view* (one direction's score matrix) sees the block either with
its anchors along the rows (``ON_ROWS``: ``X`` holds its anchors, ``Y`` its
candidates) or along the columns (the transposed direction of a cross
pairing, or the other role of a two-view batch). Its scores are
``S'_{ij} = r_i G_{ij} - o_j`` for the anchor ``i`` and candidate ``j`` of
an entry, with ``r`` one inverse temperature or one per anchor and ``o`` the
columns' offsets, and its negatives are the entries that are neither the
anchor's positive nor its own view nor, under the supervised oracle, of its
label.

Every switch is a ``tl.constexpr``: a view without offsets or labels
compiles to code without them.
"""

from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def block_product(
    x_ptr,
    y_ptr,
    rows,
    cols,
    row_valid,
    col_valid,
    dim,
    stride_x,
    stride_y,
    shape: tl.constexpr,
    TRANSPOSED: tl.constexpr,
):
    """``X[rows] Y[cols]^T`` in float32, stepping ``BLOCK_K`` feature columns at a time (padding reads zeros); a
    ``shape.BLOCK_N x shape.BLOCK_M`` block with ``TRANSPOSED``, ``shape.BLOCK_M x shape.BLOCK_N`` otherwise.

    bfloat16 and float16 operands are multiplied in their own type with float32 accumulation (tensor cores);
    float32 ones as ``INPUT_PRECISION`` says (TF32 tensor cores or IEEE). ``WIDEN``: the operands are widened to
    float32 first, which leaves a product of two bfloat16 numbers exact; set under Triton's interpreter, whose
    ``tl.dot`` multiplies bfloat16 blocks as integers (triton 3.9)."""
    if TRANSPOSED:
        product = tl.full((shape.BLOCK_N, shape.BLOCK_M), 0.0, tl.float32)
    else:
        product = tl.full((shape.BLOCK_M, shape.BLOCK_N), 0.0, tl.float32)
    for start in range(0, shape.DIM, shape.BLOCK_K):
        depth = start + tl.arange(0, shape.BLOCK_K)
        inside = depth < dim
        x = tl.load(
            x_ptr + rows[:, None].to(tl.int64) * stride_x + depth[None, :],
            mask=row_valid[:, None] & inside[None, :],
            other=0.0,
        )
        y = tl.load(
            y_ptr + cols[:, None].to(tl.int64) * stride_y + depth[None, :],
            mask=col_valid[:, None] & inside[None, :],
            other=0.0,
        )
        if shape.WIDEN:
            product = tl.dot(x.to(tl.float32), tl.trans(y.to(tl.float32)), product, input_precision="ieee")
        elif x.dtype == tl.float32:
            product = tl.dot(x, tl.trans(y), product, input_precision=shape.INPUT_PRECISION)
        else:
            product = tl.dot(x, tl.trans(y), product)
    return product


@triton.jit
def score_block(sides, rows, cols, row_valid, col_valid, shape: tl.constexpr, TRANSPOSED: tl.constexpr):
    """``X[rows] Y[cols]^T`` formed in ``G``'s orientation: as it reads, where ``X`` holds ``G``'s rows, and with
    ``TRANSPOSED`` (``Y`` holds them) as ``(Y[cols] X[rows]^T)^T``, transposed in registers.

    Every launch thus forms an entry ``G_ij`` by the same product of the same blocks (``BLOCK_M == BLOCK_N``),
    so the backward pass's scores are bitwise those the forward pass's statistics were computed from and
    ``e^{S'_ij - L_i}`` is the forward pass's softmax. A product in the other orientation rounds differently,
    by about ``|S| 2^{-24}``, which the exponential turns into a relative error of the gradient as large."""
    x, y, dim, stride_x, stride_y = sides.x, sides.y, sides.dim, sides.stride_x, sides.stride_y
    if TRANSPOSED:
        product = tl.trans(block_product(y, x, cols, rows, col_valid, row_valid, dim, stride_y, stride_x, shape, True))
    else:
        product = block_product(x, y, rows, cols, row_valid, col_valid, dim, stride_x, stride_y, shape, False)
    return product


@triton.jit
def along_anchors(values, ON_ROWS: tl.constexpr):
    """A per-anchor vector shaped to broadcast over the block."""
    if ON_ROWS:
        shaped = values[:, None]
    else:
        shaped = values[None, :]
    return shaped


@triton.jit
def along_candidates(values, ON_ROWS: tl.constexpr):
    """A per-candidate vector shaped to broadcast over the block."""
    if ON_ROWS:
        shaped = values[None, :]
    else:
        shaped = values[:, None]
    return shaped


@triton.jit
def anchor_scale(scale_ptr, anchors, anchor_valid, ON_ROWS: tl.constexpr, PER_ANCHOR: tl.constexpr):
    """The view's inverse temperature on the block: one, or one per anchor."""
    if PER_ANCHOR:
        scale = along_anchors(tl.load(scale_ptr + anchors, mask=anchor_valid, other=0.0).to(tl.float32), ON_ROWS)
    else:
        scale = tl.load(scale_ptr).to(tl.float32)
    return scale


@triton.jit
def view_scores(product, rows, cols, row_valid, col_valid, view, VIEW: tl.constexpr):
    """``(S', negatives, positives, r)``: the view's scores on the block, which entries are its negatives and
    which its anchors' positives, its scale."""
    ON_ROWS: tl.constexpr = VIEW.ON_ROWS
    if ON_ROWS:
        anchors = rows
        candidates = cols
        anchor_valid = row_valid
        candidate_valid = col_valid
    else:
        anchors = cols
        candidates = rows
        anchor_valid = col_valid
        candidate_valid = row_valid
    scale = anchor_scale(view.scale, anchors, anchor_valid, ON_ROWS, VIEW.PER_ANCHOR)
    scores = product * scale
    if VIEW.OFFSET:
        offsets = tl.load(view.offset + candidates, mask=candidate_valid, other=0.0).to(tl.float32)
        scores = scores - along_candidates(offsets, ON_ROWS)
    candidate_index = along_candidates(candidates, ON_ROWS)
    positive = tl.load(view.positive + anchors, mask=anchor_valid, other=-1)
    valid = along_anchors(anchor_valid, ON_ROWS) & along_candidates(candidate_valid, ON_ROWS)
    positives = valid & (candidate_index == along_anchors(positive, ON_ROWS))
    negatives = valid & (candidate_index != along_anchors(positive, ON_ROWS))
    if VIEW.OWN:
        own = tl.load(view.own + anchors, mask=anchor_valid, other=-1)
        negatives = negatives & (candidate_index != along_anchors(own, ON_ROWS))
    if VIEW.LABELS:
        anchor_labels = tl.load(view.anchor_labels + anchors, mask=anchor_valid, other=0)
        candidate_labels = tl.load(view.candidate_labels + candidates, mask=candidate_valid, other=0)
        negatives = negatives & (along_candidates(candidate_labels, ON_ROWS) != along_anchors(anchor_labels, ON_ROWS))
    return scores, negatives, positives, scale


@triton.jit
def running_logsumexp(maximum, total, values):
    """Add a block of ``values`` (``-inf`` where left out) to each row's running maximum and sum of exponentials;
    also returns the shifted exponentials and the factor the old sum was rescaled by."""
    new = tl.maximum(maximum, tl.max(values, 1))
    shift = tl.where(new == float("-inf"), 0.0, new)
    decay = tl.exp(maximum - shift)
    exps = tl.exp(values - shift[:, None])
    return new, total * decay + tl.sum(exps, 1), exps, decay


@triton.jit
def finished_logsumexp(maximum, total, valid):
    """``M + log Z`` of a running log-sum-exp; rows outside the matrix (never stored) take ``log 1``."""
    return maximum + tl.log(tl.where(valid, total, 1.0))


@triton.jit
def log1p(u):
    """``log(1 + u)`` to float32 rounding for small ``u`` (``log(w) u / (w - 1)`` with ``w = 1 + u``)."""
    w = 1.0 + u
    return tl.where(w == 1.0, u, tl.log(w) * (u / tl.where(w == 1.0, 1.0, w - 1.0)))


@triton.jit
def negative_log_sigmoid_term(scores, bias):
    """SigLIP's negative pair term ``log sigmoid(-(S' + b))`` and its derivative ``-sigmoid(S' + b)``."""
    x = -(scores + bias)
    small = tl.exp(-tl.abs(x))
    value = tl.minimum(x, 0.0) - log1p(small)
    sigmoid_minus_x = tl.where(x >= 0.0, small / (1.0 + small), 1.0 / (1.0 + small))
    return value, -sigmoid_minus_x
