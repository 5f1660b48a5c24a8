"""Nozawa & Sato 2021's bounds measured on features: the grouping protocol, the identities, the inequalities."""

from __future__ import annotations

import math

import pytest
import torch

from uncurated.evaluate import class_means
from uncurated.theory.negatives_bound import (
    bound_terms,
    collision_bound,
    subclass_loss,
    supervised_loss_upper_bounds,
)


def _normalized(x):
    return torch.nn.functional.normalize(x, dim=-1)


def _noisy_views(labels, classes=10, dim=16, views=4, noise=0.5, seed=0):
    generator = torch.Generator().manual_seed(seed)
    centers = torch.randn(classes, dim, generator=generator, dtype=torch.float64)
    samples = centers[labels] + 0.5 * torch.randn(len(labels), dim, generator=generator, dtype=torch.float64)
    augmented = samples[:, None] + noise * torch.randn(
        len(labels), views, dim, generator=generator, dtype=torch.float64
    )
    return _normalized(augmented)


def _balanced(per_class, classes):
    return torch.arange(classes).repeat_interleave(per_class)


def test_label_terms_match_the_digest_grid_for_cifar10_k_plus_1_32():
    # Digest 004, 6.2(b): C = 10, 1000 per class, K + 1 = 32 without replacement: v 0.6925, tau 0.9619,
    # E[ln(Col + 1)] 1.316 (the paper prints 0.69 / 0.96 / 1.32). These are label-only quantities.
    labels = _balanced(1000, 10)
    views = _normalized(torch.randn(len(labels), 2, 4, generator=torch.Generator().manual_seed(1)))
    means = class_means(views, labels, 10)
    terms = bound_terms(views, labels, means, 31, epochs=10, seed=3)
    assert terms.anchors == 10 * (10000 // 32) * 32
    assert terms.v == pytest.approx(0.6925, abs=0.03)
    assert terms.tau == pytest.approx(0.9619, abs=0.01)
    assert terms.collision_curl == pytest.approx(1.316, abs=0.01)


def test_table_identities_hold_exactly():
    labels = _balanced(60, 5)
    views = _noisy_views(labels, classes=5)
    terms = bound_terms(views, labels, class_means(views, labels, 5), 7, epochs=3)
    assert terms.bound == pytest.approx(terms.sup + terms.sub + terms.collision_curl / 2 + terms.gap, abs=1e-12)
    assert terms.bound_curl == pytest.approx(
        terms.collision_curl + terms.sup_curl + terms.sub_curl + terms.gap, abs=1e-12
    )
    assert terms.gap <= 0.0


def test_bounds_hold_per_sample_when_features_are_their_class_means():
    # With every view of a sample equal to its class's unit vector, mu(x) = mu_c, d(f) = 0 and the InfoNCE of
    # each anchor is exactly the class-mean InfoNCE of Eq. 7, so Eq. 8 and Eq. 10 hold without sampling error.
    labels = _balanced(30, 6)
    centers = _normalized(torch.randn(6, 8, generator=torch.Generator().manual_seed(2), dtype=torch.float64))
    views = centers[labels][:, None].expand(-1, 3, -1).contiguous()
    means = class_means(views, labels, 6)
    for negatives in (1, 3, 8, 40):
        terms = bound_terms(views, labels, means, negatives, temperature=0.3, epochs=2)
        assert terms.gap == pytest.approx(0.0, abs=1e-12)
        assert terms.info_nce >= terms.bound - 1e-12
        assert terms.info_nce >= terms.bound_curl - 1e-12


def test_noisy_features_reproduce_the_trends_with_k():
    labels = _balanced(200, 10)
    views = _noisy_views(labels)
    means = class_means(views, labels, 10)
    rows = [bound_terms(views, labels, means, k, epochs=2) for k in (4, 16, 64, 256)]
    assert [r.v for r in rows] == sorted(r.v for r in rows)
    assert rows[0].v < 0.1 and rows[-1].v == 1.0
    assert all(r.info_nce >= r.bound for r in rows)
    # The CURL upper bound on the supervised loss explodes with K; the proposed one stays near the true loss.
    assert rows[-1].upper_curl > 100 * rows[-1].upper
    assert rows[-1].upper < 10 * rows[-1].supervised_loss + 10


def test_subclass_loss_of_copies_of_one_class_is_log_of_their_count():
    # Digest 6.2(f): l_sub(z, c, {c}^{Col+1}) = ln(Col + 1); with one class in the subset the loss is 0, and the
    # InfoNCE of an anchor whose Col + 1 candidates all equal its class mean is ln(Col + 1).
    z = _normalized(torch.randn(5, 4, dtype=torch.float64))
    means = _normalized(torch.randn(3, 4, dtype=torch.float64))
    labels = torch.tensor([0, 1, 2, 0, 1])
    only_own = torch.nn.functional.one_hot(labels, 3).bool()
    assert torch.equal(subclass_loss(z, labels, means, only_own, 0.5), torch.zeros(5, dtype=torch.float64))
    copies = means[labels[:1]].expand(4, -1)
    logits = z[:1] @ copies.T / 0.5
    assert float(torch.logsumexp(logits, -1) - logits[0, 0]) == pytest.approx(math.log(4))


def test_subclass_loss_matches_cross_entropy_over_the_subset():
    z = torch.randn(6, 5, dtype=torch.float64)
    means = torch.randn(4, 5, dtype=torch.float64)
    labels = torch.tensor([0, 1, 2, 3, 0, 2])
    subset = torch.tensor([True, False, True, True]).expand(6, -1).clone()
    subset[1, 1] = True
    expected = []
    for row in range(6):
        kept = subset[row].nonzero().flatten()
        logits = z[row] @ means[kept].T / 0.2
        expected.append(torch.nn.functional.cross_entropy(logits[None], (kept == labels[row]).nonzero()[0]))
    subset[[0, 2, 3, 4, 5], 1] = False
    torch.testing.assert_close(subclass_loss(z, labels, means, subset, 0.2), torch.stack(expected))


def test_upper_bounds_reproduce_table_6():
    # Digest 004, 6.2(e): AGNews K + 1 = 16 and 32 columns, tau_K = 1 - (3/4)^K unrounded (the table prints 0.99
    # and 1.00); the digest derives 4.69 and 9.26 for the CURL bound, printed 4.72 and 9.28.
    columns = [
        dict(info_nce=1.23, gap=-1.72, collision_curl=1.49, sub=0.02, v=0.96, sub_curl=0.00, tau=1 - 0.75**15),
        dict(info_nce=1.77, gap=-1.77, collision_curl=2.13, sub=0.00, v=1.00, sub_curl=0.00, tau=1 - 0.75**31),
    ]
    bounds = [supervised_loss_upper_bounds(**column) for column in columns]
    assert [math.log(proposed) for proposed, _ in bounds] == pytest.approx([1.52, 1.60], abs=0.006)
    assert [math.log(curl) for _, curl in bounds] == pytest.approx([4.69, 9.26], abs=0.01)
    assert supervised_loss_upper_bounds(**{**columns[0], "tau": 1.0})[1] == math.inf


def test_collision_bound_matches_its_definition():
    labels = torch.tensor([0, 0, 1, 1, 1, 0])
    first = _normalized(torch.randn(6, 3, dtype=torch.float64))
    second = _normalized(torch.randn(6, 3, dtype=torch.float64))
    expected = 0.0
    for i in range(6):
        same = [j for j in range(6) if j != i and labels[j] == labels[i]]
        total = sum(abs(float(first[i] @ (first[j] - second[i]))) for j in same)
        expected += total / int((labels == labels[i]).sum())
    assert collision_bound(first, second, labels, chunk=2) == pytest.approx(expected / 6, abs=1e-12)


def test_class_means_average_samples_and_views():
    views = torch.arange(24, dtype=torch.float64).view(4, 3, 2)
    labels = torch.tensor([1, 0, 1, 0])
    means = class_means(views, labels, 2, normalize=False)
    torch.testing.assert_close(means[1], views[[0, 2]].mean(dim=(0, 1)))


@pytest.mark.parametrize(
    "change, message",
    [
        (dict(negatives=0), "negatives must be an integer >= 1"),
        (dict(negatives=40), "negatives must be at most 39"),
        (dict(temperature=0.0), "temperature must be in"),
        (dict(epochs=0), "epochs must be an integer >= 1"),
        (dict(labels=torch.zeros(40, dtype=torch.long)), "classes \\[1, 2, 3\\] never occur"),
        (dict(labels=torch.full((40,), 7)), "labels must lie in 0 .. 3"),
        (dict(labels=torch.zeros(39, dtype=torch.long)), "labels must have shape \\(40,\\)"),
        (dict(views=torch.zeros(40, 1, 8)), "views must be a tensor of shape \\(N, A >= 2, d\\)"),
        (dict(views=torch.full((40, 2, 8), math.nan)), "views must be finite"),
        (dict(means=torch.zeros(4, 3)), "means must have shape"),
    ],
)
def test_bad_input_is_named(change, message):
    labels = _balanced(10, 4)
    views = _noisy_views(labels, classes=4, dim=8, views=2).float()
    arguments = dict(views=views, labels=labels, means=class_means(views, labels, 4), negatives=3)
    arguments.update(change)
    with pytest.raises(ValueError, match=message):
        bound_terms(**arguments)


def test_class_means_need_every_class():
    with pytest.raises(ValueError, match="classes \\[2\\] have no samples"):
        class_means(torch.zeros(4, 1, 3), torch.tensor([0, 1, 0, 1]), 3)
