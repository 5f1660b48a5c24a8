import pytest
import torch

from uncurated.data import RELATED_CLASSES, flip_labels


def test_flips_about_eta_over_two_and_only_to_related_classes():
    labels = torch.arange(10).repeat(2000)
    noisy, flipped = flip_labels(labels, 0.4, RELATED_CLASSES, torch.Generator().manual_seed(0))
    assert torch.equal(flipped, noisy != labels)
    for label, related in RELATED_CLASSES.items():
        members = labels == label
        rate = flipped[members].float().mean().item()
        if related:
            assert abs(rate - 0.2) < 0.03
            assert set(noisy[members & flipped].tolist()) <= set(related)
        else:
            assert rate == 0
    assert noisy.dtype == labels.dtype


def test_deterministic_given_a_generator_and_eta_bounds():
    labels = torch.arange(10).repeat(50)
    first = flip_labels(labels, 1.0, RELATED_CLASSES, torch.Generator().manual_seed(3))
    second = flip_labels(labels, 1.0, RELATED_CLASSES, torch.Generator().manual_seed(3))
    assert torch.equal(first[0], second[0])
    assert not flip_labels(labels, 0.0, RELATED_CLASSES)[1].any()
    with pytest.raises(ValueError, match=r"eta must be in \[0, 1\]"):
        flip_labels(labels, 1.2, RELATED_CLASSES)
    with pytest.raises(ValueError, match="must not contain the class itself"):
        flip_labels(labels, 0.5, {0: (0, 1)})


def test_related_map_is_the_documented_one():
    assert RELATED_CLASSES[0] == (6,) and RELATED_CLASSES[6] == (0,)  # T-shirt/top <-> Shirt
    assert RELATED_CLASSES[2] == (4,) and RELATED_CLASSES[4] == (2,)  # Pullover <-> Coat
    assert RELATED_CLASSES[5] == (7,) and RELATED_CLASSES[7] == (5,)  # Sandal <-> Sneaker
    assert RELATED_CLASSES[8] == ()  # Bag keeps its label
    assert all(label not in related for label, related in RELATED_CLASSES.items())
