"""The towers of a run from the configuration's model keys: registered, ``hf:`` and ``python:`` encoders, the
projection heads, WPSE's point-set heads, and the text tower's tokenizer."""

from __future__ import annotations

from pathlib import Path
from typing import Any, cast

import torch
from torch import nn
from torch.utils.data import IterableDataset

from ... import data
from ...data.decode import decode_caption
from ...models import (
    FrozenTextTower,
    ImageTextModel,
    ImageTower,
    PointSetHead,
    PointSetImageModel,
    PointSetImageTextModel,
    ProjectionHead,
    ResNet,
    TextTower,
)
from ...models.encoders import ImageTokenEncoder, StagedEncoder, TextTokenEncoder
from ...models.factory import load_factory, split_source
from ...similarity import CombinedKernel, WPSEmbedding
from ...similarity.kernels import NONLINEAR_KERNELS
from ..config import ConfigError, TrainConfig, as_config_error
from ..image_encoders import IMAGE_ENCODERS
from ..registry import Registry
from ..setting import NoOptions, own_keys
from ..text_encoders import TEXT_ENCODERS
from .datasets import first_sample

#: The file in a run's folder holding the subword tokenizer of a text tower trained from scratch
#: (a registered text encoder that ``trains_tokenizer``, as ``transformer``, or an ``hf:`` architecture).
TOKENIZER_FILE = "tokenizer.json"

#: Captions read from streamed data to build the text tower's vocabulary.
VOCABULARY_SAMPLES = 50_000


def build_model(
    config: TrainConfig,
    train_set,
    *,
    tokenizer_path: Path | None = None,
    tokenizer=None,
    image_shape: tuple[int, int, int] | None = None,
) -> nn.Module:
    """The image tower (two views) or image and text towers (image-text) ``config`` describes.

    ``tokenizer_path``: where the run keeps the subword tokenizer of a text
    tower trained from scratch (:func:`save_run_tokenizer` writes it);
    without it, or while it does not exist, ``tokenizer`` is used (an earlier
    run's, read from its checkpoint), else one is trained on the captions.
    ``image_shape``: the (C, H, W) of the training images, else read from
    ``train_set``'s first sample; with it and a tokenizer, ``train_set`` may
    be ``None`` (a run restored from its folder alone).
    """
    pipeline = config.pipeline
    sample_shape = torch.Size(image_shape) if image_shape is not None else first_sample(train_set)["image"].shape
    encoder = _image_encoder(config, sample_shape)
    if config.probe_layer == "stages" and not isinstance(encoder, StagedEncoder):
        raise ConfigError(
            f"probe_layer=stages reads the encoder's stages; image_encoder={config.image_encoder} "
            "has none: use probe_layer=encoder"
        )
    text_tower = None if pipeline == "two_view" else _text_tower(config, train_set, tokenizer_path, tokenizer)
    model: nn.Module
    if config.point_sets:
        model = _point_set_model(config, encoder, text_tower, sample_shape)
    else:
        image = ImageTower(encoder, _projection(config, _feature_dim(encoder)))
        model = image if text_tower is None else ImageTextModel(image, text_tower)
    if config.gradient_checkpointing:
        _enable_checkpointing(model, config)
    return model


def _image_encoder(config: TrainConfig, shape: torch.Size) -> nn.Module:
    channels, height, width = shape
    kind, source = split_source(config.image_encoder)
    if kind == "hf":
        from ...models.hf import HFImageEncoder, build_image_model, image_preprocessing

        options = config.image_encoder_config
        return as_config_error(
            lambda: HFImageEncoder(
                build_image_model(source, options, channels=channels, size=height),
                image_preprocessing(source, options),
                config.image_pooling,
            )
        )
    if kind == "python":
        encoder = _factory_encoder("image_encoder", source, config.image_encoder_config)
        return _with_feature_dim(encoder, "image_encoder", lambda: torch.zeros(2, channels, height, width))
    registered, options = _registered("image_encoder", IMAGE_ENCODERS, config)
    encoder = registered.build(config, (channels, height, width), options)
    return _with_feature_dim(encoder, "image_encoder", lambda: torch.zeros(2, channels, height, width))


def _registered(key: str, registry: Registry[Any], config: TrainConfig) -> tuple[Any, Any]:
    """The registered encoder ``key`` names and its own keys (``key.FIELD``), checked by its section."""
    name = getattr(config, key)
    registered = registry[name]
    if registered.options is NoOptions:
        _no_fields(key, config)
    return registered, own_keys(key, name, registered.options, getattr(config, f"{key}_config"))


def _factory_encoder(key: str, source: str, options: dict) -> nn.Module:
    """The module ``python:source`` returns when called with the ``key.FIELD`` options as keyword arguments."""
    factory = as_config_error(lambda: load_factory(key, source))
    try:
        encoder = factory(**options)
    except TypeError as error:
        raise ConfigError(f"{key}=python:{source} refused its {key}.FIELD arguments {options}: {error}") from error
    if not isinstance(encoder, nn.Module):
        raise ConfigError(f"{key}=python:{source} must return an nn.Module, got {type(encoder).__name__}")
    return encoder


