"""Backbones from Hugging Face ``transformers``: standard architectures built from their configuration
class (random weights), or loaded with their weights from a local ``save_pretrained`` folder.

Nothing is downloaded: a folder is read with ``local_files_only=True``, its
weights only from ``model.safetensors`` (``use_safetensors=True``: a pickled
``pytorch_model.bin`` is refused, never unpickled) and never with code the
folder names (``trust_remote_code=False``).

**Architectures built from a configuration class** (:data:`IMAGE_ARCHITECTURES`,
:data:`TEXT_ARCHITECTURES`); the class's defaults are the standard model
(``ResNetConfig()`` is ResNet-50, ``ViTConfig()`` ViT-B/16, ``CLIPVisionConfig()``
CLIP's ViT-B/32 tower, ``SiglipVisionConfig()`` SigLIP's B/16, ``BertConfig()``
BERT-base, ``DistilBertConfig()`` DistilBERT, ``CLIPTextConfig()`` CLIP's text
transformer) and any field can be overridden.

**Which output becomes the features** (``pooling="auto"``, :func:`auto_pooling`):

- ResNet: ``pooler_output``, the global average of the last stage (2048-d for ResNet-50);
- ViT: the ``[CLS]`` token of ``last_hidden_state`` (after the final layer
  norm; ViT's own pooler, a dense + tanh layer meant for fine-tuning, is left
  out, as timm's ViT with ``num_classes=0`` does);
- CLIP vision: ``pooler_output``, the layer-normed ``[CLS]`` token (CLIP's);
- SigLIP vision: ``pooler_output``, its attention-pooling head;
- CLIP text: ``pooler_output``, the end-of-text token's output (CLIP's);
- BERT, DistilBERT and any other text model: the mean of ``last_hidden_state``
  over the real tokens (sentence-transformers' pooling, and this library's
  :class:`~uncurated.models.TextTransformer`'s);
- any other image model: ``pooler_output`` when it has one, else the mean over tokens.

``pooling="pooler"``, ``"cls"`` or ``"mean"`` picks one explicitly. The
projection head that follows is the run's :class:`~uncurated.models.ProjectionHead`
(``projection_layers=1``: one linear map, CLIP's).

Images enter as (B, C, H, W) in [0, 1] and are normalized inside the encoder
with the backbone's mean and std (:func:`image_preprocessing`), so the data,
augmentations and raw-pixel baselines stay in [0, 1].
"""

from __future__ import annotations

import difflib
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor, nn

from ..extras import require
from ..model_defaults import HF_POOLINGS as POOLINGS
from ..validation import check_choice, check_integer
from .subword_tokenizer import SubwordTokenizer

if TYPE_CHECKING:  # the hf extra: imported only where a backbone is built
    from transformers import PreTrainedModel

#: ``hf:NAME`` image architectures: (configuration class, model class) in ``transformers``.
IMAGE_ARCHITECTURES = {
    "resnet": ("ResNetConfig", "ResNetModel"),
    "vit": ("ViTConfig", "ViTModel"),
    "clip-vision": ("CLIPVisionConfig", "CLIPVisionModel"),
    "siglip-vision": ("SiglipVisionConfig", "SiglipVisionModel"),
}
#: ``hf:NAME`` text architectures: (configuration class, model class) in ``transformers``.
TEXT_ARCHITECTURES = {
    "bert": ("BertConfig", "BertModel"),
    "distilbert": ("DistilBertConfig", "DistilBertModel"),
    "clip-text": ("CLIPTextConfig", "CLIPTextModel"),
}

#: Model types whose features are their ``pooler_output`` (the rest: see :func:`auto_pooling`).
_POOLER_TYPES = {"resnet", "clip_vision_model", "siglip_vision_model", "clip_text_model", "siglip_text_model"}
#: The input size of image models whose configuration has none (ResNet's ImageNet resolution).
DEFAULT_IMAGE_SIZE = 224


