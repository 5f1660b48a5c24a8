"""The package's data formats, registered by name (:func:`~.data_formats.register_format`): in memory, Fashion-MNIST
and its variants, MNIST and the digits; read from files, an image folder, a CSV file of images and captions, and
webdataset shards. Each builder imports its dataset when called, so that this module imports nothing of torch."""

from __future__ import annotations

from typing import Any

from .data_formats import DataFormat, register_format
from .image_decoding import decoding
from .setting import ConfigError


def _both(split: Any) -> tuple[Any, Any]:
    """The training and the test split ``split(name)`` gives."""
    return split("train"), split("test")


def _fashion_mnist(config: Any, options: Any) -> tuple[Any, Any]:
    from ..data import fashion_mnist_dataset

    return _both(lambda split: fashion_mnist_dataset(config.data_dir or None, split))


def _fashion_clutter(config: Any, options: Any) -> tuple[Any, Any]:
    """Rendered once from a fixed seed and cached: the dataset, like a downloaded one, does not vary with the run."""
    from ..data import fashion_clutter_dataset

    return _both(lambda split: fashion_clutter_dataset(config.data_dir or None, split))


def _mnist(config: Any, options: Any) -> tuple[Any, Any]:
    from ..data import mnist_dataset

    if not config.data_dir:
        raise ConfigError("dataset=mnist needs data_dir=FOLDER (the four MNIST IDX files)")
    return _both(lambda split: mnist_dataset(config.data_dir, split))


def _digits(config: Any, options: Any) -> tuple[Any, Any]:
    from ..data import digits_dataset

    return _both(lambda split: digits_dataset(split, seed=config.seed))


def _fashion_captions(config: Any, options: Any) -> tuple[Any, Any]:
    """The test split stays clean and balanced: it measures what was learned, not the damage."""
    from ..data import fashion_captions_dataset

    damage = {
        "mismatch_fraction": config.mismatch_fraction,
        "mismatch_mode": config.mismatch_mode,
        "imbalance_ratio": config.imbalance_ratio,
        "duplicate_fraction": config.duplicate_fraction,
    }
    root = config.data_dir or None
    return (
        fashion_captions_dataset(root, "train", seed=config.seed, **damage),
        fashion_captions_dataset(root, "test", seed=config.seed),
    )


def _fashion_spurious(config: Any, options: Any) -> tuple[Any, Any]:
    """Backgrounds correlated with the class in training, balanced at test (the debiasing benchmark)."""
    from ..data import spurious_captions_dataset

    root = config.data_dir or None
    return (
        spurious_captions_dataset(root, "train", correlation=config.spurious_correlation, seed=config.seed),
        spurious_captions_dataset(root, "test", seed=config.seed),
    )


def _file_decoding(config: Any) -> dict[str, Any]:
    """How every file format decodes its images, and where it reports those it cannot read: counts only (the
    trainer holds each epoch's counts, summed over the processes, to ``max_skipped_fraction``)."""
    from ..data import SkipReport

    return {**decoding(config), "report": SkipReport(max_fraction=1.0)}


def required_root(config: Any) -> str:
    """``data_dir``, which a format read from files needs."""
    if not config.data_dir:
        raise ConfigError(f"dataset={config.dataset} needs data_dir=PATH")
    return str(config.data_dir)


def _image_folder(config: Any, options: Any) -> tuple[Any, Any]:
    from ..data import ImageFolderDataset

    return ImageFolderDataset(required_root(config), **_file_decoding(config)), None


def _csv(config: Any, options: Any) -> tuple[Any, Any]:
    from ..data import CsvImageTextDataset

    columns = {"img_key": config.csv_img_key, "caption_key": config.csv_caption_key, "sep": config.csv_separator}
    return CsvImageTextDataset(required_root(config), **columns, **_file_decoding(config)), None


def _webdataset(config: Any, options: Any) -> tuple[Any, Any]:
    from ..data import WebDatasetShards

    shards = WebDatasetShards(
        required_root(config),
        samples_per_shard=config.samples_per_shard,
        shuffle_shards=config.shard_shuffle,
        shuffle_buffer=config.shuffle_buffer,
        resampled=config.resample_shards,
        seed=config.seed,
        reader=config.shard_reader,
        **_file_decoding(config),
    )
    return shards, None


# The pipeline and augmentation of each: ``csv`` and ``webdataset`` hold captions (image-text), with a crop as
# open_clip's for files of any size.
register_format(DataFormat("fashion-mnist", _fashion_mnist, in_memory=True, augment="fashion-mnist"))
register_format(DataFormat("fashion-clutter", _fashion_clutter, in_memory=True, augment="fashion-clutter"))
register_format(DataFormat("mnist", _mnist, in_memory=True, augment="fashion-mnist"))
register_format(DataFormat("digits", _digits, in_memory=True, augment="digits"))
register_format(DataFormat("fashion-captions", _fashion_captions, in_memory=True, pipeline="image_text"))
register_format(DataFormat("fashion-spurious", _fashion_spurious, in_memory=True, pipeline="image_text"))
register_format(DataFormat("image-folder", _image_folder, augment="simclr"))
register_format(DataFormat("csv", _csv, pipeline="image_text", augment="crop"))
register_format(DataFormat("webdataset", _webdataset, pipeline="image_text", augment="crop"))
