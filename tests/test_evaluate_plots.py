"""Pair similarities and the PNG writers of uncurated.evaluate.plots."""

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from uncurated.evaluate import pair_similarities, plot_per_class_accuracy, plot_similarity_histograms, plot_tsne

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def cosine_matrix(a, b):
    return F.normalize(a.double(), dim=1) @ F.normalize(b.double(), dim=1).T


def test_pair_similarities_split_the_diagonal_from_the_rest():
    a, b = torch.randn(6, 4), torch.randn(6, 4)
    positive, negative = pair_similarities(a, b)
    full = cosine_matrix(a, b)
    off_diagonal = full[~torch.eye(6, dtype=torch.bool)]
    assert positive.numpy() == pytest.approx(full.diagonal().numpy(), abs=1e-12)
    assert negative.sort().values.numpy() == pytest.approx(off_diagonal.sort().values.numpy(), abs=1e-12)


def test_pair_similarities_with_labels_split_same_from_different_labels():
    a, b = torch.randn(9, 3), torch.randn(9, 3)
    labels = torch.tensor([2, 0, 2, 1, 0, 2, 2, 0, 1])
    positive, negative = pair_similarities(a, b, labels)
    full = cosine_matrix(a, b)
    same = labels[:, None] == labels[None, :]
    assert positive.sort().values.numpy() == pytest.approx(full[same].sort().values.numpy(), abs=1e-12)
    assert negative.sort().values.numpy() == pytest.approx(full[~same].sort().values.numpy(), abs=1e-12)


def test_large_groups_are_sampled_from_the_right_pairs_with_a_seed():
    a, b = torch.randn(40, 5), torch.randn(40, 5)
    labels = torch.arange(40) % 3
    positive, negative = pair_similarities(a, b, labels, max_pairs=200, seed=1)
    assert len(positive) == len(negative) == 200
    full = cosine_matrix(a, b)
    same = labels[:, None] == labels[None, :]
    for drawn, allowed in ((positive, full[same]), (negative, full[~same])):
        distance = (drawn[:, None] - allowed[None, :]).abs().min(dim=1).values
        assert float(distance.max()) < 1e-12  # every drawn value is a pair of its group
    again, _ = pair_similarities(a, b, labels, max_pairs=200, seed=1)
    other, _ = pair_similarities(a, b, labels, max_pairs=200, seed=2)
    assert torch.equal(positive, again) and not torch.equal(positive, other)


def test_pair_similarities_bad_input_is_rejected():
    a = torch.randn(5, 3)
    with pytest.raises(ValueError, match=r"a and b must have the same shape"):
        pair_similarities(a, torch.randn(4, 3))
    with pytest.raises(ValueError, match=r"labels must have shape \(5,\)"):
        pair_similarities(a, a, torch.tensor([0, 1]))
    with pytest.raises(ValueError, match=r"max_pairs must be an integer >= 1"):
        pair_similarities(a, a, max_pairs=0)


def assert_png(path):
    data = path.read_bytes()
    assert data[:8] == PNG_MAGIC and len(data) > 1000


def test_similarity_histograms_write_a_png(tmp_path):
    a = torch.randn(50, 8)
    positive, negative = pair_similarities(a, a + 0.3 * torch.randn(50, 8))
    path = plot_similarity_histograms(positive, negative, tmp_path / "histograms.png", title="test")
    assert path == tmp_path / "histograms.png"
    assert_png(path)
    with pytest.raises(ValueError, match=r"negative_similarities must be a non-empty array of finite"):
        plot_similarity_histograms(positive, torch.tensor([]), tmp_path / "empty.png")
    with pytest.raises(ValueError, match=r"positive_similarities must be a non-empty array of finite"):
        plot_similarity_histograms(np.array([0.5, math.nan]), negative, tmp_path / "nan.png")


def test_tsne_writes_a_png(tmp_path):
    labels = torch.arange(60) % 3
    features = torch.randn(60, 10) + 4 * F.one_hot(labels, 10)
    path = plot_tsne(features, labels, tmp_path / "tsne.png", class_names=["a", "b", "c"], max_points=40)
    assert_png(path)
    with pytest.raises(ValueError, match=r"class_names must name all 3 classes, got 2 names"):
        plot_tsne(features, labels, tmp_path / "bad.png", class_names=["a", "b"])


def test_per_class_accuracy_bars_write_a_png(tmp_path):
    per_class = {"knn": (0.9, 0.5, math.nan), "probe": np.array([0.95, 0.6, 0.7]), "mean": torch.tensor([1.0, 0, 0.2])}
    assert_png(plot_per_class_accuracy(per_class, tmp_path / "bars.png", ["cat", "dog", "emu"]))
    with pytest.raises(ValueError, match=r"per_class\['probe'\] must hold one accuracy per class"):
        plot_per_class_accuracy({"knn": [0.5, 0.5], "probe": [0.5]}, tmp_path / "bad.png")
    with pytest.raises(ValueError, match=r"per_class must map at least one method"):
        plot_per_class_accuracy({}, tmp_path / "none.png")
