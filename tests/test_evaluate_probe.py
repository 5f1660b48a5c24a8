"""The linear probes: scikit-learn and torch logistic regression with the regularization searched on a split."""

import math

import pytest
import torch
from sklearn.linear_model import LogisticRegression

from uncurated.evaluate import (
    DEFAULT_C_GRID,
    DEFAULT_WEIGHT_DECAY_GRID,
    linear_probe,
    mean_per_class_accuracy,
    stratified_split,
    torch_linear_probe,
)
from uncurated.evaluate.classification import classification_result


def blobs(count, dim, classes, spread, seed):
    """Gaussian blobs: class means on the first coordinates, unit noise everywhere."""
    generator = torch.Generator().manual_seed(seed)
    labels = torch.arange(count) % classes
    features = torch.randn(count, dim, generator=generator)
    features[:, :classes] += spread * torch.nn.functional.one_hot(labels, classes)
    return features, labels


def test_mean_per_class_accuracy_weights_classes_equally():
    labels = torch.tensor([0] * 8 + [1, 1])
    predictions = torch.tensor([0] * 8 + [1, 0])
    assert mean_per_class_accuracy(predictions, labels) == pytest.approx(0.75)
    assert mean_per_class_accuracy(predictions.numpy(), labels.numpy()) == pytest.approx(0.75)
    result = classification_result(predictions, labels, num_classes=3)
    assert result.accuracy == pytest.approx(0.9)
    assert result.mean_per_class_accuracy == pytest.approx(0.75)
    assert result.per_class_accuracy[:2] == pytest.approx((1.0, 0.5))
    assert math.isnan(result.per_class_accuracy[2])  # class 2 never occurs: no accuracy, not averaged in


@pytest.mark.parametrize("probe", [linear_probe, torch_linear_probe])
def test_separable_classes_are_classified_perfectly(probe):
    train_x, train_y = blobs(120, 6, 3, spread=12.0, seed=0)
    test_x, test_y = blobs(60, 6, 3, spread=12.0, seed=1)
    result = probe(train_x, train_y, test_x, test_y)
    assert result.accuracy == 1.0
    assert result.mean_per_class_accuracy == 1.0
    assert result.per_class_accuracy == (1.0, 1.0, 1.0)


def test_search_picks_a_grid_value_and_beats_chance_on_noisy_data():
    train_x, train_y = blobs(400, 20, 4, spread=1.5, seed=0)
    test_x, test_y = blobs(400, 20, 4, spread=1.5, seed=1)
    result = linear_probe(train_x, train_y, test_x, test_y)
    # Chosen on the 320 rows left after the validation split, refit on 400 with the same strength per row.
    searched = result.C * 400 / 320
    assert any(searched == pytest.approx(value) for value in DEFAULT_C_GRID)
    assert result.weight_decay is None
    assert 0.25 < result.validation_accuracy <= 1.0
    assert result.accuracy > 0.5  # chance is 0.25
    grid = (0.01, 0.1)
    chosen = linear_probe(train_x, train_y, test_x, test_y, C_grid=grid).C * 400 / 320
    assert any(chosen == pytest.approx(value) for value in grid)


def test_search_uses_a_stratified_subsample_of_search_rows_and_rescales_c():
    train_x, train_y = blobs(400, 20, 4, spread=1.5, seed=0)
    result = linear_probe(train_x, train_y, train_x, train_y, C_grid=(0.1,), search_rows=100)
    assert result.C == pytest.approx(0.1 * 80 / 400)  # 100 rows searched, 80 fit after the validation split
    with pytest.raises(ValueError, match="search_rows must be an integer >= 2"):
        linear_probe(train_x, train_y, train_x, train_y, search_rows=1)


def test_search_prefers_strong_regularization_on_pure_noise_ties():
    # Labels independent of constant features: every C predicts alike, so the first (smallest) C wins the tie.
    train_x = torch.ones(40, 3)
    train_y = torch.arange(40) % 2
    result = linear_probe(train_x, train_y, train_x, train_y, C_grid=(10.0, 0.1, 1.0))
    assert result.C == pytest.approx(0.1 * 32 / 40)  # chosen on the 32 rows fit, refit on 40


def test_given_C_matches_scikit_learn_on_standardized_features():
    train_x, train_y = blobs(300, 10, 3, spread=1.0, seed=2)
    test_x, test_y = blobs(150, 10, 3, spread=1.0, seed=3)
    result = linear_probe(train_x, train_y, test_x, test_y, C=0.05)
    assert result.C == 0.05 and result.validation_accuracy is None
    x, t = train_x.double().numpy(), test_x.double().numpy()
    mean, std = x.mean(0), x.std(0) + 1e-8
    reference = LogisticRegression(C=0.05, max_iter=1000).fit((x - mean) / std, train_y.numpy())
    predictions = reference.predict((t - mean) / std)
    assert result.accuracy == pytest.approx(float((predictions == test_y.numpy()).mean()))
    assert result.mean_per_class_accuracy == pytest.approx(mean_per_class_accuracy(predictions, test_y.numpy()))


