"""The non-parametric classifiers: weighted cosine kNN and the mean (class-centroid) classifier."""

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from sklearn.neighbors import KNeighborsClassifier, NearestCentroid

from uncurated.evaluate import (
    class_means,
    knn_classifier,
    knn_predict,
    mean_classifier,
    mean_classifier_logits,
    mean_classifier_loss,
)
from uncurated.evaluate.classification import classification_result


def random_split(train=150, test=80, dim=12, classes=5, seed=0):
    generator = torch.Generator().manual_seed(seed)
    centres = 0.8 * torch.randn(classes, dim, generator=generator)
    train_y = torch.randint(0, classes, (train,), generator=generator)
    test_y = torch.randint(0, classes, (test,), generator=generator)
    train_x = centres[train_y] + torch.randn(train, dim, generator=generator)
    test_x = centres[test_y] + torch.randn(test, dim, generator=generator)
    return train_x, train_y, test_x, test_y


@pytest.mark.parametrize("k", [1, 7, 20])
@pytest.mark.parametrize("temperature", [0.07, 0.5])
def test_knn_matches_scikit_learn_with_exponential_cosine_weights(k, temperature):
    train_x, train_y, test_x, test_y = random_split()
    reference = KNeighborsClassifier(
        n_neighbors=k, metric="cosine", algorithm="brute", weights=lambda d: np.exp((1 - d) / temperature)
    )
    expected = reference.fit(train_x.double().numpy(), train_y.numpy()).predict(test_x.double().numpy())
    predictions = knn_predict(train_x, train_y, test_x, k=k, temperature=temperature, chunk_size=7)
    assert predictions.tolist() == expected.tolist()
    result = knn_classifier(train_x, train_y, test_x, test_y, k=k, temperature=temperature)
    assert result == classification_result(torch.from_numpy(expected), test_y, num_classes=5)


def test_knn_vote_is_weighted_by_similarity():
    # One neighbour of class 1 at cosine 1 against two of class 0 at cosine 0.8: at T = 0.07 one
    # weight exp(1/T) beats 2 exp(0.8/T); at T = 10 the two votes of nearly equal weight win.
    train = torch.tensor([[1.0, 0.0], [0.8, 0.6], [0.8, -0.6], [-1.0, 0.0]])
    labels = torch.tensor([1, 0, 0, 2])
    query = torch.tensor([[3.0, 0.0]])  # normalized before use
    assert knn_predict(train, labels, query, k=3, temperature=0.07).tolist() == [1]
    assert knn_predict(train, labels, query, k=3, temperature=10.0).tolist() == [0]
    assert knn_predict(train, labels, query, k=1, temperature=10.0).tolist() == [1]


def test_knn_does_not_overflow_at_tiny_temperature():
    train_x, train_y, test_x, _ = random_split(seed=1)
    tiny = knn_predict(train_x, train_y, test_x, k=10, temperature=1e-4)
    nearest = knn_predict(train_x, train_y, test_x, k=1)
    assert torch.equal(tiny, nearest)  # the closest neighbour outweighs all others


def test_knn_bad_input_is_rejected():
    train_x, train_y, test_x, test_y = random_split(train=10, test=4)
    with pytest.raises(ValueError, match=r"k must be an integer >= 1"):
        knn_classifier(train_x, train_y, test_x, test_y, k=0)
    with pytest.raises(ValueError, match=r"k must be in \[1, 10\] \(the number of training rows\), got 11"):
        knn_classifier(train_x, train_y, test_x, test_y, k=11)
    for temperature in (0.0, -1.0, math.nan):
        with pytest.raises(ValueError, match=r"temperature must be in \(0, inf\)"):
            knn_predict(train_x, train_y, test_x, temperature=temperature, k=3)
    with pytest.raises(ValueError, match=r"test_labels must have shape \(4,\)"):
        knn_classifier(train_x, train_y, test_x, test_y[:3], k=3)
    with pytest.raises(ValueError, match=r"train_labels must be an integer tensor"):
        knn_predict(train_x, train_y.float(), test_x, k=3)
    with pytest.raises(ValueError, match=r"chunk_size must be an integer >= 1"):
        knn_predict(train_x, train_y, test_x, k=3, chunk_size=0)
    train_x[2, 1] = math.inf
    with pytest.raises(ValueError, match=r"train_features contains non-finite"):
        knn_predict(train_x, train_y, test_x, k=3)


def brute_force_mean_classifier(train_x, train_y, test_x, test_y, temperature):
    """Class means, scores, predictions and Eq. 4 loss with explicit loops in numpy."""
    train = train_x.double().numpy()
    train = train / np.linalg.norm(train, axis=1, keepdims=True)
    test = test_x.double().numpy()
    test = test / np.linalg.norm(test, axis=1, keepdims=True)
    classes = int(max(train_y.max(), test_y.max())) + 1
    means = np.stack([train[train_y.numpy() == c].mean(axis=0) for c in range(classes)])
    losses, predictions = [], []
    for z, y in zip(test, test_y.tolist(), strict=True):
        scores = [float(z @ means[j]) / temperature for j in range(classes)]
        top = max(scores)
        log_normalizer = top + math.log(sum(math.exp(s - top) for s in scores))
        losses.append(log_normalizer - scores[y])
        predictions.append(scores.index(top))
    return means, np.array(predictions), sum(losses) / len(losses)


