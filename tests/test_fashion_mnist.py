import numpy as np
import pytest
import torch
from fakedata import write_fake_fashion_mnist

from uncurated.data import CLASS_NAMES, DEFAULT_ROOT, load_fashion_mnist, write_idx
from uncurated.data.fashion_mnist import SPLIT_FILES


@pytest.mark.parametrize("compressed", [True, False])
@pytest.mark.parametrize("split", ["train", "test"])
def test_loads_what_was_written(tmp_path, compressed, split):
    written = write_fake_fashion_mnist(tmp_path, sizes={"train": 12, "test": 20}, compressed=compressed)
    images, labels = load_fashion_mnist(tmp_path, split=split)
    assert images.dtype == torch.uint8 and labels.dtype == torch.int64
    expected_images, expected_labels = written[split]
    assert images.shape == expected_images.shape
    np.testing.assert_array_equal(images.numpy(), expected_images)
    np.testing.assert_array_equal(labels.numpy(), expected_labels)


def test_accepts_a_str_root_and_a_mix_of_compressed_and_raw_files(tmp_path):
    written = write_fake_fashion_mnist(tmp_path, sizes={"test": 5}, compressed=True)
    labels_stem = SPLIT_FILES["test"][1]
    (tmp_path / f"{labels_stem}.gz").rename(tmp_path / "elsewhere.gz")
    write_idx(tmp_path / labels_stem, written["test"][1])
    _, labels = load_fashion_mnist(str(tmp_path), split="test")
    np.testing.assert_array_equal(labels.numpy(), written["test"][1])


def test_missing_folder_says_how_to_get_the_data(tmp_path):
    root = tmp_path / "no-such-folder"
    with pytest.raises(FileNotFoundError) as error:
        load_fashion_mnist(root, split="test")
    message = str(error.value)
    assert "sudo apt-get install dataset-fashion-mnist" in message
    assert str(root) in message
    assert "root=" in message and "--data-dir" in message
    assert "t10k-images-idx3-ubyte" in message


def test_missing_labels_file_is_named(tmp_path):
    write_fake_fashion_mnist(tmp_path, sizes={"train": 4})
    (tmp_path / "train-labels-idx1-ubyte.gz").unlink()
    with pytest.raises(FileNotFoundError, match="train-labels-idx1-ubyte"):
        load_fashion_mnist(tmp_path, split="train")


def test_mismatched_counts_raise(tmp_path):
    write_fake_fashion_mnist(tmp_path, sizes={"test": 6})
    write_idx(tmp_path / "t10k-labels-idx1-ubyte.gz", np.zeros(5, dtype=np.uint8))
    with pytest.raises(ValueError, match=r"6 images .* but 5 labels"):
        load_fashion_mnist(tmp_path, split="test")


def test_images_of_the_wrong_shape_raise(tmp_path):
    write_fake_fashion_mnist(tmp_path, sizes={"test": 3})
    write_idx(tmp_path / "t10k-images-idx3-ubyte.gz", np.zeros((3, 32, 32), dtype=np.uint8))
    with pytest.raises(ValueError, match=r"t10k-images-idx3-ubyte\.gz.*\(N, 28, 28\)"):
        load_fashion_mnist(tmp_path, split="test")


def test_labels_out_of_range_raise(tmp_path):
    write_fake_fashion_mnist(tmp_path, sizes={"test": 3})
    write_idx(tmp_path / "t10k-labels-idx1-ubyte.gz", np.array([0, 10, 2], dtype=np.uint8))
    with pytest.raises(ValueError, match=r"labels must be in 0\.\.9, found 10"):
        load_fashion_mnist(tmp_path, split="test")


def test_unknown_split_is_rejected(tmp_path):
    with pytest.raises(ValueError, match=r"split must be one of 'train', 'test'; got 'validation'"):
        load_fashion_mnist(tmp_path, split="validation")


def test_class_names():
    assert len(CLASS_NAMES) == len(set(CLASS_NAMES)) == 10
    assert CLASS_NAMES[0] == "T-shirt/top" and CLASS_NAMES[9] == "Ankle boot"


has_real_data = all(
    any((DEFAULT_ROOT / name).is_file() for name in (f"{stem}.gz", stem))
    for stems in SPLIT_FILES.values()
    for stem in stems
)


@pytest.mark.skipif(not has_real_data, reason=f"Fashion-MNIST is not installed in {DEFAULT_ROOT}")
@pytest.mark.parametrize(("split", "count"), [("train", 60000), ("test", 10000)])
def test_real_debian_files(split, count):
    images, labels = load_fashion_mnist(split=split)
    assert images.shape == (count, 28, 28)
    assert labels.shape == (count,)
    assert int(labels.min()) == 0 and int(labels.max()) == 9
    assert torch.unique(labels).numel() == 10
    assert images.float().mean() > 10  # real images, not blank
