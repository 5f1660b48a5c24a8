import pytest
import torch
from fakedata import write_fake_fashion_mnist

from uncurated.data import CLASS_NAMES, CONFUSABLE_GROUPS, FashionCaptions, class_prompts, fashion_captions_dataset
from uncurated.data.captions import SYNONYMS, describe_images

N = 2000  # 200 images per class


@pytest.fixture(scope="module")
def fashion(tmp_path_factory):
    root = tmp_path_factory.mktemp("fashion")
    write_fake_fashion_mnist(root, sizes={"train": N})
    return root


@pytest.fixture(scope="module")
def clean(fashion):
    return fashion_captions_dataset(fashion, "train", seed=0)


def names_in(caption):
    """The classes whose synonyms appear in a caption ("t-shirt" is not "shirt")."""
    words = caption.replace(",", " ").split()
    text = f" {' '.join(words)} "
    return {label for label, names in enumerate(SYNONYMS) if any(f" {name} " in text for name in names)}


def test_off_by_default_every_caption_describes_its_own_class(clean):
    assert len(clean) == N and clean.classes == CLASS_NAMES
    assert not clean.caption_is_mismatched.any() and not clean.caption_is_duplicate.any()
    assert torch.equal(clean.caption_label, clean.labels)
    assert torch.equal(clean.source_index, torch.arange(N))
    assert all(names_in(caption) == {int(label)} for caption, label in zip(clean.captions, clean.labels, strict=True))


def test_captions_vary_within_a_class_and_follow_the_seed(fashion, clean):
    for label in range(10):
        captions = [c for c, y in zip(clean.captions, clean.labels.tolist(), strict=True) if y == label]
        assert len(set(captions)) > 20
        assert {name for name in SYNONYMS[label] if any(name in c for c in captions)} == set(SYNONYMS[label])
    assert fashion_captions_dataset(fashion, "train", seed=0).captions == clean.captions
    assert fashion_captions_dataset(fashion, "train", seed=1).captions != clean.captions


def test_batches_carry_the_captions(clean):
    batch = clean.batch(torch.tensor([3, 1]))
    assert batch["caption"] == [clean.captions[3], clean.captions[1]]
    assert batch["image"].shape == (2, 1, 28, 28) and batch["label"].tolist() == clean.labels[[3, 1]].tolist()


def test_words_come_from_pixel_statistics():
    # One class of 9 images: a centred block of width 4, 12 or 24 and intensity 60, 150 or 250.
    images = torch.zeros(9, 28, 28, dtype=torch.uint8)
    for i, (width, value) in enumerate((w, v) for w in (4, 12, 24) for v in (60, 150, 250)):
        images[i, 4:24, 14 - width // 2 : 14 + width // 2] = value
    words = describe_images(images, torch.zeros(9, dtype=torch.long))
    assert [("narrow" in w, "wide" in w) for w in words] == [(True, False)] * 3 + [(False, False)] * 3 + [
        (False, True)
    ] * 3
    assert [("dark" in w, "light" in w) for w in words] == [(True, False), (False, False), (False, True)] * 3
    assert not any("short" in w or "long" in w for w in words)  # every block has the same height


@pytest.mark.parametrize("mode", ["uniform", "confusable"])
def test_mismatched_captions_come_from_another_class(fashion, clean, mode):
    noisy = fashion_captions_dataset(fashion, "train", seed=0, mismatch_fraction=0.3, mismatch_mode=mode)
    mismatched = noisy.caption_is_mismatched
    assert abs(mismatched.float().mean().item() - 0.3) < 0.01
    assert torch.equal(noisy.caption_label != noisy.labels, mismatched)
    clean_by_class = [
        set(c for c, y in zip(clean.captions, clean.labels.tolist(), strict=True) if y == k) for k in range(10)
    ]
    for i in mismatched.nonzero().squeeze(1).tolist():
        assert noisy.captions[i] in clean_by_class[int(noisy.caption_label[i])]
        assert names_in(noisy.captions[i]) == {int(noisy.caption_label[i])}
    kept = ~mismatched
    assert [c for c, k in zip(noisy.captions, kept, strict=True) if k] == [
        c for c, k in zip(clean.captions, kept, strict=True) if k
    ]
    group_of = {member: set(group) for group in CONFUSABLE_GROUPS for member in group}
    pairs = list(zip(noisy.labels[mismatched].tolist(), noisy.caption_label[mismatched].tolist(), strict=True))
    in_group = [target in group_of.get(label, ()) for label, target in pairs if label in group_of]
    if mode == "confusable":
        assert all(in_group)
    else:
        assert 0.2 < sum(in_group) / len(in_group) < 0.6  # uniform: 2 or 3 of 9 classes share the group


def test_imbalance_follows_the_ratio(fashion):
    dataset = fashion_captions_dataset(fashion, "train", imbalance_ratio=10.0)
    counts = torch.bincount(dataset.labels, minlength=10)
    expected = [round(200 * 10 ** (-k / 9)) for k in range(10)]
    assert counts.tolist() == expected and expected[0] == 200 and expected[-1] == 20
    assert len(dataset) == sum(expected)
    assert torch.equal(dataset.labels, torch.arange(N)[dataset.source_index] % 10)
    assert dataset.source_index.unique().numel() == len(dataset)
    assert dataset.batch(torch.tensor([len(dataset) - 1]))["index"].item() == len(dataset) - 1


def test_duplicates_copy_a_caption_of_the_same_class(fashion, clean):
    noisy = fashion_captions_dataset(fashion, "train", duplicate_fraction=0.2, mismatch_fraction=0.1)
    duplicated = noisy.caption_is_duplicate
    assert abs(duplicated.float().mean().item() - 0.2) < 0.01
    assert not (duplicated & noisy.caption_is_mismatched).any()
    originals = ~duplicated & ~noisy.caption_is_mismatched
    for i in duplicated.nonzero().squeeze(1).tolist():
        same_class = (noisy.labels == noisy.labels[i]) & originals
        assert noisy.captions[i] in {noisy.captions[j] for j in same_class.nonzero().squeeze(1).tolist()}
    assert len(set(noisy.captions)) < len(set(clean.captions))
    # Switching duplicates on leaves the mismatched pairs drawn as before.
    alone = fashion_captions_dataset(fashion, "train", mismatch_fraction=0.1)
    assert torch.equal(alone.caption_is_mismatched, noisy.caption_is_mismatched)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"mismatch_fraction": 1.5}, r"mismatch_fraction must be in \[0, 1\]"),
        ({"mismatch_mode": "random"}, "mismatch_mode must be one of 'uniform', 'confusable'"),
        ({"imbalance_ratio": 0.5}, r"imbalance_ratio must be in \[1, inf\]"),
        ({"mismatch_fraction": 0.6, "duplicate_fraction": 0.6}, "must be at most 1"),
        ({"seed": -1}, "seed must be an integer >= 0"),
    ],
)
def test_bad_options_are_rejected(options, message):
    images, labels = torch.zeros(10, 28, 28, dtype=torch.uint8), torch.arange(10)
    with pytest.raises(ValueError, match=message):
        FashionCaptions(images, labels, **options)


