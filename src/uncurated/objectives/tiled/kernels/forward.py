r"""The forward kernel: one view's row statistics in one pass over its score blocks.

A program takes ``BLOCK_M`` anchors and streams every block of candidates,
keeping per anchor a running maximum and sum of exponentials for each weight
``w`` asked (up to three: HCL asks ``L(beta + 1)``, ``L(beta)`` and, with
its fallback clamp, ``L(1)``), the softmax-weighted score beside ``L(1)``
(the negatives' mean score, iSogCLR's temperature gradient) and a plain sum
of SigLIP's negative term, and picks out the positive score ``s_i = r_i
G_{i, p(i)}`` on the way. The scores never leave the chip; only
``L_i(w) = M_i + log Z_i``, the sum, the mean and ``s`` are written.
"""

from __future__ import annotations

import triton
import triton.language as tl

from .tile import finished_logsumexp, negative_log_sigmoid_term, running_logsumexp, score_block, view_scores


@triton.jit
def weighted_step(maximum, total, mean_total, scores, negatives, weight, MEAN: tl.constexpr):
    """One block of ``L(w)``: the running maximum and sum of ``e^{w S'}`` over the negatives, and with ``MEAN``
    the running sum of ``e^{S' - M} S'`` rescaled alike."""
    maximum, total, exps, decay = running_logsumexp(maximum, total, tl.where(negatives, scores * weight, float("-inf")))
    if MEAN:
        mean_total = mean_total * decay + tl.sum(exps * tl.where(negatives, scores, 0.0), 1)
    return maximum, total, mean_total


@triton.jit
def statistics_kernel(
    sides,
    view,
    VIEW: tl.constexpr,
    outputs,
    WEIGHTS: tl.constexpr,
    MEAN_INDEX: tl.constexpr,
    POSITIVE_SCORE: tl.constexpr,
    shape: tl.constexpr,
):
    """One view's row statistics (:class:`~.arguments.RowOutputs`) for ``BLOCK_M`` anchors, ``X`` holding them."""
    rows = tl.program_id(0) * shape.BLOCK_M + tl.arange(0, shape.BLOCK_M)
    row_valid = rows < sides.n_rows
    max0 = tl.full((shape.BLOCK_M,), float("-inf"), tl.float32)
    max1 = max0
    max2 = max0
    total0 = tl.full((shape.BLOCK_M,), 0.0, tl.float32)
    total1 = total0
    total2 = total0
    mean_total = total0
    sums = total0
    positive_scores = total0
    for col_start in range(0, sides.n_cols, shape.BLOCK_N):
        cols = col_start + tl.arange(0, shape.BLOCK_N)
        col_valid = cols < sides.n_cols
        product = score_block(sides, rows, cols, row_valid, col_valid, shape, VIEW.TRANSPOSED)
        scores, negatives, positives, scale = view_scores(product, rows, cols, row_valid, col_valid, view, VIEW)
        if WEIGHTS > 0:
            max0, total0, mean_total = weighted_step(
                max0, total0, mean_total, scores, negatives, outputs.weight0, MEAN_INDEX == 0
            )
        if WEIGHTS > 1:
            max1, total1, mean_total = weighted_step(
                max1, total1, mean_total, scores, negatives, outputs.weight1, MEAN_INDEX == 1
            )
        if WEIGHTS > 2:
            max2, total2, mean_total = weighted_step(
                max2, total2, mean_total, scores, negatives, outputs.weight2, MEAN_INDEX == 2
            )
        if VIEW.SIGMOID_SUM:
            values, _ = negative_log_sigmoid_term(scores, tl.load(view.bias).to(tl.float32))
            sums += tl.sum(tl.where(negatives, values, 0.0), 1)
        if POSITIVE_SCORE:
            positive_scores += tl.sum(tl.where(positives, product * scale, 0.0), 1)
    if WEIGHTS > 0:
        tl.store(outputs.lse0 + rows, finished_logsumexp(max0, total0, row_valid), mask=row_valid)
    if WEIGHTS > 1:
        tl.store(outputs.lse1 + rows, finished_logsumexp(max1, total1, row_valid), mask=row_valid)
    if WEIGHTS > 2:
        tl.store(outputs.lse2 + rows, finished_logsumexp(max2, total2, row_valid), mask=row_valid)
    if MEAN_INDEX >= 0:
        if MEAN_INDEX == 0:
            mean_norm = total0
        elif MEAN_INDEX == 1:
            mean_norm = total1
        else:
            mean_norm = total2
        tl.store(outputs.mean + rows, mean_total / tl.where(row_valid, mean_norm, 1.0), mask=row_valid)
    if VIEW.SIGMOID_SUM:
        tl.store(outputs.sum + rows, sums, mask=row_valid)
    if POSITIVE_SCORE:
        tl.store(outputs.positive_score + rows, positive_scores, mask=row_valid)
