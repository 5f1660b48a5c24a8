import numpy as np
import pytest
import torch
from fakedata import write_fake_fashion_mnist

from uncurated.data import (
    CLASS_NAMES,
    TensorImageDataset,
    digits_dataset,
    fashion_mnist_dataset,
    load_mnist,
    mnist_dataset,
    write_idx,
)


def test_items_and_batches_follow_the_sample_contract():
    images = torch.randint(0, 256, (6, 1, 4, 5), dtype=torch.uint8)
    labels = torch.tensor([3, 1, 4, 1, 5, 9])
    dataset = TensorImageDataset(images, labels, [f"caption {i}" for i in range(6)])
    sample = dataset[2]
    assert set(sample) == {"index", "image", "label", "caption"}
    assert sample["index"] == 2 and sample["label"] == 4 and sample["caption"] == "caption 2"
    assert sample["image"].dtype == torch.float32 and sample["image"].shape == (1, 4, 5)
    torch.testing.assert_close(sample["image"], images[2].float() / 255)

    batch = dataset.batch(torch.tensor([5, 0, 2]))
    assert batch["index"].tolist() == [5, 0, 2]
    assert batch["label"].tolist() == [9, 3, 4] and batch["label"].dtype == torch.long
    assert batch["image"].shape == (3, 1, 4, 5) and batch["image"].dtype == torch.float32
    assert float(batch["image"].min()) >= 0 and float(batch["image"].max()) <= 1
    torch.testing.assert_close(batch["image"][1], images[0].float() / 255)
    assert batch["caption"] == ["caption 5", "caption 0", "caption 2"]


def test_float_images_without_labels_and_captions():
    dataset = TensorImageDataset(torch.rand(4, 3, 2, 2))
    assert dataset[3]["label"] == -1 and "caption" not in dataset[3]
    assert dataset.batch(torch.arange(4))["label"].tolist() == [-1] * 4
    assert "caption" not in dataset.batch(torch.arange(2))


@pytest.mark.parametrize(
    ("images", "labels", "captions", "message"),
    [
        (torch.rand(3, 4, 4), None, None, r"images must be a tensor of shape \(N, C, H, W\)"),
        (torch.full((2, 1, 2, 2), 1.5), None, None, r"values in \[0, 1\]"),
        (torch.zeros(2, 1, 2, 2, dtype=torch.int32), None, None, "uint8 or floating point"),
        (torch.rand(3, 1, 2, 2), torch.zeros(2, dtype=torch.long), None, r"labels must be .* shape \(3,\)"),
        (torch.rand(3, 1, 2, 2), None, ["a", "b"], "captions must be a sequence of 3 strings"),
    ],
)
def test_bad_construction_is_rejected(images, labels, captions, message):
    with pytest.raises(ValueError, match=message):
        TensorImageDataset(images, labels, captions)


def test_batch_rejects_out_of_range_indices():
    dataset = TensorImageDataset(torch.rand(4, 1, 2, 2))
    with pytest.raises(ValueError, match=r"indices must be in \[0, 4\)"):
        dataset.batch(torch.tensor([0, 4]))
    with pytest.raises(ValueError, match="1-D integer tensor"):
        dataset.batch(torch.tensor([0.0, 1.0]))


def test_fashion_mnist_dataset_adds_the_channel(tmp_path):
    written = write_fake_fashion_mnist(tmp_path, sizes={"test": 7})
    dataset = fashion_mnist_dataset(tmp_path, split="test")
    assert len(dataset) == 7 and dataset.classes == CLASS_NAMES
    batch = dataset.batch(torch.arange(7))
    assert batch["image"].shape == (7, 1, 28, 28)
    np.testing.assert_array_equal((batch["image"][:, 0] * 255).round().byte().numpy(), written["test"][0])
    assert batch["label"].tolist() == written["test"][1].tolist()


def test_mnist_reads_its_files_and_requires_them(tmp_path):
    rng = np.random.default_rng(1)
    images = rng.integers(0, 256, size=(5, 28, 28), dtype=np.uint8)
    labels = np.array([7, 2, 1, 0, 4], dtype=np.uint8)
    write_idx(tmp_path / "train-images-idx3-ubyte", images)
    write_idx(tmp_path / "train-labels-idx1-ubyte", labels)
    dataset = mnist_dataset(tmp_path, "train")
    assert [dataset[i]["label"] for i in range(5)] == [7, 2, 1, 0, 4]
    assert dataset[0]["image"].shape == (1, 28, 28)
    np.testing.assert_array_equal(load_mnist(tmp_path)[0].numpy(), images)
    with pytest.raises(FileNotFoundError, match=r"MNIST file t10k-images-idx3-ubyte.*root="):
        mnist_dataset(tmp_path, "test")


def test_digits_split_is_deterministic_disjoint_and_complete():
    train, test = digits_dataset("train", seed=3), digits_dataset("test", seed=3)
    everything = digits_dataset("all")
    assert len(everything) == 1797 and len(train) + len(test) == 1797 and len(test) == 359
    assert everything.images.shape == (1797, 1, 8, 8)
    assert float(everything.images.max()) == 1.0 and float(everything.images.min()) == 0.0
    # Every image of the two parts is one of the whole, and no image is in both parts.
    flat = {tuple(image.flatten().tolist()) for image in everything.images}
    train_set = {tuple(image.flatten().tolist()) for image in train.images}
    test_set = {tuple(image.flatten().tolist()) for image in test.images}
    assert train_set <= flat and test_set <= flat and not train_set & test_set
    assert torch.equal(digits_dataset("test", seed=3).images, test.images)
    assert not torch.equal(digits_dataset("test", seed=4).images, test.images)
    assert train.batch(torch.tensor([0, 1]))["index"].tolist() == [0, 1]