def transformers_module() -> Any:
    """``transformers``, imported on first use, or :class:`~uncurated.extras.MissingExtraError` naming the extra."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    return require("transformers", "hf", "hf: encoders")


def auto_pooling(model_type: str, text: bool) -> str:
    """The features ``pooling="auto"`` reads for a model type (the module's documentation)."""
    if model_type in _POOLER_TYPES:
        return "pooler"
    if text:
        return "mean"
    return "cls" if model_type == "vit" else "pooler"


@dataclass(frozen=True)
class ImagePreprocessing:
    """What an image backbone expects: square inputs of ``size`` pixels, normalized by ``mean`` and ``std``."""

    size: int
    mean: tuple[float, ...]
    std: tuple[float, ...]


def image_preprocessing(source: str, overrides: dict[str, Any] | None = None) -> ImagePreprocessing:
    """The input size, mean and std of ``hf:source`` (an architecture of :data:`IMAGE_ARCHITECTURES` or a folder).

    A folder's ``preprocessor_config.json`` (read as JSON) gives them when it
    has them (``crop_size``, else ``size``; ``image_mean``, ``image_std``);
    otherwise they are the defaults of the architecture's image processor in
    ``transformers``: ImageNet's mean and std for ResNet, CLIP's for CLIP, 0.5
    for ViT and SigLIP; the size is the configuration's ``image_size`` (224 without one).
    """
    transformers_module()  # sets HF_HUB_OFFLINE before transformers is first imported
    constants = require("transformers.utils.constants", "hf", "hf: encoders")
    config = _image_config(source, overrides or {})
    model_type = config.model_type
    mean, std = {
        "resnet": (constants.IMAGENET_DEFAULT_MEAN, constants.IMAGENET_DEFAULT_STD),
        "clip_vision_model": (constants.OPENAI_CLIP_MEAN, constants.OPENAI_CLIP_STD),
    }.get(model_type, (constants.IMAGENET_STANDARD_MEAN, constants.IMAGENET_STANDARD_STD))
    size = getattr(config, "image_size", None) or DEFAULT_IMAGE_SIZE
    processor = Path(source) / "preprocessor_config.json" if source not in IMAGE_ARCHITECTURES else None
    if processor is not None and processor.is_file():
        settings = json.loads(processor.read_text(encoding="utf-8"))
        mean, std = settings.get("image_mean", mean), settings.get("image_std", std)
        shape = settings.get("crop_size") or settings.get("size") or {}
        shape = shape if isinstance(shape, dict) else {"height": shape}
        size = shape.get("height") or shape.get("shortest_edge") or size
    return ImagePreprocessing(int(size), tuple(float(v) for v in mean), tuple(float(v) for v in std))


class HFImageEncoder(nn.Module):
    """A ``transformers`` image model as an encoder: images in [0, 1] in, pooled features out.

    Args:
        model: the ``transformers`` model (``pixel_values`` in, ``last_hidden_state`` out).
        preprocessing: its mean and std (:func:`image_preprocessing`); the size is the data's business.
        pooling: one of :data:`POOLINGS` (the module's documentation).

    Attributes:
        feature_dim: the size of the pooled features (and of each token).

    Gray images (C = 1) are repeated to the model's channels when it has three.
    Images of another size than the configuration's reach position-embedded
    models with ``interpolate_pos_encoding=True``.
    """

    def __init__(self, model: PreTrainedModel, preprocessing: ImagePreprocessing, pooling: str = "auto") -> None:
        super().__init__()
        check_choice("pooling", pooling, POOLINGS)
        self.model = model
        config = model.config
        self.channels = getattr(config, "num_channels", 3)
        self.pooling = auto_pooling(config.model_type, text=False) if pooling == "auto" else pooling
        sizes = getattr(config, "hidden_sizes", None)
        self.feature_dim = sizes[-1] if sizes else config.hidden_size
        stats = [torch.tensor(values) for values in (preprocessing.mean, preprocessing.std)]
        if self.channels != len(preprocessing.mean):  # a one-channel model: the average channel's statistics
            stats = [values.mean().expand(self.channels).clone() for values in stats]
        self.register_buffer("mean", stats[0].view(1, -1, 1, 1), persistent=False)
        self.register_buffer("std", stats[1].view(1, -1, 1, 1), persistent=False)
        import inspect

        self._interpolates = "interpolate_pos_encoding" in inspect.signature(model.forward).parameters

    mean: Tensor  # buffers: the preprocessing's per-channel statistics
    std: Tensor

    def forward(self, images: Tensor) -> Tensor:
        return self._pool(self._outputs(images))

    def tokens(self, images: Tensor) -> Tensor:
        """Every token (B, M, feature_dim): a transformer's sequence, or a convolutional map's cells."""
        hidden = self._outputs(images).last_hidden_state
        return hidden.flatten(2).transpose(1, 2) if hidden.ndim == 4 else hidden

    def forward_stages(self, images: Tensor) -> list[Tensor]:
        """Every stage's (or layer's) output averaged over its cells or tokens, for probes."""
        hidden = self._outputs(images, stages=True).hidden_states[1:]  # [0] is the embedding, before any stage
        return [state.mean(dim=(2, 3)) if state.ndim == 4 else state.mean(dim=1) for state in hidden]

    def _outputs(self, images: Tensor, stages: bool = False):
        if images.ndim != 4 or images.shape[1] not in (1, self.channels):
            raise ValueError(f"images must have shape (B, {self.channels}, H, W), got {tuple(images.shape)}")
        images = images.expand(-1, self.channels, -1, -1)
        pixels = (images - self.mean.to(images.dtype)) / self.std.to(images.dtype)
        options = {"interpolate_pos_encoding": True} if self._interpolates else {}
        return self.model(pixel_values=pixels, output_hidden_states=stages, **options)

    def _pool(self, outputs) -> Tensor:
        if self.pooling == "pooler":
            if outputs.pooler_output is None:
                raise ValueError(f"pooling='pooler': {type(self.model).__name__} has no pooler_output")
            return outputs.pooler_output.flatten(1)
        hidden = outputs.last_hidden_state
        if hidden.ndim == 4:  # a convolutional map: cls has no meaning, mean is global average pooling
            return hidden.mean(dim=(2, 3))
        return hidden[:, 0] if self.pooling == "cls" else hidden.mean(dim=1)


class HFTextEncoder(nn.Module):
    """A ``transformers`` text model and its tokenizer: captions in, pooled features out.

    Args:
        model: the ``transformers`` model (``input_ids`` and ``attention_mask`` in).
        tokenizer: a :class:`~uncurated.models.SubwordTokenizer`.
        max_length: the most tokens a caption keeps, special tokens included, >= 2.
        pooling: one of :data:`POOLINGS` (the module's documentation).

    The tokenizer travels with the module's ``state_dict`` (as extra state), so
    a saved model reads captions the way it was trained to.
    """

    def __init__(
        self, model: PreTrainedModel, tokenizer: SubwordTokenizer, max_length: int, pooling: str = "auto"
    ) -> None:
        super().__init__()
        check_choice("pooling", pooling, POOLINGS)
        self.model = model
        self.tokenizer = tokenizer
        self.max_length = check_integer("max_length", max_length, 2)
        self.pooling = auto_pooling(model.config.model_type, text=True) if pooling == "auto" else pooling
        self.feature_dim = _hidden_size(model.config)

    def forward(self, captions: list[str]) -> Tensor:
        outputs, mask = self._outputs(captions)
        if self.pooling == "pooler":
            if getattr(outputs, "pooler_output", None) is None:
                raise ValueError(f"pooling='pooler': {type(self.model).__name__} has no pooler_output")
            return outputs.pooler_output
        hidden = outputs.last_hidden_state
        if self.pooling == "cls":
            return hidden[:, 0]
        weights = mask.unsqueeze(2).to(hidden.dtype)
        return (hidden * weights).sum(dim=1) / weights.sum(dim=1).clamp(min=1e-9)

    def tokens(self, captions: list[str]) -> tuple[Tensor, Tensor]:
        """Every token's output (B, L, feature_dim) and the mask of real tokens (B, L), for point-set heads."""
        outputs, mask = self._outputs(captions)
        return outputs.last_hidden_state, mask

    def _outputs(self, captions: list[str]):
        ids, mask = self.tokenizer.encode(captions, self.max_length)
        device = next(self.model.parameters()).device
        ids, mask = ids.to(device), mask.to(device)
        return self.model(input_ids=ids, attention_mask=mask.long()), mask

    def get_extra_state(self) -> dict:
        return self.tokenizer.state_dict()

    def set_extra_state(self, state: dict) -> None:
        self.tokenizer = SubwordTokenizer.from_state_dict(state)


def build_image_model(source: str, overrides: dict[str, Any], *, channels: int, size: int) -> PreTrainedModel:
    """The image model of ``hf:source``: an architecture built for ``channels`` x ``size`` x ``size`` inputs
    (unless ``overrides`` set ``num_channels`` or ``image_size``), or a folder's model with its weights."""
    if source in IMAGE_ARCHITECTURES:
        config_name, model_name = IMAGE_ARCHITECTURES[source]
        fitted = {"num_channels": channels, "image_size": size}
        config = _new_config(config_name, {**_known(config_name, fitted), **overrides}, source)
        return getattr(transformers_module(), model_name)(config)
    return _load_folder(source, overrides, side="vision")


def build_text_model(
    source: str, overrides: dict[str, Any], tokenizer: SubwordTokenizer, max_length: int
) -> PreTrainedModel:
    """The text model of ``hf:source``: an architecture sized for ``tokenizer``'s vocabulary (ids of its
    [PAD], [CLS] and [SEP] tokens set), or a folder's model with its weights."""
    if source not in TEXT_ARCHITECTURES:
        return _load_folder(source, overrides, side="text")
    config_name, model_name = TEXT_ARCHITECTURES[source]
    fitted = {
        "vocab_size": len(tokenizer),
        "pad_token_id": tokenizer.pad_id,
        "bos_token_id": tokenizer.token_id("[CLS]"),
        "eos_token_id": tokenizer.token_id("[SEP]"),  # CLIP's text tower pools at its first end-of-text token
    }
    config = _new_config(config_name, {**_known(config_name, fitted), **overrides}, source)
    positions = getattr(config, "max_position_embeddings", None)
    if positions is not None and max_length > positions:
        raise ValueError(
            f"max_caption_length must be in [2, {positions}] for hf:{source} (its max_position_embeddings), "
            f"got {max_length}"
        )
    return getattr(transformers_module(), model_name)(config)


def is_folder(source: str) -> bool:
    return source not in IMAGE_ARCHITECTURES and source not in TEXT_ARCHITECTURES


def _image_config(source: str, overrides: dict[str, Any]):
    if source in IMAGE_ARCHITECTURES:
        return _new_config(IMAGE_ARCHITECTURES[source][0], overrides, source)
    return _folder_config(source, overrides, side="vision")


def _new_config(config_name: str, overrides: dict[str, Any], source: str):
    config_class = getattr(transformers_module(), config_name)
    _check_fields(config_class().to_dict(), overrides, f"hf:{source}")
    return config_class(**overrides)


def _known(config_name: str, values: dict[str, Any]) -> dict[str, Any]:
    """The entries of ``values`` that the configuration class has (ResNet has no ``image_size``)."""
    fields = getattr(transformers_module(), config_name)().to_dict()
    return {key: value for key, value in values.items() if key in fields and value is not None}


def _folder_config(folder: str, overrides: dict[str, Any], side: str):
    """The configuration of ``folder`` for one tower: a dual model's (CLIP, SigLIP) ``side`` configuration."""
    path = Path(folder)
    if not (path / "config.json").is_file():
        architectures = IMAGE_ARCHITECTURES if side == "vision" else TEXT_ARCHITECTURES
        raise ValueError(
            f"hf:{folder} must be one of {', '.join(architectures)} or a save_pretrained folder with a config.json"
        )
    config = transformers_module().AutoConfig.from_pretrained(path, local_files_only=True, trust_remote_code=False)
    config = getattr(config, f"{side}_config", None) or config
    _check_fields(config.to_dict(), overrides, f"hf:{folder}")
    for key, value in overrides.items():
        setattr(config, key, value)
    return config


def _load_folder(folder: str, overrides: dict[str, Any], side: str) -> PreTrainedModel:
    """The model saved in ``folder`` with its safetensors weights; the ``side`` tower of a dual model."""
    transformers = transformers_module()
    config = _folder_config(folder, overrides, side)
    if (
        not (Path(folder) / "model.safetensors").is_file()
        and not (Path(folder) / "model.safetensors.index.json").is_file()
    ):
        raise ValueError(
            f"hf:{folder} has no model.safetensors: only safetensors weights are read (a pickled "
            "pytorch_model.bin could run code); convert it with save_pretrained(folder, safe_serialization=True)"
        )
    model_class = transformers.AutoModel._model_mapping[type(config)]
    return model_class.from_pretrained(
        folder, config=config, local_files_only=True, use_safetensors=True, trust_remote_code=False
    )


def _check_fields(fields: dict[str, Any], overrides: dict[str, Any], source: str) -> None:
    for key in overrides:
        if key not in fields:
            close = difflib.get_close_matches(key, fields, n=3)
            hint = f"; did you mean {', '.join(close)}?" if close else ""
            raise ValueError(f"{source} has no configuration field {key!r}{hint}")


def _hidden_size(config) -> int:
    for name in ("hidden_size", "dim", "d_model"):
        if isinstance(getattr(config, name, None), int):
            return getattr(config, name)
    raise ValueError(f"cannot tell the hidden size of a {type(config).__name__}")
