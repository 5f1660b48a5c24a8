"""From a configuration to the parts of a run: datasets, model, objective, augmentation."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn
from torch.utils.data import IterableDataset

from .. import data, objectives
from ..models import (
    MLP,
    CaptionEncoder,
    CaptionTokenizer,
    ImageTextModel,
    ImageTower,
    PointSetHead,
    PointSetImageModel,
    PointSetImageTextModel,
    ProjectionHead,
    ResNet,
    TextTower,
    TextTransformer,
)
from ..similarity import CombinedKernel, WPSEmbedding
from ..similarity.kernels import NONLINEAR_KERNELS
from ..models.contrastive import FEATURE_LAYERS
from ..validation import check_choice
from .config import ConfigError, TrainConfig

PIPELINES = ("two_view", "image_text")
IMAGE_ENCODERS = ("resnet", "mlp")
TEXT_ENCODERS = ("transformer", "minilm")
IN_MEMORY = ("fashion-mnist", "mnist", "digits", "fashion-captions", "fashion-spurious")
FROM_FILES = ("image-folder", "csv", "webdataset")
DATASETS = IN_MEMORY + FROM_FILES

#: Captions read from streamed data to build the text tower's vocabulary.
VOCABULARY_SAMPLES = 50_000


@dataclass
class Splits:
    """The training set and, where the format has one, the labelled test set used for evaluation."""

    train: object
    test: object | None


def build_splits(config: TrainConfig) -> Splits:
    """The datasets ``config`` names (``dataset``, ``data_dir`` and the data keys)."""
    name = _choice("dataset", config.dataset, DATASETS)
    root = config.data_dir or None
    if name == "fashion-mnist":
        splits = Splits(*(data.fashion_mnist_dataset(root, split) for split in ("train", "test")))
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


def _subset(dataset, size: int, seed: int) -> data.TensorImageDataset:
    """A seeded random ``size`` of an in-memory dataset; indices are positions in the subset."""
    if not isinstance(dataset, data.TensorImageDataset):
        raise ConfigError("train_subset applies to in-memory datasets (" + ", ".join(IN_MEMORY) + ")")
    if not 2 <= size <= len(dataset):
        raise ConfigError(f"train_subset must be in [2, {len(dataset)}], got {size}")
    chosen = torch.randperm(len(dataset), generator=torch.Generator().manual_seed(seed))[:size].sort().values
    captions = None if dataset.captions is None else [dataset.captions[i] for i in chosen.tolist()]
    return data.TensorImageDataset(
        dataset.images[chosen], dataset.labels[chosen], captions, classes=dataset.classes
    )


def _file_dataset(name: str, config: TrainConfig):
    """A dataset read from files, reporting the items it cannot read against ``max_skipped_fraction``."""
    root = _required_root(config)
    options = {
        "mode": config.image_mode,
        "size": config.image_size or None,
        "report": data.SkipReport(max_fraction=config.max_skipped_fraction, key="max_skipped_fraction"),
    }
    if name == "image-folder":
        return data.ImageFolderDataset(root, **options)
    if name == "csv":
        return data.CsvImageTextDataset(
            root, img_key=config.csv_img_key, caption_key=config.csv_caption_key, sep=config.csv_separator, **options
        )
    return data.WebDatasetShards(root, samples_per_shard=config.samples_per_shard, seed=config.seed, **options)


def first_sample(dataset) -> dict:
    """The first sample the dataset can read (file datasets may skip bad ones)."""
    items = iter(dataset) if isinstance(dataset, IterableDataset) else (dataset[i] for i in range(len(dataset)))
    for sample in items:
        if sample is not None:
            return sample
    raise ConfigError("the training data holds no readable sample")


def dataset_size(dataset) -> int:
    """The number of persistent indices: the per-sample state of the global objectives has one row each."""
    return dataset.num_indices if isinstance(dataset, IterableDataset) else len(dataset)


def build_model(config: TrainConfig, train_set) -> nn.Module:
    """The image tower (two views) or image and text towers (image-text) ``config`` describes."""
    pipeline = _choice("pipeline", config.pipeline, PIPELINES)
    channels, height, width = first_sample(train_set)["image"].shape
    kind = _choice("image_encoder", config.image_encoder, IMAGE_ENCODERS)
    if kind == "resnet":
        encoder = ResNet(channels, widths=tuple(config.widths), blocks=tuple(config.blocks), pool=config.pool)
    else:
        encoder = MLP(channels * height * width, widths=tuple(config.widths), norm=config.norm)
    _choice("probe_layer", config.probe_layer, FEATURE_LAYERS)
    if config.probe_layer == "stages" and kind != "resnet":
        raise ConfigError("probe_layer=stages reads the ResNet's stages; use probe_layer=encoder with an MLP")
    if config.point_sets:
        return _point_set_model(config, encoder, train_set)
    image = ImageTower(encoder, _projection(config, encoder.feature_dim))
    if pipeline == "two_view":
        return image
    return ImageTextModel(image, _text_tower(config, train_set))


def _point_set_model(config: TrainConfig, encoder: nn.Module, train_set) -> nn.Module:
    """WPSE (seed 002): every cell of the last feature map, and every caption token, a weighted point."""
    if config.image_encoder != "resnet":
        raise ConfigError("point_sets=true reads the cells of a ResNet's feature map; use image_encoder=resnet")
    kernel = _choice("wpse_kernel", config.wpse_kernel, tuple(NONLINEAR_KERNELS))
    embedding = WPSEmbedding(
        CombinedKernel(1.0, 1.0, NONLINEAR_KERNELS[kernel]()),
        train_features=config.wpse_features,
        pooling=config.wpse_pooling,
        seed=config.seed,
    )
    image_head = PointSetHead(config.widths[-1], config.projection_dim)
    if config.pipeline == "two_view":
        return PointSetImageModel(encoder, image_head, embedding)
    text = _text_tower(config, train_set).encoder
    if not isinstance(text, CaptionEncoder):
        raise ConfigError("point_sets=true reads every caption token; use text_encoder=transformer")
    return PointSetImageTextModel(encoder, image_head, text, PointSetHead(config.text_width, config.projection_dim), embedding)


def build_objective(config: TrainConfig, train_set) -> nn.Module:
    """The objective ``config`` names, with the pairing of its pipeline unless given."""
    name, params = config.objective_spec()
    params.setdefault("pairing", "two_view" if config.pipeline == "two_view" else "cross")
    if config.point_sets:
        # WPSE normalizes its points, never the pooled vectors, and learns 1/t itself in [1, 100].
        params.setdefault("normalize", False)
        if params.get("learnable"):
            params.setdefault("temperature_parametrization", "identity")
    spec = {spec.name: spec for spec in objectives.available()}.get(name)
    if spec is not None and spec.stateful:
        params.setdefault("num_samples", dataset_size(train_set))
    try:
        return objectives.build(name, **params)
    except ValueError as error:
        raise ConfigError(f"objective: {error}") from error


def build_augmentation(config: TrainConfig) -> nn.Module:
    return data.Augmentation(config.augment, noise_eta=config.noise_eta)


def _projection(config: TrainConfig, in_dim: int) -> ProjectionHead:
    return ProjectionHead(in_dim, config.projection_dim, layers=config.projection_layers)


def _text_tower(config: TrainConfig, train_set) -> nn.Module:
    kind = _choice("text_encoder", config.text_encoder, TEXT_ENCODERS)
    if kind == "minilm":  # pretrained: it needs no vocabulary from the captions
        from ..models import FrozenTextTower, MiniLMTextEncoder

        return FrozenTextTower(MiniLMTextEncoder(), config.projection_dim)
    captions = getattr(train_set, "captions", None)
    if captions is None and isinstance(train_set, IterableDataset):
        captions = _streamed_captions(train_set, VOCABULARY_SAMPLES)
    if captions is None:
        raise ConfigError("text_encoder=transformer builds its vocabulary from the training captions; "
                          f"dataset={config.dataset} holds none in memory")
    tokenizer = CaptionTokenizer.build(captions)
    transformer = TextTransformer(
        len(tokenizer),
        width=config.text_width,
        layers=config.text_layers,
        heads=config.text_heads,
        max_length=config.max_caption_length,
    )
    encoder = CaptionEncoder(tokenizer, transformer, config.max_caption_length)
    return TextTower(encoder, _projection(config, encoder.feature_dim))


def _streamed_captions(dataset: IterableDataset, count: int) -> list[str]:
    """The captions of the first ``count`` readable samples of streamed data (to build a vocabulary)."""
    captions = []
    for sample in dataset:
        if sample is not None and "caption" in sample:
            captions.append(sample["caption"])
            if len(captions) >= count:
                break
    return captions


def _choice(key: str, value: str, choices: tuple[str, ...]) -> str:
    try:
        return check_choice(key, value, choices)
    except ValueError as error:
        raise ConfigError(str(error)) from error


def _required_root(config: TrainConfig) -> str:
    if not config.data_dir:
        raise ConfigError(f"dataset={config.dataset} needs data_dir=PATH")
    return config.data_dir
