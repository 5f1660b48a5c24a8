"""The score-matrix engine: layouts of the two pairings and the row statistics."""

import math

import torch
from reference import random_batch

from uncurated.objectives.engine import ScoreMatrix, cross_pairing, two_view_pairing


def test_two_view_layout_masks_self_and_own_positive():
    a, b = random_batch(batch=3, dim=2)
    (scores,) = two_view_pairing(a, b, scale=2.0)
    assert scores._logits.shape == (6, 6)
    assert scores.positive_column.tolist() == [3, 4, 5, 0, 1, 2]
    assert scores.negative_slots == 4
    expected = torch.ones(6, 6, dtype=torch.bool)
    for i in range(6):
        expected[i, i] = False
        expected[i, (i + 3) % 6] = False
    assert torch.equal(scores._negative_mask, expected)


def test_cross_layout_has_one_matrix_per_direction_sharing_the_scores():
    a, b = random_batch(batch=4, dim=3)
    forward, backward = cross_pairing(a, b, scale=1.5)
    torch.testing.assert_close(forward._logits, 1.5 * a @ b.T)
    torch.testing.assert_close(backward._logits, forward._logits.T)
    assert forward.negative_slots == backward.negative_slots == 3
    torch.testing.assert_close(forward.positive_logit(), backward.positive_logit())


def test_the_reverse_direction_reuses_the_forward_scores_transposed():
    """One product for both directions of a cross pairing: the reverse's scores are a view of the forward's."""
    a, b = random_batch(batch=4, dim=3)
    forward, backward = cross_pairing(a, b, scale=1.5)
    assert backward._logits.data_ptr() == forward._logits.data_ptr()
    assert backward._similarities.data_ptr() == forward._similarities.data_ptr()


def test_row_statistics_against_explicit_loops():
    a, b = random_batch(batch=5, dim=3)
    (scores,) = two_view_pairing(a, b, scale=0.7)
    logits = scores._logits
    for weight in (0.0, 1.0, 2.5):
        got = scores.negative_logsumexp(weight)
        for i in range(10):
            negatives = [logits[i, j] for j in range(10) if j not in (i, (i + 5) % 10)]
            expected = math.log(sum(math.exp(weight * float(s)) for s in negatives))
            assert math.isclose(float(got[i]), expected, rel_tol=1e-12)
    squares = scores.negative_sum(torch.square)
    for i in range(10):
        expected = sum(float(logits[i, j]) ** 2 for j in range(10) if j not in (i, (i + 5) % 10))
        assert math.isclose(float(squares[i]), expected, rel_tol=1e-12)


def test_oracle_rescales_negative_statistics_to_n_slots():
    a, b = random_batch(batch=4, dim=3)
    labels = torch.tensor([0, 0, 1, 2])
    forward, _ = cross_pairing(a, b, scale=1.0, labels=labels)
    kept = forward._negative_mask.sum(dim=1)
    assert kept.tolist() == [2, 2, 3, 3]
    plain, _ = cross_pairing(a, b, scale=1.0)
    masked = plain._logits.masked_fill(~forward._negative_mask, -math.inf)
    expected = torch.logsumexp(masked, dim=1) + math.log(3) - torch.log(kept.double())
    torch.testing.assert_close(forward.negative_logsumexp(), expected)
    torch.testing.assert_close(forward.negative_sum(torch.ones_like), torch.full((4,), 3.0, dtype=a.dtype))


def test_positive_logsumexp_covers_extra_views():
    anchors, candidates = random_batch(batch=3, dim=2)
    extra = torch.randn(3, 2, 2, dtype=anchors.dtype)
    scores = ScoreMatrix(anchors, candidates, 2.0, torch.arange(3), extra_positives=extra)
    assert scores.positive_views == 3
    for i in range(3):
        views = torch.cat([candidates[i : i + 1], extra[i]])
        expected = torch.logsumexp(2.0 * views @ anchors[i], dim=0)
        torch.testing.assert_close(scores.positive_logsumexp()[i], expected)
