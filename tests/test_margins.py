"""Chen et al. 2024's margin tools (App. A, Thm 4.2, Cors 5.1 and 6.1): batch margins, alpha, zero-shot margins, LSE."""

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from uncurated.theory.margins import (
    alpha,
    alpha_hat,
    alpha_sandwich,
    batch_margins,
    lse_certificate,
    lse_failure_bound,
    lse_margin_bound,
    pairwise_differences,
    plot_margin_histograms,
    top_r_error,
    zero_shot_margins,
)

#: S_ij = f(x_i, y_j): rows are images, columns texts. Pair 2's image prefers text 1 (a negative margin).
SCORES = torch.tensor([[1.0, 0.2, 0.5], [0.1, 0.9, 0.3], [0.4, 0.8, 0.7]], dtype=torch.float64)

#: Pairs 0 and 2 share a class.
LABELS = torch.tensor([0, 1, 0])


# ---------------------------------------------------------------- batch margins (App. A.2)


def test_pairwise_differences_by_hand_in_both_directions():
    image_to_text, text_to_image = pairwise_differences(SCORES)
    # Row i: S_ii - S_ij over j != i.
    torch.testing.assert_close(image_to_text, torch.tensor([[0.8, 0.5], [0.8, 0.6], [0.3, -0.1]], dtype=torch.float64))
    # Column i: S_ii - S_ji over j != i.
    torch.testing.assert_close(text_to_image, torch.tensor([[0.9, 0.6], [0.7, 0.1], [0.2, 0.4]], dtype=torch.float64))


def test_batch_margins_are_the_diagonal_minus_the_largest_off_diagonal_entry():
    image_to_text, text_to_image = batch_margins(SCORES)
    torch.testing.assert_close(image_to_text, torch.tensor([0.5, 0.6, -0.1], dtype=torch.float64))
    torch.testing.assert_close(text_to_image, torch.tensor([0.6, 0.1, 0.2], dtype=torch.float64))


def test_margins_of_a_transposed_matrix_swap_directions():
    scores = torch.randn(5, 5, dtype=torch.float64)
    rows, columns = batch_margins(scores)
    swapped_rows, swapped_columns = batch_margins(scores.T)
    torch.testing.assert_close(swapped_rows, columns)
    torch.testing.assert_close(swapped_columns, rows)


def test_a_stack_of_batches_is_scored_batch_by_batch():
    scores = torch.randn(4, 6, 6, dtype=torch.float64)
    stacked = batch_margins(scores)
    for index in range(4):
        single = batch_margins(scores[index])
        torch.testing.assert_close(stacked[0][index], single[0])
        torch.testing.assert_close(stacked[1][index], single[1])


def test_alpha_hat_and_alpha_by_hand():
    # Differences <= 0.3: rows {0.3, -0.1}, columns {0.1, 0.2}; 6 pairs per direction.
    assert alpha_hat(SCORES, 0.3) == pytest.approx(4 / 6)
    # Of those, 0.3 (row 2 vs 0) and 0.2 (column 2 vs 0) are the same-class pair: one per direction is left.
    assert alpha(SCORES, LABELS, 0.3) == pytest.approx(2 / 6)
    assert alpha_hat(SCORES, -1.0) == 0.0
    assert alpha_hat(SCORES, 1.0) == 2.0


def test_alpha_without_shared_classes_is_alpha_hat():
    scores = torch.randn(3, 8, 8, dtype=torch.float64)
    labels = torch.arange(8).repeat(3, 1)
    for gamma in (-0.5, 0.0, 0.7):
        assert alpha(scores, labels, gamma) == alpha_hat(scores, gamma)


def synthetic_batches(batches, size, probs, seed):
    """Scores <u_i, w_j> of pairs whose image and text are independent given the class (Assumption 3.1)."""
    generator = torch.Generator().manual_seed(seed)
    labels = torch.multinomial(probs, batches * size, True, generator=generator).view(batches, size)
    classes = torch.eye(len(probs), dtype=torch.float64)[labels]
    images = 2.0 * classes + 0.7 * torch.randn(classes.shape, generator=generator, dtype=torch.float64)
    texts = classes + 0.7 * torch.randn(classes.shape, generator=generator, dtype=torch.float64)
    return images @ texts.transpose(1, 2), labels


PROBS = torch.tensor([0.4, 0.3, 0.2, 0.1], dtype=torch.float64)
COLLISION = float((PROBS**2).sum())  # 0.3


