"""Weighted point set similarity (Uesaka et al. 2025): invariants of Eq. 6, the identity of Eq. 8, random features."""

import math

import pytest
import torch
import torch.nn.functional as F
from reference import batch_objective_names

from uncurated import objectives
from uncurated.evaluate import point_set_zero_shot
from uncurated.models import PointSetHead
from uncurated.similarity import (
    CombinedKernel,
    FeatureDraw,
    GaussianKernel,
    IMQKernel,
    LinearKernel,
    WeightedPointSet,
    WPSEmbedding,
    exact_similarity,
    point_set_embedding,
    random_fourier_features,
)

KERNELS = [CombinedKernel(0.5, 0.5, GaussianKernel(0.75)), CombinedKernel(1.0, 2.0, IMQKernel(0.5))]


def point_sets(batch=5, size=7, dim=8, seed=0):
    generator = torch.Generator().manual_seed(seed)
    weights = torch.randn(batch, size, generator=generator, dtype=torch.float64)
    points = F.normalize(torch.randn(batch, size, dim, generator=generator, dtype=torch.float64), dim=-1)
    return WeightedPointSet(weights, points)


def test_one_point_sets_with_the_linear_kernel_are_cosine_similarity():
    a, b = torch.randn(6, 4, dtype=torch.float64), torch.randn(5, 4, dtype=torch.float64)
    a, b = F.normalize(a, dim=-1), F.normalize(b, dim=-1)
    got = exact_similarity(WeightedPointSet.single(a), WeightedPointSet.single(b), CombinedKernel(1.0, 0.0))
    torch.testing.assert_close(got, a @ b.T)


@pytest.mark.parametrize("kernel", KERNELS, ids=repr)
def test_symmetry_permutation_and_padding_invariance(kernel):
    x, y = point_sets(seed=1), point_sets(batch=4, size=3, seed=2)
    similarity = exact_similarity(x, y, kernel)
    torch.testing.assert_close(exact_similarity(y, x, kernel), similarity.T)
    order = torch.randperm(x.size)
    permuted = WeightedPointSet(x.weights[:, order], x.points[:, order])
    torch.testing.assert_close(exact_similarity(permuted, y, kernel), similarity)
    extra_points = F.normalize(torch.randn(x.batch_size, 3, x.dim, dtype=torch.float64), dim=-1)
    padded = WeightedPointSet(
        torch.cat([x.weights, torch.zeros(x.batch_size, 3, dtype=torch.float64)], dim=1),
        torch.cat([x.points, extra_points], dim=1),
    )
    torch.testing.assert_close(exact_similarity(padded, y, kernel), similarity)
    masked = WeightedPointSet(
        torch.cat([x.weights, torch.randn(x.batch_size, 3, dtype=torch.float64)], dim=1),
        padded.points,
        mask=torch.cat([torch.ones(x.batch_size, x.size), torch.zeros(x.batch_size, 3)], dim=1).bool(),
    )
    torch.testing.assert_close(exact_similarity(masked, y, kernel), similarity)


