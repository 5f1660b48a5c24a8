"""Datasets, their bad-data reports, generated captions, noise injection and augmentations.

Every dataset yields :class:`~uncurated.data.base.Sample` dictionaries with a
persistent ``index``. In memory, with a batched ``batch(indices)`` fast path:
:class:`TensorImageDataset` and its loaders (:func:`fashion_mnist_dataset`,
:func:`fashion_clutter_dataset`, :func:`mnist_dataset`, :func:`digits_dataset`) and :class:`FashionCaptions`
(GENERATED captions, with simulated web-data damage). Read from files, with
bad items skipped and reported (:mod:`uncurated.data.skip`):
:class:`ImageFolderDataset`, :class:`CsvImageTextDataset` and the streamed
:class:`WebDatasetShards`, batched with :func:`collate_samples`.
"""

from .augment import PRESETS as AUGMENTATION_PRESETS
from .augment import Augmentation, AugmentationConfig
from .base import Sample
from .captions import FashionCaptions, class_prompts, fashion_captions_dataset
from .collate import collate_samples
from .csv_dataset import CsvImageTextDataset
from .digits import digits_dataset
from .fashion_clutter import ClutterDesign, fashion_clutter_dataset
from .fashion_mnist import (
    CLASS_NAMES,
    CONFUSABLE_GROUPS,
    DEFAULT_ROOT,
    RELATED_CLASSES,
    fashion_mnist_dataset,
    load_fashion_mnist,
)
from .idx import read_idx, write_idx
from .image_folder import ImageFolderDataset
from .mnist import load_mnist, mnist_dataset
from .noise import flip_labels
from .skip import REASONS, BadSample, Skip, SkipCounts, SkipLimitExceeded, SkipReport
from .spurious import GROUP_NAMES, TARGET_CLASSES, SpuriousFashion, spurious_captions_dataset, target_prompts
from .tensor_dataset import TensorImageDataset
from .webdataset import WebDatasetShards, expand_shards

#: A dataset the training reads: held in memory (batched), files read item by item, or a stream of tar shards.
TrainingData = TensorImageDataset | ImageFolderDataset | CsvImageTextDataset | WebDatasetShards

__all__ = [
    "GROUP_NAMES",
    "TARGET_CLASSES",
    "SpuriousFashion",
    "spurious_captions_dataset",
    "target_prompts",
    "AUGMENTATION_PRESETS",
    "CLASS_NAMES",
    "ClutterDesign",
    "CONFUSABLE_GROUPS",
    "DEFAULT_ROOT",
    "REASONS",
    "RELATED_CLASSES",
    "Augmentation",
    "AugmentationConfig",
    "BadSample",
    "CsvImageTextDataset",
    "FashionCaptions",
    "ImageFolderDataset",
    "Sample",
    "Skip",
    "SkipCounts",
    "SkipLimitExceeded",
    "SkipReport",
    "TensorImageDataset",
    "TrainingData",
    "WebDatasetShards",
    "class_prompts",
    "collate_samples",
    "digits_dataset",
    "expand_shards",
    "fashion_captions_dataset",
    "fashion_clutter_dataset",
    "fashion_mnist_dataset",
    "flip_labels",
    "load_fashion_mnist",
    "load_mnist",
    "mnist_dataset",
    "read_idx",
    "write_idx",
]
