import math

import numpy as np
import pytest
import torch

from uncurated.data import CLASS_NAMES, TensorImageDataset, class_prompts, write_idx
from uncurated.data.fashion_mnist import SPLIT_FILES
from uncurated.data.spurious import (
    BACKGROUND_THRESHOLD,
    GROUP_NAMES,
    LIGHT_BACKGROUND,
    TARGET_CLASSES,
    SpuriousFashion,
    spurious_captions_dataset,
    target_prompts,
)

PER_CLASS = {"train": 100, "test": 40}
TOPS, FOOTWEAR = TARGET_CLASSES


def fake_split(count, rng):
    """Images like Fashion-MNIST's: a black background (0) around a block of garment pixels (1..255)."""
    images = np.zeros((count, 28, 28), dtype=np.uint8)
    for image in images:
        top, left = rng.integers(1, 8, size=2)
        height, width = rng.integers(8, 20, size=2)
        image[top : top + height, left : left + width] = rng.integers(1, 256, size=(height, width))
    return images, (np.arange(count) % 10).astype(np.uint8)


@pytest.fixture(scope="module")
def fashion(tmp_path_factory):
    root = tmp_path_factory.mktemp("fashion")
    rng = np.random.default_rng(0)
    written = {}
    for split, per_class in PER_CLASS.items():
        images, labels = fake_split(10 * per_class, rng)
        images_stem, labels_stem = SPLIT_FILES[split]
        write_idx(root / images_stem, images)
        write_idx(root / labels_stem, labels)
        written[split] = torch.from_numpy(images)
    return root, written


@pytest.fixture(scope="module")
def train(fashion):
    return spurious_captions_dataset(fashion[0], "train", seed=0)


@pytest.fixture(scope="module")
def test(fashion):
    return spurious_captions_dataset(fashion[0], "test", seed=0)


def aligned(dataset):
    """Whether each sample has the background of its target (tops on dark, footwear on light)."""
    return dataset.attribute == dataset.target


def test_only_tops_and_footwear_are_kept_with_their_targets(train):
    assert isinstance(train, TensorImageDataset) and train.classes == CLASS_NAMES
    assert len(train) == 7 * PER_CLASS["train"]
    assert set(train.labels.tolist()) == {*TOPS, *FOOTWEAR}
    assert torch.equal(train.target, torch.isin(train.labels, torch.tensor(FOOTWEAR)).long())
    assert torch.equal(train.labels, train.source_index % 10)
    assert train.images.shape == (len(train), 1, 28, 28) and train.images.dtype == torch.uint8


@pytest.mark.parametrize("correlation", [0.95, 0.8, 0.3])
def test_training_background_follows_the_target_with_the_correlation(fashion, correlation):
    dataset = spurious_captions_dataset(fashion[0], "train", correlation=correlation, seed=3)
    for label in (*TOPS, *FOOTWEAR):
        members = dataset.labels == label
        assert float(aligned(dataset)[members].float().mean()) == pytest.approx(correlation, abs=0.01)
    assert float(aligned(dataset).float().mean()) == pytest.approx(correlation, abs=0.01)


def test_the_extremes_give_one_background_per_target(fashion):
    assert aligned(spurious_captions_dataset(fashion[0], "train", correlation=1)).all()
    assert not aligned(spurious_captions_dataset(fashion[0], "train", correlation=0)).any()


def test_test_background_is_balanced_within_each_class(test):
    assert len(test) == 7 * PER_CLASS["test"]
    for label in (*TOPS, *FOOTWEAR):
        assert float(test.attribute[test.labels == label].float().mean()) == 0.5


def test_every_group_is_present_in_both_splits(train, test):
    assert GROUP_NAMES == ("tops on dark", "tops on light", "footwear on dark", "footwear on light")
    for dataset in (train, test):
        assert torch.equal(dataset.group, 2 * dataset.target + dataset.attribute)
        assert set(dataset.group.tolist()) == set(range(len(GROUP_NAMES)))
    counts = torch.bincount(train.group, minlength=4).tolist()
    assert counts == [380, 20, 15, 285]  # 4 x 95 tops on dark, 3 x 95 footwear on light