def _with_feature_dim(encoder: nn.Module, key: str, example) -> nn.Module:
    """``encoder`` with its ``feature_dim``, measured on an example input when the factory set none."""
    if not isinstance(getattr(encoder, "feature_dim", None), int):
        with torch.no_grad():
            features = encoder.eval()(example())
        encoder.train()
        if features.ndim != 2:
            raise ConfigError(f"{key}: the encoder must return (B, D) features, got shape {tuple(features.shape)}")
        encoder.feature_dim = features.shape[1]
    return encoder


def _feature_dim(encoder: nn.Module) -> int:
    """The width of ``encoder``'s features: every encoder built here has an integer ``feature_dim``."""
    width = getattr(encoder, "feature_dim", None)
    if not isinstance(width, int):
        raise ConfigError(f"{type(encoder).__name__} has no integer feature_dim (the width of its features)")
    return width


def _no_fields(key: str, config: TrainConfig) -> None:
    fields = getattr(config, f"{key}_config")
    if fields:
        raise ConfigError(
            f"{key}.FIELD applies to hf: and python: encoders (and registered encoders that declare keys); "
            f"{key}={getattr(config, key)} takes none, got {', '.join(sorted(fields))}"
        )


def _enable_checkpointing(model: nn.Module, config: TrainConfig) -> None:
    """Turn on ``transformers``' gradient checkpointing in every ``hf:`` backbone, or refuse naming the key."""
    backbones: list[Any] = [  # transformers' models (an optional package, not imported here)
        module.model
        for module in model.modules()
        if hasattr(module, "model") and hasattr(module.model, "supports_gradient_checkpointing")
    ]
    if not backbones:
        raise ConfigError("gradient_checkpointing=true applies to hf: encoders; this model has none")
    for backbone in backbones:
        if not backbone.supports_gradient_checkpointing:
            raise ConfigError(
                f"gradient_checkpointing=true: transformers' {type(backbone).__name__} does not "
                "support it (ResNet has none); use gradient_checkpointing=false"
            )
        options = {"use_reentrant": False}
        if hasattr(backbone, "activation_checkpointing_enable"):  # transformers 5's name; 4.x has the older one
            backbone.activation_checkpointing_enable(activation_checkpointing_kwargs=options)
        else:
            backbone.gradient_checkpointing_enable(gradient_checkpointing_kwargs=options)


def _point_set_model(
    config: TrainConfig, encoder: nn.Module, text_tower: TextTower | FrozenTextTower | None, sample_shape: torch.Size
) -> nn.Module:
    """WPSE (Uesaka et al. 2025): every cell of the last feature map or every image token, and every caption token,
    a weighted point (or, with ``wpse_points=pooled``, each side's pooled features the only point)."""
    if config.wpse_points == "tokens" and not isinstance(encoder, ImageTokenEncoder):
        raise ConfigError(
            "point_sets=true reads every image token or feature-map cell; "
            f"image_encoder={config.image_encoder} has none: use resnet or an hf: encoder"
        )
    nonlinear = NONLINEAR_KERNELS[config.wpse_kernel](config.wpse_kernel_scale)
    alpha1, alpha2 = config.wpse_kernel_weights
    embedding = WPSEmbedding(
        CombinedKernel(alpha1, alpha2, nonlinear),
        train_features=config.wpse_features,
        eval_features=config.wpse_eval_features,
        pooling=config.wpse_pooling,
        seed=config.seed,
    )
    pooled = config.wpse_points == "pooled"
    token_width = config.widths[-1] if isinstance(encoder, ResNet) and not pooled else _feature_dim(encoder)
    image_head = PointSetHead(
        token_width,
        config.projection_dim,
        weight_activation=config.wpse_weights,
        positions=_token_count(encoder, sample_shape)
        if config.wpse_image_positions and isinstance(encoder, ImageTokenEncoder) and not pooled
        else 0,
    )
    if text_tower is None:
        return PointSetImageModel(encoder, image_head, embedding, config.wpse_points)
    text = text_tower.encoder
    if not pooled and not isinstance(text, TextTokenEncoder):
        raise ConfigError(
            "point_sets=true reads every caption token; use text_encoder=transformer, minilm or an hf: encoder"
        )
    text_head = PointSetHead(_feature_dim(text), config.projection_dim, weight_activation=config.wpse_weights)
    return PointSetImageTextModel(encoder, image_head, text, text_head, embedding, config.wpse_points)