@pytest.mark.parametrize("kernel", KERNELS, ids=repr)
def test_embedding_identity_of_eq_8_holds_exactly_for_a_fixed_draw(kernel):
    x, y = point_sets(seed=3), point_sets(batch=4, size=5, seed=4)
    draw = FeatureDraw.sample(kernel.nonlinear, 64, x.dim, torch.Generator().manual_seed(0), torch.float64)

    def feature_kernel(u, v):
        zu = random_fourier_features(u, draw.frequencies, draw.phases)
        zv = random_fourier_features(v, draw.frequencies, draw.phases)
        return kernel.alpha1 * (u @ v.transpose(-1, -2)) + kernel.alpha2 * (zu @ zv.transpose(-1, -2))

    expected = exact_similarity(x, y, feature_kernel)
    paper = {"pooling": "sum", "point_eps": None}  # Eq. 8 as the paper writes it, pinned (the default is the code's)
    got = point_set_embedding(x, kernel, draw, **paper) @ point_set_embedding(y, kernel, draw, **paper).T
    torch.testing.assert_close(got, expected, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("nonlinear", [GaussianKernel(0.75), IMQKernel(0.5)], ids=repr)
def test_random_features_are_unbiased_with_error_shrinking_like_one_over_sqrt_d_draws(nonlinear):
    x, y = point_sets(batch=4, size=3, dim=6, seed=5), point_sets(batch=4, size=3, dim=6, seed=6)
    kernel = CombinedKernel(0.0, 1.0, nonlinear)
    exact = exact_similarity(x, y, kernel)

    def rms_error(count, draws, seed):
        generator = torch.Generator().manual_seed(seed)
        estimate = torch.zeros_like(exact)
        for _ in range(draws):
            draw = FeatureDraw.sample(nonlinear, count, x.dim, generator, torch.float64)
            paper = {"pooling": "sum", "point_eps": None}  # Eq. 8 as the paper writes it, pinned
            estimate += point_set_embedding(x, kernel, draw, **paper) @ point_set_embedding(y, kernel, draw, **paper).T
        return float((estimate / draws - exact).square().mean().sqrt())

    coarse = rms_error(32, 10, seed=7)
    fine = rms_error(32 * 16, 10 * 4, seed=8)  # 64 times the features: error about 8 times smaller
    assert fine < coarse / 3
    assert fine < 0.02 * float(exact.abs().max())


def test_imq_frequencies_reproduce_the_kernel():
    kernel = IMQKernel(0.5)
    frequencies = kernel.sample_frequencies(400_000, 3, torch.Generator().manual_seed(0), torch.float64)
    offsets = torch.tensor([[0.0, 0.0, 0.0], [0.3, 0.0, 0.0], [0.5, -0.5, 0.2], [1.0, 1.0, 1.0]], dtype=torch.float64)
    monte_carlo = torch.cos(offsets @ frequencies.T).mean(dim=1)
    exact = kernel(offsets, torch.zeros(1, 3, dtype=torch.float64)).squeeze(1)
    torch.testing.assert_close(monte_carlo, exact, rtol=0, atol=5e-3)


def test_linear_kernel_collapses_to_a_weighted_mean_of_rank_at_most_d():
    x = point_sets(batch=9, size=5, dim=4, seed=9)
    similarity = exact_similarity(x, x, CombinedKernel(1.0, 0.0))
    pooled = torch.einsum("bm,bmd->bd", x.weights, x.points)
    torch.testing.assert_close(similarity, pooled @ pooled.T)
    assert int(torch.linalg.matrix_rank(similarity)) <= 4
    full = exact_similarity(x, x, CombinedKernel(1.0, 1.0, GaussianKernel(0.5)))
    assert int(torch.linalg.matrix_rank(full)) > 4


def test_mean_pooling_is_sum_pooling_with_weights_over_m():
    x = point_sets(seed=10)
    kernel = KERNELS[0]
    draw = FeatureDraw.sample(kernel.nonlinear, 16, x.dim, torch.Generator().manual_seed(1), torch.float64)
    scaled = WeightedPointSet(x.weights / x.size, x.points)
    torch.testing.assert_close(
        point_set_embedding(x, kernel, draw, pooling="mean"), point_set_embedding(scaled, kernel, draw, pooling="sum")
    )


def test_mean_pooling_is_over_each_sets_own_points_whatever_its_batch_padding():
    x = point_sets(batch=3, size=4, dim=5, seed=13)
    mask = torch.tensor([[True, True, True, True], [True, True, False, False], [True, False, False, False]])
    masked = WeightedPointSet(x.weights, x.points, mask)
    padded = WeightedPointSet(
        torch.cat([x.weights, torch.randn(3, 3, dtype=x.weights.dtype)], dim=1),
        torch.cat([x.points, torch.randn(3, 3, 5, dtype=x.points.dtype)], dim=1),
        torch.cat([mask, torch.zeros(3, 3, dtype=torch.bool)], dim=1),
    )
    kernel = KERNELS[0]
    draw = FeatureDraw.sample(kernel.nonlinear, 16, x.dim, torch.Generator().manual_seed(1), torch.float64)
    torch.testing.assert_close(point_set_embedding(padded, kernel, draw), point_set_embedding(masked, kernel, draw))
    for row, count in enumerate((4, 2, 1)):
        alone = WeightedPointSet(x.weights[row : row + 1, :count], x.points[row : row + 1, :count])
        torch.testing.assert_close(
            point_set_embedding(alone, kernel, draw), point_set_embedding(masked, kernel, draw)[row : row + 1]
        )


def test_embedding_module_redraws_in_training_and_keeps_a_stored_draw_for_evaluation():
    x, y = point_sets(batch=3, size=4, dim=5, seed=11), point_sets(batch=3, size=2, dim=5, seed=12)
    module = WPSEmbedding(train_features=32, eval_features=16, seed=3)
    first_x, first_y = module(x, y)
    assert first_x.shape == first_y.shape == (3, 5 + 32) == (3, module.embedding_dim(5))
    second_x, _ = module(x, y)
    assert not torch.allclose(first_x, second_x)
    module.eval()
    eval_x, eval_y = module(x, y)
    assert eval_x.shape == (3, 5 + 16)
    torch.testing.assert_close(module(x)[0], eval_x)
    restored = WPSEmbedding(train_features=32, eval_features=16, seed=99)
    restored.load_state_dict(module.state_dict())
    restored.eval()
    torch.testing.assert_close(restored(x)[0], eval_x)
    module.train(), restored.train()
    torch.testing.assert_close(restored(x)[0], module(x)[0])  # the training generator travels too
    module.eval()
    module.redraw(5, 5)
    assert not torch.allclose(module(x)[0], eval_x)


def test_point_set_head_bounds_weights_and_normalizes_points():
    head = PointSetHead(width=6, dim=4, weight_scale=2.0)
    tokens = 50 * torch.randn(3, 7, 6)
    sets = head(tokens)
    assert sets.points.shape == (3, 7, 4) and sets.weights.shape == (3, 7)
    torch.testing.assert_close(sets.points.norm(dim=-1), torch.ones(3, 7))
    assert bool((sets.weights.abs() <= 2.0).all()) and bool((sets.weights < 0).any())
    positive = PointSetHead(width=6, dim=4, weight_activation="sigmoid")(tokens)
    assert bool((positive.weights > 0).all()) and bool((positive.weights < 100).all())
    ones = PointSetHead(width=6, dim=4, weight_activation="ones")
    assert ones.weights is None and torch.equal(ones(tokens).weights, torch.ones(3, 7))


def test_point_set_head_positions_tell_identical_tokens_apart():
    head = PointSetHead(width=6, dim=4, positions=5)
    same = torch.randn(1, 1, 6).expand(2, 5, 6)
    sets = head(same)
    assert not torch.allclose(sets.points[0, 0], sets.points[0, 1])  # the same token at two positions
    torch.testing.assert_close(sets.points[0], sets.points[1])
    plain = PointSetHead(width=6, dim=4)(same).points
    torch.testing.assert_close(plain[0, 0], plain[0, 1])  # without positions a set cannot tell them apart
    sets.weights.sum().add(sets.points.sum()).backward()
    assert head.positions.grad is not None and head.positions.grad.abs().sum() > 0
    with pytest.raises(ValueError, match=r"tokens must have 5 positions \(positions\), got 4"):
        head(torch.randn(2, 4, 6))
    with pytest.raises(ValueError, match=r"positions must be an integer >= 0"):
        PointSetHead(width=6, dim=4, positions=-1)


@pytest.mark.parametrize("name", batch_objective_names() + ["sogclr", "nuclr"])
def test_every_objective_trains_on_wpse_embeddings(name):
    torch.manual_seed(0)
    heads = torch.nn.ModuleList([PointSetHead(6, 4), PointSetHead(6, 4)])
    embedding = WPSEmbedding(CombinedKernel(1.0, 1.0, IMQKernel(0.5)), train_features=32)
    image_tokens, text_tokens = torch.randn(8, 5, 6), torch.randn(8, 3, 6)
    a, b = embedding(heads[0](image_tokens), heads[1](text_tokens))
    if name in ("sogclr", "nuclr"):
        loss = objectives.build(name, num_samples=8, normalize=False)
        loss.set_epoch(0)
        value = loss(a, b, index=torch.arange(8))
    else:
        loss = objectives.build(name, normalize=False, learnable=True, temperature_parametrization="identity")
        value = loss(a, b)
    value.backward()
    assert bool(torch.isfinite(value))
    for parameter in heads.parameters():
        assert parameter.grad is not None and bool(torch.isfinite(parameter.grad).all())
    assert any(float(parameter.grad.abs().sum()) > 0 for parameter in heads.parameters())


def test_zero_shot_with_point_sets_finds_each_images_own_class():
    classes = [point_sets(batch=3, size=2, dim=6, seed=20 + k) for k in range(4)]
    images = WeightedPointSet(torch.cat([c.weights[:1] for c in classes]), torch.cat([c.points[:1] for c in classes]))
    module = WPSEmbedding(CombinedKernel(0.0, 1.0, GaussianKernel(0.3)), eval_features=2048)
    result = point_set_zero_shot(images, torch.arange(4), classes, module, draws=3)
    assert len(result.accuracies) == 3
    assert result.mean == pytest.approx(1.0) and result.std == pytest.approx(0.0)
    shuffled = point_set_zero_shot(images, torch.tensor([1, 2, 3, 0]), classes, module, draws=2)
    assert shuffled.mean < 0.5


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: GaussianKernel(-1.0), r"sigma must be in \(0, inf\]"),
        (lambda: IMQKernel(0.0), r"c must be in \(0, inf\]"),
        (lambda: CombinedKernel(0.0, 0.0), r"must not both be 0"),
        (lambda: CombinedKernel(-1.0, 1.0), r"alpha1 must be in \[0, inf\]"),
        (lambda: WPSEmbedding(train_features=0), r"train_features \(D\) must be an integer >= 1"),
        (lambda: WPSEmbedding(pooling="max"), r"pooling must be one of 'sum', 'mean'"),
        (lambda: WeightedPointSet(torch.tensor([[math.nan]]), torch.zeros(1, 1, 2)), r"weights contains non-finite"),
        (lambda: WeightedPointSet(torch.ones(2, 3), torch.zeros(2, 4, 5)), r"points must have shape"),
        (
            lambda: exact_similarity(point_sets(dim=3), point_sets(dim=4), LinearKernel()),
            r"same dimension, got 3 and 4",
        ),
        (
            lambda: FeatureDraw.sample(GaussianKernel(), 0, 3, torch.Generator()),
            r"random features D must be an integer >= 1",
        ),
        (lambda: PointSetHead(4, 2, weight_activation="relu"), r"weight_activation must be one of"),
    ],
)
def test_bad_input_raises_a_clear_error(make, message):
    with pytest.raises(ValueError, match=message):
        make()