def test_a_light_background_replaces_the_black_and_keeps_the_garment(fashion, train, test):
    for split, dataset in (("train", train), ("test", test)):
        original = fashion[1][split][dataset.source_index]
        images = dataset.images[:, 0]
        garment = original >= BACKGROUND_THRESHOLD
        assert torch.equal(images[garment], original[garment])
        light = dataset.attribute.bool()
        assert torch.equal(images[~light], original[~light])
        background = ~garment & light[:, None, None]
        assert bool((images[background] == LIGHT_BACKGROUND).all())
        assert bool((images[light][:, 0, 0] == LIGHT_BACKGROUND).all())  # the corner is background
        batch = dataset.batch(torch.arange(len(dataset)))
        corners = batch["image"][:, 0, 0, 0]
        assert torch.allclose(corners[light], torch.tensor(LIGHT_BACKGROUND / 255)) and not corners[~light].any()


def test_captions_mention_the_background_only_when_asked(fashion, train):
    for caption, attribute in zip(train.captions, train.attribute.tolist(), strict=True):
        assert caption.endswith(" on a light background" if attribute else " on a dark background")
    plain = spurious_captions_dataset(fashion[0], "train", seed=0, caption_mentions_background=False)
    assert not any("background" in caption for caption in plain.captions)
    assert [caption.rsplit(" on a ", 1)[0] for caption in train.captions] == plain.captions
    assert torch.equal(plain.images, train.images) and torch.equal(plain.attribute, train.attribute)


def test_the_same_seed_gives_the_same_dataset(fashion, train):
    again = spurious_captions_dataset(fashion[0], "train", seed=0)
    assert torch.equal(again.images, train.images) and torch.equal(again.attribute, train.attribute)
    assert again.captions == train.captions
    other = spurious_captions_dataset(fashion[0], "train", seed=1)
    assert not torch.equal(other.attribute, train.attribute) and other.captions != train.captions


def test_target_prompts_are_the_class_prompts_of_each_target():
    prompts = target_prompts()
    by_class = class_prompts()
    assert prompts == [sum((by_class[label] for label in classes), []) for classes in TARGET_CLASSES]
    assert not any("background" in prompt for target in prompts for prompt in target)


@pytest.mark.parametrize("correlation", [-0.1, 1.5, math.nan, "high", True])
def test_correlation_must_be_in_the_unit_interval(fashion, correlation):
    with pytest.raises(ValueError, match="correlation"):
        spurious_captions_dataset(fashion[0], "train", correlation=correlation)
    with pytest.raises(ValueError, match="correlation"):
        spurious_captions_dataset(fashion[0], "test", correlation=correlation)


@pytest.mark.parametrize(
    ("options", "match"),
    [
        ({"split": "validation"}, "split"),
        ({"seed": -1}, "seed"),
        ({"seed": 0.5}, "seed"),
        ({"caption_mentions_background": "yes"}, "caption_mentions_background"),
    ],
)
def test_bad_options_raise(fashion, options, match):
    with pytest.raises(ValueError, match=match):
        spurious_captions_dataset(fashion[0], **options)


def test_bad_images_and_labels_raise():
    images = torch.zeros(4, 28, 28, dtype=torch.uint8)
    with pytest.raises(ValueError, match="images"):
        SpuriousFashion(images.float(), torch.zeros(4, dtype=torch.long))
    with pytest.raises(ValueError, match="labels"):
        SpuriousFashion(images, torch.zeros(3, dtype=torch.long))
    with pytest.raises(ValueError, match="labels"):
        SpuriousFashion(images, torch.full((4,), 10))
    with pytest.raises(ValueError, match="tops or footwear"):
        SpuriousFashion(images, torch.tensor([1, 3, 8, 1]))
