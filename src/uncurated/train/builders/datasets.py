"""The datasets of a run and their augmentation: the training split, the labelled test split where the
format has one, from the configuration's data keys."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import nn
from torch.utils.data import IterableDataset

from ... import data
from ...data.base import IndexedDataset, StreamedDataset
from ..config import ConfigError, TrainConfig
from ..data_formats import FORMATS


@dataclass
class Splits:
    """The training set and, where the format has one, the labelled test set used for evaluation."""

    train: data.TrainingData
    test: data.TrainingData | None


def build_splits(config: TrainConfig) -> Splits:
    """The datasets ``config`` names: the registered format of ``dataset`` built from the data keys and its own
    (``dataset.NAME=``), each split checked against the dataset contract."""
    data_format = FORMATS[config.dataset]
    train, test = data_format.build(config, config.dataset_options())
    splits = Splits(check_dataset(train, config.dataset), None if test is None else check_dataset(test, config.dataset))
    if config.train_subset:
        splits.train = _subset(splits.train, config.train_subset, config.seed)
    return splits


def check_dataset(dataset: Any, name: str) -> Any:
    """``dataset`` where it keeps the dataset contract (:mod:`uncurated.data.base`): an ``IterableDataset`` with
    ``num_indices`` (:class:`StreamedDataset`), or a map-style one with a length (:class:`IndexedDataset`); else a
    :class:`ConfigError` naming the format and what its dataset lacks."""
    if isinstance(dataset, IterableDataset):
        if not isinstance(dataset, StreamedDataset) or not isinstance(dataset.num_indices, int):
            raise ConfigError(
                f"dataset={name}: its {type(dataset).__name__} streams samples but has no integer num_indices "
                "(how many persistent indices its samples carry)"
            )
        return dataset
    if not isinstance(dataset, IndexedDataset):
        raise ConfigError(
            f"dataset={name}: its builder gave a {type(dataset).__name__}, which is neither a map-style dataset "
            "(__len__, __getitem__) nor a torch IterableDataset with num_indices"
        )
    return dataset


def _subset(dataset: data.TrainingData, size: int, seed: int) -> data.TensorImageDataset:
    """A seeded random ``size`` of an in-memory dataset; indices are positions in the subset."""
    if not isinstance(dataset, data.TensorImageDataset):
        in_memory = [name for name in FORMATS if FORMATS[name].in_memory]
        raise ConfigError("train_subset applies to in-memory datasets (" + ", ".join(in_memory) + ")")
    if not 2 <= size <= len(dataset):
        raise ConfigError(f"train_subset must be in [2, {len(dataset)}], got {size}")
    chosen = torch.randperm(len(dataset), generator=torch.Generator().manual_seed(seed))[:size].sort().values
    captions = None if dataset.captions is None else [dataset.captions[i] for i in chosen.tolist()]
    return data.TensorImageDataset(dataset.images[chosen], dataset.labels[chosen], captions, classes=dataset.classes)


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


def training_data_facts(dataset: data.TrainingData) -> tuple[tuple[int, int, int], int]:
    """What a run's model and objective need of its training data, kept in its folder: the images' (C, H, W) and
    the number of samples (:func:`dataset_size`)."""
    channels, height, width = first_sample(dataset)["image"].shape
    return (channels, height, width), dataset_size(dataset)


def build_augmentation(config: TrainConfig) -> nn.Module:
    return data.Augmentation(config.augment, noise_eta=config.noise_eta)