@pytest.mark.parametrize("temperature", [1.0, 0.2])
def test_mean_classifier_matches_brute_force(temperature):
    train_x, train_y, test_x, test_y = random_split(seed=2)
    means, predictions, loss = brute_force_mean_classifier(train_x, train_y, test_x, test_y, temperature)
    assert class_means(train_x, train_y).numpy() == pytest.approx(means, abs=1e-12)
    logits = mean_classifier_logits(test_x, torch.from_numpy(means), temperature=temperature)
    assert logits.argmax(dim=1).tolist() == predictions.tolist()
    result = mean_classifier(train_x, train_y, test_x, test_y, temperature=temperature)
    assert result.loss == pytest.approx(loss, rel=1e-12)
    assert mean_classifier_loss(test_x, test_y, torch.from_numpy(means), temperature=temperature) == pytest.approx(loss)
    expected = classification_result(torch.from_numpy(predictions), test_y, num_classes=5)
    assert (result.accuracy, result.per_class_accuracy) == (expected.accuracy, expected.per_class_accuracy)


def test_mean_classifier_equals_nearest_centroid_when_the_centroids_have_equal_norms():
    # ||z - mu||^2 = 1 - 2 z.mu + ||mu||^2 for unit z: with equal ||mu||, nearest centroid = largest z.mu.
    # Class c's training rows are one fixed set of unit vectors rotated by its own orthogonal Q_c.
    generator = torch.Generator().manual_seed(3)
    base = F.normalize(torch.randn(9, 6, generator=generator, dtype=torch.float64) + 1.5, dim=1)
    rotations = [torch.linalg.qr(torch.randn(6, 6, generator=generator, dtype=torch.float64))[0] for _ in range(4)]
    train_x = torch.cat([base @ q for q in rotations])
    train_y = torch.arange(4).repeat_interleave(9)
    test_x = F.normalize(torch.randn(200, 6, generator=generator, dtype=torch.float64), dim=1)
    means = class_means(train_x, train_y)
    assert means.norm(dim=1).numpy() == pytest.approx(np.full(4, float(means[0].norm())), rel=1e-12)
    expected = NearestCentroid().fit(train_x.numpy(), train_y.numpy()).predict(test_x.numpy())
    assert mean_classifier_logits(test_x, means).argmax(dim=1).tolist() == expected.tolist()


def test_class_means_average_normalized_rows():
    features = torch.tensor([[2.0, 0.0], [0.0, 3.0], [0.0, -5.0]])
    means = class_means(features, torch.tensor([0, 0, 1]))
    assert means.tolist() == [[0.5, 0.5], [0.0, -1.0]]


def test_temperature_changes_the_loss_not_the_predictions():
    train_x, train_y, test_x, test_y = random_split(seed=4)
    cold = mean_classifier(train_x, train_y, test_x, test_y, temperature=0.1)
    warm = mean_classifier(train_x, train_y, test_x, test_y, temperature=1.0)
    assert cold.per_class_accuracy == warm.per_class_accuracy
    assert cold.loss != pytest.approx(warm.loss)


def test_mean_classifier_keeps_label_ids_with_gaps():
    # Classes 1 and 3 of 0..4 never occur: the others keep their ids and the absent ones are never predicted.
    train_x, train_y, test_x, test_y = random_split(train=40, test=20, classes=3, seed=5)
    ids = torch.tensor([0, 2, 4])
    gapped = mean_classifier(train_x, ids[train_y], test_x, ids[test_y])
    dense = mean_classifier(train_x, train_y, test_x, test_y)
    assert gapped.accuracy == dense.accuracy and gapped.loss == pytest.approx(dense.loss)
    assert [gapped.per_class_accuracy[i] for i in (0, 2, 4)] == list(dense.per_class_accuracy)
    assert all(math.isnan(gapped.per_class_accuracy[i]) for i in (1, 3))


def test_mean_classifier_bad_input_is_rejected():
    train_x, train_y, test_x, test_y = random_split(train=20, test=6, classes=3)
    train_y[train_y == 2] = 0
    with pytest.raises(ValueError, match=r"test_labels has classes \[2\] that train_labels lacks"):
        mean_classifier(train_x, train_y, test_x, torch.tensor([0, 1, 2, 0, 1, 2]))
    with pytest.raises(ValueError, match=r"labels must contain every class in \[0, 3\]"):
        class_means(train_x, train_y, num_classes=4)
    with pytest.raises(ValueError, match=r"temperature must be in \(0, inf\)"):
        mean_classifier(train_x, train_y, test_x, test_y.clamp(max=1), temperature=0.0)
    with pytest.raises(ValueError, match=r"labels must hold indices in \[0, 1\]"):
        mean_classifier_loss(test_x, torch.tensor([0, 1, 2, 0, 1, 0]), class_means(train_x, train_y))
    with pytest.raises(ValueError, match=r"features must have 12 columns like means"):
        mean_classifier_logits(test_x[:, :5], class_means(train_x, train_y))