@pytest.mark.parametrize("gamma", [0.0, 0.5, 2.0, 10.0])
def test_alpha_lies_between_alpha_hat_minus_twice_the_collision_and_alpha_hat(gamma):
    scores, labels = synthetic_batches(200, 16, PROBS, seed=1)
    sandwich = alpha_sandwich(scores, labels, gamma)
    assert sandwich.alpha <= sandwich.alpha_hat
    assert sandwich.alpha >= sandwich.lower_bound
    assert sandwich.same_class == pytest.approx(COLLISION, abs=0.01)


def test_theorem_a1_printed_bound_is_tight_at_gamma_zero():
    # Same-class differences are symmetric about 0, so each direction loses half the collision mass.
    scores, labels = synthetic_batches(400, 16, PROBS, seed=2)
    sandwich = alpha_sandwich(scores, labels, 0.0, class_probs=PROBS)
    assert sandwich.same_class == pytest.approx(COLLISION)
    assert sandwich.alpha == pytest.approx(sandwich.printed_bound, abs=0.01)
    assert 0.1 < sandwich.alpha < sandwich.alpha_hat


def test_theorem_a1_printed_lower_bound_fails_for_large_gamma():
    # Reported in the AlphaSandwich docstring: for gamma > 0 the same-class mass exceeds sum p^2 / 2 per direction.
    scores, labels = synthetic_batches(200, 16, PROBS, seed=3)
    sandwich = alpha_sandwich(scores, labels, 10.0, class_probs=PROBS)
    assert sandwich.alpha < sandwich.printed_bound - 0.2
    assert sandwich.alpha >= sandwich.lower_bound - 0.02


# ---------------------------------------------------------------- zero-shot margins and the LSE certificate


ZERO_SHOT = torch.tensor([[0.9, 0.5, 0.1], [0.5, 0.3, 0.8], [0.4, 0.4, 0.1], [0.1, 0.6, 0.3]], dtype=torch.float64)
ZERO_SHOT_LABELS = torch.tensor([0, 1, 0, 2])


def test_zero_shot_margins_and_errors_by_hand():
    margins = zero_shot_margins(ZERO_SHOT, ZERO_SHOT_LABELS)
    torch.testing.assert_close(margins, torch.tensor([0.4, -0.5, 0.0, -0.3], dtype=torch.float64))
    # Top 1: image 0 right; image 1 wrong; image 2 tied (counts as an error); image 3 wrong.
    assert top_r_error(ZERO_SHOT, ZERO_SHOT_LABELS) == pytest.approx(3 / 4)
    # Top 2: image 1's class is third, the others are in the top two.
    assert top_r_error(ZERO_SHOT, ZERO_SHOT_LABELS, r=2) == pytest.approx(1 / 4)


def test_lse_certificate_by_hand():
    scores = torch.tensor([[1.0, 0.0, 0.5]], dtype=torch.float64)
    expected = math.log(1 + math.exp(-1.0 / 0.5) + math.exp(-0.5 / 0.5))
    assert float(lse_certificate(scores, torch.tensor([0]), 0.5)) == pytest.approx(expected, rel=1e-12)
    bound = -0.5 * math.log(math.exp(-1.0 / 0.5) + math.exp(-0.5 / 0.5))
    assert float(lse_margin_bound(scores, torch.tensor([0]), 0.5)) == pytest.approx(bound, rel=1e-12)


@settings(max_examples=100, deadline=None)
@given(
    images=st.integers(1, 20),
    classes=st.integers(2, 12),
    tau=st.floats(1e-3, 2.0),
    spread=st.floats(0.01, 5.0),
    seed=st.integers(0, 2**16),
)
def test_lse_margin_bound_is_a_valid_lower_bound_of_the_margin(images, classes, tau, spread, seed):
    generator = torch.Generator().manual_seed(seed)
    scores = spread * torch.randn(images, classes, generator=generator, dtype=torch.float64)
    labels = torch.randint(classes, (images,), generator=generator)
    margins = zero_shot_margins(scores, labels)
    bound = lse_margin_bound(scores, labels, tau)
    assert bool((bound <= margins + 1e-12).all())
    assert bool((bound >= margins - tau * math.log(classes - 1) - 1e-12).all())
    certificate = lse_certificate(scores, labels, tau)
    assert bool((certificate >= 0).all())
    torch.testing.assert_close(certificate, torch.nn.functional.softplus(-bound / tau))
    # Cor. 5.1 (top-r error) and Cor. 6.1 (correct with margin tau).
    for r in range(1, classes):
        assert top_r_error(scores, labels, r) <= lse_failure_bound(certificate, tau, r=r) + 1e-12
    failed = float((margins <= tau).double().mean())
    assert failed <= lse_failure_bound(certificate, tau, margin=tau) + 1e-12