def test_torch_probe_agrees_with_scikit_learn_probe():
    train_x, train_y = blobs(600, 16, 4, spread=1.6, seed=4)
    test_x, test_y = blobs(600, 16, 4, spread=1.6, seed=5)
    reference = linear_probe(train_x, train_y, test_x, test_y)
    result = torch_linear_probe(train_x, train_y, test_x, test_y)
    assert result.weight_decay in DEFAULT_WEIGHT_DECAY_GRID and result.C is None
    assert abs(result.accuracy - reference.accuracy) <= 0.02
    assert result.accuracy > 0.6  # chance is 0.25


def test_torch_probe_with_weight_decay_finds_scikit_learns_minimizer_for_the_equivalent_C():
    # mean CE + wd/2 ||W||^2 has the minimizer of C sum CE + ||W||^2 / 2 when wd = 1 / (C n); the reference is
    # solved to a tight tolerance so that no test point near the boundary flips.
    train_x, train_y = blobs(200, 8, 3, spread=1.0, seed=6)
    test_x, test_y = blobs(200, 8, 3, spread=1.0, seed=7)
    result = torch_linear_probe(train_x, train_y, test_x, test_y, weight_decay=0.05)
    assert result.weight_decay == 0.05 and result.validation_accuracy is None
    x, t = train_x.double().numpy(), test_x.double().numpy()
    mean, std = x.mean(0), x.std(0) + 1e-8
    reference = LogisticRegression(C=1 / (0.05 * 200), tol=1e-12, max_iter=10_000)
    predictions = reference.fit((x - mean) / std, train_y.numpy()).predict((t - mean) / std)
    expected = classification_result(torch.from_numpy(predictions), test_y, num_classes=3)
    assert result.per_class_accuracy == pytest.approx(expected.per_class_accuracy, abs=1e-12)


def test_stratified_split_holds_out_part_of_every_class():
    labels = torch.tensor([0] * 10 + [1] * 5 + [2] * 2 + [3])
    fit, validation = stratified_split(labels, 0.2, seed=0)
    assert sorted(torch.cat([fit, validation]).tolist()) == list(range(len(labels)))
    assert torch.bincount(labels[validation], minlength=4).tolist() == [2, 1, 1, 0]
    assert set(labels[fit].tolist()) == {0, 1, 2, 3}
    again, _ = stratified_split(labels, 0.2, seed=0)
    other, _ = stratified_split(labels, 0.2, seed=1)
    assert torch.equal(fit, again) and not torch.equal(fit, other)


def test_bad_input_is_rejected():
    x, y = blobs(20, 4, 2, spread=3.0, seed=0)
    with pytest.raises(ValueError, match=r"train_labels must have shape \(20,\)"):
        linear_probe(x, y[:-1], x, y)
    with pytest.raises(ValueError, match=r"test_features must have 4 columns like train_features"):
        linear_probe(x, y, x[:, :3], y)
    bad = x.clone()
    bad[0, 0] = math.nan
    with pytest.raises(ValueError, match=r"test_features contains non-finite"):
        torch_linear_probe(x, y, bad, y)
    with pytest.raises(ValueError, match=r"C must be in \(0, inf\)"):
        linear_probe(x, y, x, y, C=0.0)
    with pytest.raises(ValueError, match=r"weight_decay must be in \(0, inf\)"):
        torch_linear_probe(x, y, x, y, weight_decay=-1.0)
    with pytest.raises(ValueError, match=r"validation_fraction must be in \(0, 1\)"):
        linear_probe(x, y, x, y, validation_fraction=1.0)
    with pytest.raises(ValueError, match=r"C_grid must hold at least one value"):
        linear_probe(x, y, x, y, C_grid=())
    with pytest.raises(ValueError, match=r"train_labels must hold indices in \[0, inf\)"):
        linear_probe(x, y - 1, x, y)
    with pytest.raises(ValueError, match=r"at least 2 classes"):
        linear_probe(x, torch.zeros_like(y), x, y)
    with pytest.raises(ValueError, match=r"no class of train_labels has 2 rows"):
        linear_probe(x[:2], torch.tensor([0, 1]), x, y)
    with pytest.raises(ValueError, match=r"max_iter must be an integer >= 1"):
        torch_linear_probe(x, y, x, y, max_iter=0)
    given = linear_probe(x[:2], torch.tensor([0, 1]), x, y, C=1.0)  # a given C needs no validation split
    assert given.C == 1.0 and given.validation_accuracy is None


def test_stratified_split_bad_input_is_rejected():
    labels = torch.tensor([0, 0, 1, 1])
    with pytest.raises(ValueError, match=r"validation_fraction must be in \(0, 1\)"):
        stratified_split(labels, 0.0, seed=0)
    with pytest.raises(ValueError, match=r"seed must be an integer >= 0"):
        stratified_split(labels, 0.5, seed=-1)
    with pytest.raises(ValueError, match=r"labels must be a 1-D integer tensor"):
        stratified_split(labels[None], 0.5, seed=0)
