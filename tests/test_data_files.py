"""ImageFolderDataset and CsvImageTextDataset on small generated folders."""

import numpy as np
import pytest
import torch
from imagefiles import BAD_IMAGES, encode, pattern

from uncurated.data import CsvImageTextDataset, ImageFolderDataset, SkipLimitExceeded, SkipReport, collate_samples


def make_folder(root, bad=()):
    """Two classes of good images, and ``bad`` image files in class "b"; returns the expected (name, label)."""
    (root / "b").mkdir(parents=True)
    (root / "a" / "nested").mkdir(parents=True)
    (root / "a" / "1.png").write_bytes(encode(pattern(1)))
    (root / "a" / "nested" / "2.jpg").write_bytes(encode(pattern(2, channels=3), "JPEG"))
    (root / "b" / "3.PNG").write_bytes(encode(pattern(3)))
    (root / "b" / "notes.txt").write_text("not an image")
    (root / "b" / ".hidden.png").write_bytes(encode(pattern(4)))
    for name, content in bad:
        (root / "b" / name).write_bytes(content)
    return root


def test_image_folder_labels_and_indices(tmp_path):
    dataset = ImageFolderDataset(make_folder(tmp_path), mode="L")
    assert dataset.classes == ["a", "b"]
    names = [path.relative_to(tmp_path).as_posix() for path, _ in dataset.samples]
    assert names == ["a/1.png", "a/nested/2.jpg", "b/3.PNG"]
    samples = [dataset[i] for i in range(len(dataset))]
    assert [s["index"] for s in samples] == [0, 1, 2] and [s["label"] for s in samples] == [0, 0, 1]
    assert samples[1]["image"].shape == (1, 8, 8)  # the RGB JPEG converted to one channel
    np.testing.assert_allclose(samples[0]["image"][0].numpy(), pattern(1) / 255, atol=1e-6)
    # The same folder lists the same way again: indices are persistent.
    assert [p for p, _ in ImageFolderDataset(tmp_path).samples] == [p for p, _ in dataset.samples]


def test_image_folder_rgb_and_resize(tmp_path):
    dataset = ImageFolderDataset(make_folder(tmp_path), mode="RGB", size=(5, 6))
    image = dataset[0]["image"]
    assert image.shape == (3, 5, 6) and image.dtype == torch.float32
    assert float(image.min()) >= 0 and float(image.max()) <= 1


def test_image_folder_rejects_bad_arguments(tmp_path):
    with pytest.raises(ValueError, match="mode must be one of 'L', 'RGB'"):
        ImageFolderDataset(make_folder(tmp_path), mode="CMYK")
    with pytest.raises(ValueError, match="size must be"):
        ImageFolderDataset(tmp_path, size=(0, 4))
    with pytest.raises(ValueError, match="has none"):
        ImageFolderDataset(tmp_path / "a" / "nested")


def test_bad_images_are_skipped_counted_and_never_crash(tmp_path):
    bad = [(f"bad-{reason}.png", content) for reason, content in BAD_IMAGES.items()]
    dataset = ImageFolderDataset(make_folder(tmp_path, bad), mode="L", size=8, report=SkipReport(max_fraction=1.0))
    assert len(dataset) == 3 + len(bad)
    items = [dataset[i] for i in range(len(dataset))]
    good = [item for item in items if item is not None]
    assert len(good) == 3
    assert dict(dataset.report.counts) == {reason: 1 for reason in BAD_IMAGES}
    assert dataset.report.good == 3
    example = dataset.report.examples["truncated"][0]
    assert example.source.endswith("bad-truncated.png") and example.index is not None
    assert items[example.index] is None
    batch = collate_samples(items, report=dataset.report)
    assert len(batch["index"]) == 3 and batch["skips"].skipped == len(bad)


def test_a_mostly_broken_folder_raises(tmp_path):
    bad = [(f"bad-{i}.png", b"") for i in range(5)]
    dataset = ImageFolderDataset(make_folder(tmp_path, bad), report=SkipReport(max_fraction=0.5, min_items=4))
    with pytest.raises(SkipLimitExceeded, match="zero_byte"):
        for i in range(len(dataset)):
            dataset[i]


def write_csv(tmp_path, rows, header=("filepath", "title"), sep="\t", encoding_errors=()):
    lines = [sep.join(header).encode()]
    lines += [sep.join(row).encode() for row in rows]
    lines += list(encoding_errors)
    path = tmp_path / "pairs.csv"
    path.write_bytes(b"\n".join(lines) + b"\n")
    return path


def test_csv_pairs_with_open_clip_defaults(tmp_path):
    (tmp_path / "images").mkdir()
    (tmp_path / "images" / "x.png").write_bytes(encode(pattern(5, channels=3)))
    (tmp_path / "y.jpg").write_bytes(encode(pattern(6), "JPEG"))
    absolute = tmp_path / "elsewhere.png"
    absolute.write_bytes(encode(pattern(7)))
    path = write_csv(tmp_path, [("images/x.png", "a red thing"), ("y.jpg", "  a gray thing "), (str(absolute), "z")])
    dataset = CsvImageTextDataset(path, size=8)
    assert len(dataset) == 3
    first, second, third = (dataset[i] for i in range(3))
    assert (first["index"], first["caption"], first["label"]) == (0, "a red thing", -1)
    assert first["image"].shape == (3, 8, 8)
    np.testing.assert_allclose(first["image"].permute(1, 2, 0).numpy(), pattern(5, channels=3) / 255, atol=1e-6)
    assert second["caption"] == "a gray thing" and third["index"] == 2


def test_csv_custom_columns_and_separator(tmp_path):
    (tmp_path / "x.png").write_bytes(encode(pattern(8)))
    path = write_csv(tmp_path, [("7", "x.png", "hello")], header=("id", "image", "text"), sep=",")
    dataset = CsvImageTextDataset(path, img_key="image", caption_key="text", sep=",", mode="L")
    assert dataset[0]["caption"] == "hello" and dataset[0]["image"].shape == (1, 8, 8)
    with pytest.raises(ValueError, match=r"img_key must name a column .* 'filepath' is not one of"):
        CsvImageTextDataset(path, sep=",")
    with pytest.raises(ValueError, match="sep must be one character"):
        CsvImageTextDataset(path, sep=", ")


def test_csv_bad_rows_are_skipped_per_reason(tmp_path):
    (tmp_path / "good.png").write_bytes(encode(pattern(9)))
    for reason, content in BAD_IMAGES.items():
        (tmp_path / f"{reason}.png").write_bytes(content)
    rows = [("good.png", "fine")] + [(f"{reason}.png", "caption") for reason in BAD_IMAGES]
    rows += [("absent.png", "caption"), ("good.png", "   "), ("", "no path")]
    path = write_csv(tmp_path, rows, encoding_errors=[b"good.png\tcaf\xe9 latin-1"])
    dataset = CsvImageTextDataset(path, mode="L", report=SkipReport(max_fraction=1.0))
    assert len(dataset) == len(rows) + 1
    items = [dataset[i] for i in range(len(dataset))]
    assert [item["index"] for item in items if item is not None] == [0]
    expected = {reason: 1 for reason in BAD_IMAGES} | {"missing": 2, "empty_caption": 1, "caption_encoding": 1}
    assert dict(dataset.report.counts) == expected
    assert any("absent.png" in skip.source for skip in dataset.report.examples["missing"])
    assert "caption_encoding: 1" in dataset.report.summary()
