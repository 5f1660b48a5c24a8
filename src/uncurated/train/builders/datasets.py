"""The datasets of a run and their augmentation: the training split, the labelled test split where the
format has one, from the configuration's data keys."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import nn
from torch.utils.data import IterableDataset

from ... import data
from ...models.factory import split_source
from ..config import ConfigError, TrainConfig, as_config_error
from ..sections import IN_MEMORY_DATASETS


@dataclass
class Splits:
    """The training set and, where the format has one, the labelled test set used for evaluation."""

    train: data.TrainingData
    test: data.TrainingData | None


def build_splits(config: TrainConfig) -> Splits:
    """The datasets ``config`` names (``dataset``, ``data_dir`` and the data keys)."""
    name = config.dataset
    root = config.data_dir or None
    if name == "fashion-mnist":
        splits = Splits(*(data.fashion_mnist_dataset(root, split) for split in ("train", "test")))
    elif name == "fashion-clutter":
        # Rendered once from a fixed seed and cached: the dataset, like a downloaded one, does not vary with the run.
        splits = Splits(*(data.fashion_clutter_dataset(root, split) for split in ("train", "test")))
    elif name == "mnist":
        if root is None:
            raise ConfigError("dataset=mnist needs data_dir=FOLDER (the four MNIST IDX files)")
        splits = Splits(*(data.mnist_dataset(root, split) for split in ("train", "test")))
    elif name == "digits":
        splits = Splits(*(data.digits_dataset(split, seed=config.seed) for split in ("train", "test")))
    elif name == "fashion-captions":
        options = {
            "seed": config.seed,
            "mismatch_fraction": config.mismatch_fraction,
            "mismatch_mode": config.mismatch_mode,
            "imbalance_ratio": config.imbalance_ratio,
            "duplicate_fraction": config.duplicate_fraction,
        }
        # The test split stays clean and balanced: it measures what was learned, not the damage.
        splits = Splits(
            data.fashion_captions_dataset(root, "train", **options),
            data.fashion_captions_dataset(root, "test", seed=config.seed),
        )
    elif name == "fashion-spurious":
        # Backgrounds correlated with the class in training, balanced at test (the debiasing benchmark).
        splits = Splits(
            data.spurious_captions_dataset(root, "train", correlation=config.spurious_correlation, seed=config.seed),
            data.spurious_captions_dataset(root, "test", seed=config.seed),
        )
    else:
        splits = Splits(_file_dataset(name, config), None)
    if config.train_subset:
        splits.train = _subset(splits.train, config.train_subset, config.seed)
    return splits


def _subset(dataset: data.TrainingData, size: int, seed: int) -> data.TensorImageDataset:
    """A seeded random ``size`` of an in-memory dataset; indices are positions in the subset."""
    if not isinstance(dataset, data.TensorImageDataset):
        raise ConfigError("train_subset applies to in-memory datasets (" + ", ".join(IN_MEMORY_DATASETS) + ")")
    if not 2 <= size <= len(dataset):
        raise ConfigError(f"train_subset must be in [2, {len(dataset)}], got {size}")
    chosen = torch.randperm(len(dataset), generator=torch.Generator().manual_seed(seed))[:size].sort().values
    captions = None if dataset.captions is None else [dataset.captions[i] for i in chosen.tolist()]
    return data.TensorImageDataset(dataset.images[chosen], dataset.labels[chosen], captions, classes=dataset.classes)


def _file_dataset(name: str, config: TrainConfig) -> data.TrainingData:
    """A dataset read from files, counting the items it cannot read (the trainer holds each epoch's counts, summed
    over the processes, to ``max_skipped_fraction``: :mod:`uncurated.train.skipped_items`)."""
    root = _required_root(config)
    decoding: dict[str, Any] = {  # how every file format decodes its images, and where it reports those it cannot read
        "mode": config.image_mode,
        "size": image_size(config),
        "resize": image_resize(config),
        "report": data.SkipReport(max_fraction=1.0),  # counts only: one process alone never stops the run
    }
    if name == "image-folder":
        return data.ImageFolderDataset(root, **decoding)
    if name == "csv":
        return data.CsvImageTextDataset(
            root, img_key=config.csv_img_key, caption_key=config.csv_caption_key, sep=config.csv_separator, **decoding
        )
    return data.WebDatasetShards(
        root,
        samples_per_shard=config.samples_per_shard,
        shuffle_shards=config.shard_shuffle,
        shuffle_buffer=config.shuffle_buffer,
        resampled=config.resample_shards,
        seed=config.seed,
        reader=config.shard_reader,
        **decoding,
    )


def image_size(config: TrainConfig) -> int | None:
    """The side images are resized to: ``image_size``, else an ``hf:`` backbone's input size, else each image's own."""
    kind, source = split_source(config.image_encoder)
    if config.image_size or kind != "hf":
        return config.image_size or None
    from ...models.hf import image_preprocessing

    return as_config_error(lambda: image_preprocessing(source, config.image_encoder_config).size)


def image_resize(config: TrainConfig) -> str:
    """``image_resize``; ``auto`` is ``crop`` for ``hf:`` and ``python:`` encoders (their preprocessing) and
    ``stretch`` for the built-in ones (whose data is square)."""
    if config.image_resize != "auto":
        return config.image_resize
    return "stretch" if split_source(config.image_encoder)[0] == "builtin" else "crop"


def first_sample(dataset: data.TrainingData) -> data.Sample:
    """The first sample the dataset can read (file datasets may skip bad ones)."""
    items = iter(dataset) if isinstance(dataset, IterableDataset) else (dataset[i] for i in range(len(dataset)))
    for sample in items:
        if sample is not None:
            return sample
    raise ConfigError("the training data holds no readable sample")


def dataset_size(dataset: data.TrainingData) -> int:
    """The number of persistent indices: the per-sample state of the global objectives has one row each."""
    return dataset.num_indices if isinstance(dataset, IterableDataset) else len(dataset)


def build_augmentation(config: TrainConfig) -> nn.Module:
    return data.Augmentation(config.augment, noise_eta=config.noise_eta)


def _required_root(config: TrainConfig) -> str:
    if not config.data_dir:
        raise ConfigError(f"dataset={config.dataset} needs data_dir=PATH")
    return config.data_dir