@pytest.mark.parametrize("dataset", ["captions", "spurious"])
@pytest.mark.parametrize(
    ("images", "labels", "message"),
    [
        (torch.zeros(4, 28, 28), torch.zeros(4, dtype=torch.long), r"images must be uint8 .* got torch.float32"),
        (torch.zeros(4, 2, 28, 28, dtype=torch.uint8), torch.zeros(4, dtype=torch.long), r"of shape \(4, 2, 28, 28\)"),
        ([[0]], torch.zeros(1, dtype=torch.long), r"images must be uint8 .* got \[\[0\]\]"),
        (torch.zeros(4, 28, 28, dtype=torch.uint8), torch.zeros(3, dtype=torch.long), r"of shape \(4,\)"),
        (torch.zeros(4, 28, 28, dtype=torch.uint8), torch.zeros(4), "integer tensor"),
        (torch.zeros(4, 28, 28, dtype=torch.uint8), [0, 0, 0, 0], "integer tensor"),
        (torch.zeros(4, 28, 28, dtype=torch.uint8), torch.tensor([0, 0, 0, 10]), r"labels must be in 0\.\.9"),
        (torch.zeros(4, 28, 28, dtype=torch.uint8), torch.tensor([0, -1, 0, 0]), r"labels must be in 0\.\.9"),
    ],
)
def test_both_caption_datasets_refuse_the_same_bad_images_and_labels(dataset, images, labels, message):
    from uncurated.data.spurious import SpuriousFashion

    build = FashionCaptions if dataset == "captions" else SpuriousFashion
    with pytest.raises(ValueError, match=message):
        build(images, labels)


def test_the_images_lose_their_channel_axis_and_neither_set_may_start_empty():
    from uncurated.data.fashion_mnist import checked_fashion_images
    from uncurated.data.spurious import SpuriousFashion

    given = torch.tensor([1, 2, 9], dtype=torch.uint8)  # as the IDX files hold them
    images, labels = checked_fashion_images(torch.ones(3, 1, 28, 28, dtype=torch.uint8), given)
    assert images.shape == (3, 28, 28) and labels.dtype == torch.long and labels.tolist() == [1, 2, 9]
    empty = torch.zeros(0, 28, 28, dtype=torch.uint8), torch.zeros(0, dtype=torch.long)
    for build in (FashionCaptions, SpuriousFashion):
        with pytest.raises(ValueError, match=r"labels must be a non-empty integer tensor of shape \(0,\)"):
            build(*empty)


def test_class_prompts():
    prompts = class_prompts()
    assert len(prompts) == 10 and all(len(p) == 9 for p in prompts)
    assert "a photo of a pair of trousers" in prompts[1]
    assert "a photo of an ankle boot" in prompts[9] and "an overcoat" in prompts[4]
    assert all(names_in(prompt) == {label} for label, group in enumerate(prompts) for prompt in group)