def _token_count(encoder: nn.Module, shape: torch.Size) -> int:
    """The number of tokens the image encoder gives for images of ``shape`` (C, H, W)."""
    training = encoder.training
    with torch.no_grad():
        count = cast(ImageTokenEncoder, encoder.eval()).tokens(torch.zeros(1, *shape)).shape[1]
    encoder.train(training)
    return count


def _projection(config: TrainConfig, in_dim: int) -> ProjectionHead:
    norm = config.norm if config.projection_norm == "auto" else config.projection_norm
    return ProjectionHead(in_dim, config.projection_dim, layers=config.projection_layers, norm=norm)


def _text_tower(
    config: TrainConfig, train_set, tokenizer_path: Path | None, tokenizer=None
) -> TextTower | FrozenTextTower:
    """The text tower of an image-text run."""
    kind, source = split_source(config.text_encoder)
    if kind == "hf":
        from ...models.hf import HFTextEncoder, build_text_model

        tokenizer = _run_tokenizer(config, source, train_set, tokenizer_path, tokenizer)
        encoder = as_config_error(
            lambda: HFTextEncoder(
                build_text_model(source, config.text_encoder_config, tokenizer, config.max_caption_length),
                tokenizer,
                config.max_caption_length,
                config.text_pooling,
            )
        )
        return TextTower(encoder, _projection(config, _feature_dim(encoder)))
    frozen = False
    if kind == "python":
        encoder = _factory_encoder("text_encoder", source, config.text_encoder_config)
    else:
        registered, options = _registered("text_encoder", TEXT_ENCODERS, config)
        if registered.trains_tokenizer:  # else it reads the captions its own way, and is given none
            tokenizer = _run_tokenizer(config, None, train_set, tokenizer_path, tokenizer)
        encoder = registered.build(config, tokenizer if registered.trains_tokenizer else None, options)
        frozen = registered.frozen
    encoder = _with_feature_dim(encoder, "text_encoder", lambda: ["a caption", "another caption"])
    if frozen:  # pretrained: only a linear projection after it trains
        return FrozenTextTower(encoder, config.projection_dim)
    return TextTower(encoder, _projection(config, _feature_dim(encoder)))


def trains_tokenizer(config: TrainConfig) -> bool:
    """Whether the run's text tower learns from scratch, on a tokenizer trained on its captions (a registered
    encoder that declares ``trains_tokenizer``, as ``transformer``, or an ``hf:`` architecture)."""
    if config.pipeline != "image_text":
        return False
    kind, source = split_source(config.text_encoder)
    if kind == "hf":
        return not _is_folder(source)
    return kind == "builtin" and TEXT_ENCODERS[config.text_encoder].trains_tokenizer


def save_run_tokenizer(config: TrainConfig, train_set, path: Path, tokenizer=None) -> None:
    """Write the run's subword tokenizer to ``path``: ``tokenizer`` when given (an earlier run's, read from its
    checkpoint), else one trained on the captions; nothing when the run has one there already (a resumed
    run reuses it) or its text tower needs none (:func:`trains_tokenizer`)."""
    if not trains_tokenizer(config) or path.is_file():
        return
    (tokenizer or _run_tokenizer(config, None, train_set, None)).save(path)


def _run_tokenizer(config: TrainConfig, source: str | None, train_set, path: Path | None, given=None):
    """A folder's own tokenizer (``source``); the run's saved one; ``given``; else WordPiece built from the
    captions (deterministically: :func:`~uncurated.models.subword_tokenizer.train_wordpiece`)."""
    from ...models.subword_tokenizer import SubwordTokenizer, train_wordpiece

    if source is not None and _is_folder(source):
        return as_config_error(lambda: SubwordTokenizer.from_folder(source))
    if path is not None and path.is_file():
        return as_config_error(lambda: SubwordTokenizer.from_file(path))
    if given is not None:
        return given
    return train_wordpiece(_training_captions(config, train_set), config.vocab_size)


def _is_folder(source: str) -> bool:
    from ...models.hf import is_folder

    return is_folder(source)


def _training_captions(config: TrainConfig, train_set) -> list[str]:
    captions = getattr(train_set, "captions", None)
    if captions is None and isinstance(train_set, IterableDataset):
        captions = _streamed_captions(train_set, VOCABULARY_SAMPLES)
    readable = []
    for caption in captions or ():
        try:
            readable.append(decode_caption(caption))
        except data.BadSample:  # not UTF-8 text, or empty: the dataset skips and reports it when training reads it
            continue
    if not readable:
        raise ConfigError(
            f"text_encoder={config.text_encoder} builds its vocabulary from the training captions; "
            f"dataset={config.dataset} holds none"
        )
    return readable


def _streamed_captions(dataset: IterableDataset, count: int) -> list[str]:
    """The captions of the first ``count`` readable samples of streamed data (to build a vocabulary)."""
    captions = []
    for sample in dataset:
        if sample is not None and "caption" in sample:
            captions.append(sample["caption"])
            if len(captions) >= count:
                break
    return captions