def test_lse_margin_bound_stays_finite_when_the_certificate_underflows():
    # Gaps of 1 at tau = 1e-3 make each term exp(-1000): the certificate is 0 in float64, the bound is not inf.
    scores = torch.tensor([[1.0, 0.0, 0.0]], dtype=torch.float64)
    bound = float(lse_margin_bound(scores, torch.tensor([0]), 1e-3))
    assert bound == pytest.approx(1.0 - 1e-3 * math.log(2), rel=1e-12)
    assert float(lse_certificate(scores, torch.tensor([0]), 1e-3)) == 0.0


def test_lse_failure_bound_matches_the_corollaries_constants():
    certificate = torch.full((10,), 0.2, dtype=torch.float64)
    assert lse_failure_bound(certificate, 0.1) == pytest.approx(0.2 / math.log(2))
    assert lse_failure_bound(certificate, 0.1, r=5) == pytest.approx(0.2 / math.log(6))
    assert lse_failure_bound(certificate, 0.1, margin=0.1) == pytest.approx(0.2 / math.log(1 + math.exp(-1)))


# ---------------------------------------------------------------- the histogram


def test_plot_margin_histograms_writes_a_png(tmp_path):
    rows, columns = pairwise_differences(torch.randn(4, 8, 8, dtype=torch.float64))
    path = plot_margin_histograms(
        {"image to text": rows, "text to image": columns.numpy()}, tmp_path / "m.png", gamma=0.1
    )
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


# ---------------------------------------------------------------- bad input


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: pairwise_differences(torch.zeros(3, 4)), r"scores must be square \(\.\.\., B, B\)"),
        (lambda: batch_margins(torch.zeros(1, 1)), "scores must be square .* B >= 2"),
        (lambda: batch_margins([[1.0, 0.0], [0.0, 1.0]]), "scores must be a floating-point torch.Tensor"),
        (lambda: alpha_hat(torch.tensor([[1.0, float("nan")], [0.0, 1.0]]), 0.0), "scores contains non-finite"),
        (lambda: alpha_hat(SCORES, float("nan")), "gamma must be in"),
        (lambda: alpha(SCORES, torch.tensor([0, 1]), 0.0), r"labels must have shape \(3,\)"),
        (lambda: alpha(SCORES, torch.tensor([0.0, 1.0, 0.0]), 0.0), "labels must be an integer tensor"),
        (lambda: alpha_sandwich(SCORES, LABELS, 0.0, class_probs=torch.tensor([0.5, 0.6])), "class_probs must be"),
        (lambda: zero_shot_margins(ZERO_SHOT[:, :1], ZERO_SHOT_LABELS), r"scores must be an \(n, K\) matrix"),
        (lambda: zero_shot_margins(ZERO_SHOT, torch.tensor([0, 1, 3, 2])), r"labels must lie in \[0, 3\)"),
        (lambda: top_r_error(ZERO_SHOT, ZERO_SHOT_LABELS, r=0), "r must be an integer >= 1, got 0"),
        (lambda: lse_certificate(ZERO_SHOT, ZERO_SHOT_LABELS, 0.0), r"tau must be in \(0, inf\], got 0"),
        (lambda: lse_margin_bound(ZERO_SHOT, ZERO_SHOT_LABELS, -1.0), r"tau must be in \(0, inf\]"),
        (lambda: lse_failure_bound(torch.tensor([]), 0.1), "certificate must be a non-empty finite vector"),
        (lambda: lse_failure_bound(torch.ones(3), 0.1, r=0), "r must be an integer >= 1"),
        (lambda: plot_margin_histograms({}, "unused.png"), "margins must map at least one label"),
        (lambda: plot_margin_histograms({"a": []}, "unused.png"), r"margins\['a'\] must be a non-empty array"),
        (lambda: plot_margin_histograms({"a": [0.1]}, "unused.png", bins=0), "bins must be an integer >= 1"),
    ],
)
def test_bad_arguments_raise_value_errors_naming_them(call, message):
    with pytest.raises(ValueError, match=message):
        call()
