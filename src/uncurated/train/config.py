"""Training configuration: YAML presets plus ``key=value`` overrides, checked key by key.

A run is described by one flat :class:`TrainConfig`. A preset (``configs/NAME.yaml``
or any YAML file) sets some keys; ``key=value`` arguments override them; the
values are parsed as YAML scalars (``lr=3e-4``, ``widths=[32,64]``,
``resume=true``) and checked against each key's type. The objective's own
parameters are written ``objective.NAME=VALUE`` (``objective.tau_plus=0.1``)
and checked by :func:`uncurated.objectives.build`, but for the engine's settings
(``objective.tiling=``, ``objective.block_size=``, ...), which every objective
takes: they are checked when the configuration is built, as one
:class:`~uncurated.engine_settings.EngineSettings` (:meth:`TrainConfig.engine_settings`). Unknown keys, wrong
types, values outside a key's range (:data:`RANGES`, checked however the
configuration is built) and text that is not YAML raise :class:`ConfigError`
naming the key. A key given more than once takes its last value, whichever
key it is: ``preset`` too (the preset read is the one ``config.yaml``
records), and ``objective.NAME=`` and an ``objective_params=`` mapping holding
``NAME`` set the same parameter, the later one winning (and likewise
``image_encoder.FIELD=`` with ``image_encoder_config=``, ``text_encoder.FIELD=``
with ``text_encoder_config=``: fields of an ``hf:`` model's configuration, or
keyword arguments of a ``python:`` factory). A resumed run may
change only the keys of :data:`RESUMABLE_CHANGES`; the others shape the saved
state. A preset's objective
parameters belong to the preset's objective: when ``objective=`` picks
another one, those the new objective does not take are left behind (the
command line's ``objective.NAME`` values are always kept, and checked).
"""

from __future__ import annotations

import dataclasses
import difflib
import math
import types
import typing
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from .. import data_defaults
from .. import model_defaults as defaults
from ..checks import choice_message
from ..engine_settings import NAMES as ENGINE_SETTINGS
from ..engine_settings import EngineSettings
from ..errors import RunStopped
from ..objective_aliases import OBJECTIVE_ALIASES as OBJECTIVE_ALIASES
from ..objective_aliases import resolve_alias

#: The presets shipped with the package (``src/uncurated/configs``).
PRESETS_DIR = Path(__file__).resolve().parents[1] / "configs"

#: ``pipeline``: two augmented views of an image, or an image and its caption.
PIPELINES = ("two_view", "image_text")
#: ``dataset``: those held in memory (packaged or read from a known file layout), and those read from files.
IN_MEMORY_DATASETS = ("fashion-mnist", "fashion-clutter", "mnist", "digits", "fashion-captions", "fashion-spurious")
FILE_DATASETS = ("image-folder", "csv", "webdataset")
DATASETS = IN_MEMORY_DATASETS + FILE_DATASETS
#: ``positives``: two views of one image, or two images of one label (:mod:`uncurated.train.supervision`).
POSITIVES = ("augmentation", "label")
#: ``precision``: bf16 autocast of the encoders, ``auto`` (bf16 on CUDA, none on the CPU), or none.
PRECISIONS = ("auto", "bf16", "fp32")
#: ``parallel``: how the towers are spread over the training processes (:mod:`uncurated.train.parallel`).
PARALLEL_MODES = ("ddp", "fsdp")


class ConfigError(RunStopped, ValueError):
    """A configuration key that does not exist, a value of the wrong type or out of its range (:data:`RANGES`)."""

    exit_status = 2
    verdict = "error"


def as_config_error(build: Callable[[], Any]) -> Any:
    """``build()``, its ``ValueError`` (a bad folder, field or factory) turned into a :class:`ConfigError`."""
    try:
        return build()
    except ConfigError:
        raise
    except ValueError as error:
        raise ConfigError(str(error)) from error


@dataclass
class TrainConfig:
    """Every setting of a training run. See ``configs/*.yaml`` for the presets."""

    # The run.
    preset: str = "fashion-mnist"
    name: str = ""
    out: str = "runs"
    seed: int = 0
    device: str = "auto"
    resume: bool = False
    progress: bool = True
    dist_timeout: float = 600.0

    # Data.
    pipeline: str = "two_view"
    dataset: str = "fashion-mnist"
    data_dir: str = ""
    augment: str = "fashion-mnist"
    noise_eta: float = 0.0
    positives: str = "augmentation"  # two views: "label" pairs each image with another of its label
    label_noise: float = 0.0  # positives=label: flip training labels to a related class w.p. eta / 2
    oracle_negatives: bool = False  # pass the batch's labels to the objective (supervised oracle)
    mismatch_fraction: float = 0.0
    mismatch_mode: str = "uniform"
    imbalance_ratio: float = 1.0
    duplicate_fraction: float = 0.0
    spurious_correlation: float = 0.95
    csv_img_key: str = "filepath"
    csv_caption_key: str = "title"
    csv_separator: str = "\t"
    image_size: int = 0
    image_mode: str = "RGB"
    image_resize: str = "auto"  # stretch | crop (shorter side, then the centre); auto: crop for hf:/python: encoders
    num_workers: int = 0  # DataLoader processes decoding files; 0 decodes in the training process
    data_on_device: bool = False  # hold in-memory training data on the training device (a GPU): no copy per batch
    samples_per_shard: int = 10000
    shard_reader: str = "tarfile"  # tarfile (strict headers) | webdataset (the library's iterator)
    shard_shuffle: bool = True  # webdataset: a new shard order each epoch, from the seed and the epoch
    shuffle_buffer: int = 1000  # webdataset: samples shuffled through a buffer of this many per reader; 0: none
    resample_shards: bool = False  # webdataset: draw shards with replacement without end (open_clip's resampling)
    steps_per_epoch: int = 0
    train_subset: int = 0
    max_skipped_fraction: float = 0.01

    # Model.
    image_encoder: str = "resnet"  # resnet | mlp | hf:ARCHITECTURE | hf:FOLDER | python:module:function
    image_encoder_config: dict[str, Any] = field(default_factory=dict)  # image_encoder.FIELD=VALUE
    image_pooling: str = "auto"  # hf: image encoders: auto | pooler | cls | mean
    widths: list[int] = field(default_factory=lambda: list(defaults.RESNET_WIDTHS))
    blocks: list[int] = field(default_factory=lambda: list(defaults.RESNET_BLOCKS))
    pool: str = defaults.RESNET_POOL
    norm: str = "batch"
    projection_norm: str = "auto"  # batch | none: the projection head's normalization; auto: norm's
    projection_dim: int = defaults.PROJECTION_DIM
    projection_layers: int = defaults.PROJECTION_LAYERS
    text_encoder: str = "transformer"  # transformer | minilm | hf:ARCHITECTURE | hf:FOLDER | python:module:function
    text_encoder_config: dict[str, Any] = field(default_factory=dict)  # text_encoder.FIELD=VALUE
    text_pooling: str = "auto"  # hf: text encoders: auto | pooler | cls | mean
    vocab_size: int = 30522  # tokens of a tokenizer trained on the captions (transformer, hf:ARCH); BERT-base's
    text_width: int = defaults.TEXT_WIDTH
    text_layers: int = defaults.TEXT_LAYERS
    text_heads: int = defaults.TEXT_HEADS
    max_caption_length: int = 24
    # WPSE (point_sets=true); the defaults are the library's (uncurated.similarity, models.point_set_head).
    point_sets: bool = False
    wpse_points: str = "tokens"  # tokens | pooled (M = 1: the encoder's pooled features, CLIP's input)
    wpse_image_positions: bool = True  # a learned embedding per image token position (a ResNet's cells have none)
    wpse_weights: str = defaults.WEIGHT_ACTIVATION  # tanh | sigmoid (the positive-weight ablation) | ones (all 1)
    wpse_kernel: str = defaults.NONLINEAR_KERNEL  # the nonlinear kernel: gaussian | imq
    wpse_kernel_scale: float = defaults.KERNEL_SCALE  # its sigma (gaussian) or c (imq)
    wpse_kernel_weights: list[float] = field(default_factory=lambda: list(defaults.KERNEL_WEIGHTS))  # alpha1, alpha2
    wpse_features: int = defaults.WPSE_TRAIN_FEATURES  # D in training, redrawn every batch
    wpse_eval_features: int = defaults.WPSE_EVAL_FEATURES  # D in evaluation, one stored draw
    wpse_pooling: str = defaults.WPSE_POOLING  # mean (the official code) | sum (the paper's Eq. 8)

    # Objective.
    objective: str = "dcl"
    objective_params: dict[str, Any] = field(default_factory=dict)

    # Optimization.
    epochs: float = 5.0
    batch_size: int = 256
    micro_batch_size: int = 0  # embed in micro-batches of this size, exact gradients (train/gradient_cache.py); 0: off
    lr: float = 1e-3
    projection_lr: float = 0.0
    weight_decay: float = 1e-6
    warmup_epochs: float = 0.5
    grad_clip: float = 0.0
    max_nonfinite_steps: int = 5
    precision: str = "auto"  # bf16 | fp32 autocast of the encoders; auto: bf16 on CUDA, fp32 elsewhere
    parallel: str = "ddp"  # under torchrun: ddp (DistributedDataParallel) | fsdp (FSDP2 shards the towers)
    sync_batch_norm: bool = False  # under torchrun on CUDA: batch-norm statistics over the global batch
    compile: str = "auto"  # true | false: torch.compile of the objective's tiles; auto: on CUDA where it compiles
    gradient_checkpointing: bool = False  # hf: encoders recompute activations in the backward pass

    # Checkpoints and logs.
    checkpoint_every: int = 0  # also a checkpoint every N steps; 0: off
    checkpoint_minutes: float = 0.0  # also one when N minutes passed since the last; 0: off
    checkpoint_each_epoch: bool = True  # one at the end of every epoch (and always at the end of the run)
    keep_checkpoints: int = 2
    log_every: int = 20

    # Evaluation at the end.
    probe_train_size: int = 20000
    probe_layer: str = "encoder"
    probe_baselines: bool = True  # also probe raw pixels and an untrained model (what training added)
    zero_shot_dir: str = ""  # image-text: zero-shot on this image folder (one subfolder per class)
    zero_shot_classes: str = ""  # its class names: imagenet1k | cifar10 | cifar100 | FILE ("": the folder names)
    zero_shot_templates: str = "imagenet1k"  # its prompt templates: imagenet1k | cifar | FILE
    retrieval_file: str = ""  # image-text: retrieval on Karpathy's dataset_*.json (test split) or a CSV
    retrieval_images: str = ""  # the folder its image paths are relative to ("": the file's folder)

    def __post_init__(self) -> None:
        """Check every key's type and range, whoever built the configuration."""
        for name, hint in _HINTS.items():
            setattr(self, name, _coerce(name, getattr(self, name), hint, "the configuration"))
        for name, (low, high) in RANGES.items():
            _check_range(name, getattr(self, name), low, high)
        for name, choices in CHOICES.items():
            if getattr(self, name) not in choices:
                _refuse_choice(name, getattr(self, name), choices)
        for name, builtins in ENCODER_CHOICES.items():
            _check_encoder(name, getattr(self, name), builtins)
        self.engine_settings()
        alphas = self.wpse_kernel_weights
        if len(alphas) != 2 or not any(alphas):
            raise ConfigError(f"wpse_kernel_weights must be [alpha1, alpha2], not both 0, got {alphas!r}")
        if self.micro_batch_size and self.point_sets:
            raise ConfigError(
                "micro_batch_size applies to point_sets=false: WPSE draws its random features once per call, and "
                "micro-batches embedded in separate calls would not share one draw"
            )

    def objective_spec(self) -> tuple[str, dict[str, Any]]:
        """The registry name and parameters of the objective, aliases resolved."""
        name, implied = resolve_alias(self.objective)
        return name, {**implied, **self.objective_params}

    def engine_settings(self) -> EngineSettings:
        """The objective's engine settings: its ``objective.NAME`` keys of
        :class:`~uncurated.engine_settings.EngineSettings`, and ``compile`` where ``objective.compile`` is not
        given; :class:`ConfigError` naming the key where one is out of its range."""
        given = {key: value for key, value in self.objective_params.items() if key in ENGINE_SETTINGS}
        if self.compile != "auto":
            given.setdefault("compile", self.compile == "true")
        try:
            return EngineSettings(**given)
        except ValueError as error:
            raise ConfigError(f"objective.{error}") from None

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


#: The accepted range of each numeric key, ``(low, high)`` with ``None`` for no bound, both ends included
#: (``epochs`` and ``dist_timeout`` must be above 0); the items of a list key share its range. Floats must be finite.
RANGES: dict[str, tuple[float | None, float | None]] = {
    "seed": (0, None),
    "dist_timeout": (0.0, None),
    "noise_eta": (0.0, 1.0),
    "label_noise": (0.0, 1.0),
    "mismatch_fraction": (0.0, 1.0),
    "imbalance_ratio": (1.0, None),
    "duplicate_fraction": (0.0, 1.0),
    "spurious_correlation": (0.0, 1.0),
    "image_size": (0, None),
    "samples_per_shard": (1, None),
    "shuffle_buffer": (0, None),
    "steps_per_epoch": (0, None),
    "train_subset": (0, None),
    "max_skipped_fraction": (0.0, 1.0),
    "widths": (1, None),
    "blocks": (1, None),
    "projection_dim": (1, None),
    "projection_layers": (1, 2),
    "text_width": (1, None),
    "text_layers": (1, None),
    "text_heads": (1, None),
    "max_caption_length": (1, None),
    "vocab_size": (16, None),
    "num_workers": (0, None),
    "wpse_kernel_scale": (0.0, None),
    "wpse_kernel_weights": (0.0, None),
    "wpse_features": (1, None),
    "wpse_eval_features": (1, None),
    "epochs": (0.0, None),
    "batch_size": (2, None),
    "micro_batch_size": (0, None),
    "lr": (0.0, None),
    "projection_lr": (0.0, None),
    "weight_decay": (0.0, None),
    "warmup_epochs": (0.0, None),
    "grad_clip": (0.0, None),
    "max_nonfinite_steps": (0, None),
    "checkpoint_every": (0, None),
    "checkpoint_minutes": (0.0, None),
    "keep_checkpoints": (1, None),
    "log_every": (1, None),
    "probe_train_size": (0, None),
}
#: ``compile``: ``true`` or ``false`` sets the objective's ``compile`` (unless ``objective.compile`` does);
#: ``auto`` leaves the objective's default (compiled on CUDA where Triton is installed, not on the CPU).
COMPILE_CHOICES = ("auto", "true", "false")
#: Keys that must be above their lower bound, not equal to it.
_OPEN_BELOW = {"epochs", "dist_timeout", "wpse_kernel_scale"}

#: The accepted values of keys that name a choice of the library (checked however the configuration is built).
#: ``objective`` is checked against the objectives' registry (:func:`uncurated.objectives.build`), and the keys
#: that may also name a file or a device (``device``, ``zero_shot_classes``, ``zero_shot_templates``) where they
#: are used.
CHOICES: dict[str, tuple[str, ...]] = {
    "pipeline": PIPELINES,
    "dataset": DATASETS,
    "augment": data_defaults.AUGMENTATIONS,
    "positives": POSITIVES,
    "mismatch_mode": data_defaults.MISMATCH_MODES,
    "image_mode": data_defaults.IMAGE_MODES,
    "image_resize": ("auto", *data_defaults.RESIZES),
    "shard_reader": data_defaults.SHARD_READERS,
    "image_pooling": defaults.HF_POOLINGS,
    "pool": defaults.RESNET_POOLINGS,
    "norm": defaults.NORMS,
    "projection_norm": ("auto", *defaults.NORMS),
    "text_pooling": defaults.HF_POOLINGS,
    "wpse_points": defaults.POINTS,
    "wpse_weights": defaults.WEIGHT_ACTIVATIONS,
    "wpse_kernel": defaults.NONLINEAR_KERNEL_NAMES,
    "wpse_pooling": defaults.WPSE_POOLINGS,
    "precision": PRECISIONS,
    "parallel": PARALLEL_MODES,
    "compile": COMPILE_CHOICES,
    "probe_layer": defaults.FEATURE_LAYERS,
}
#: Keys naming an encoder: a built-in one, or one of :data:`~uncurated.model_defaults.ENCODER_PREFIXES` followed
#: by its source (``hf:bert``, ``hf:/models/vit``, ``python:package.module:factory``).
ENCODER_CHOICES: dict[str, tuple[str, ...]] = {
    "image_encoder": defaults.IMAGE_ENCODERS,
    "text_encoder": defaults.TEXT_ENCODERS,
}


def _refuse_choice(key: str, value: Any, choices: tuple[str, ...]) -> None:
    raise ConfigError(choice_message(key, value, choices))


def _check_encoder(key: str, value: str, builtins: tuple[str, ...]) -> None:
    prefix = next((prefix for prefix in defaults.ENCODER_PREFIXES if value.startswith(prefix)), None)
    if prefix is None and value not in builtins:
        _refuse_choice(key, value, (*builtins, "hf:SOURCE", "python:module:function"))
    if prefix is not None and value == prefix:
        raise ConfigError(f"{key}={value} names no {prefix.rstrip(':')} encoder after the colon")


#: Keys a resumed run may change: where and how the run is shown, stored and watched, not what it trains
#: (``micro_batch_size`` changes how a step's gradient is computed, not its value, so a run that ran out of
#: memory can continue with it).
RESUMABLE_CHANGES = frozenset(
    {
        "preset",
        "name",
        "out",
        "resume",
        "device",
        "progress",
        "dist_timeout",
        "data_dir",
        "checkpoint_every",
        "checkpoint_minutes",
        "checkpoint_each_epoch",
        "keep_checkpoints",
        "log_every",
        "probe_train_size",
        "probe_layer",
        "probe_baselines",
        "max_skipped_fraction",
        "max_nonfinite_steps",
        "num_workers",
        "shard_reader",
        "gradient_checkpointing",
        "zero_shot_dir",
        "zero_shot_classes",
        "zero_shot_templates",
        "retrieval_file",
        "retrieval_images",
        "micro_batch_size",
        "compile",
    }
)

#: What a WPSE key absent from the saved configuration of an earlier point-set run meant then: the value that
#: version trained with, which is not the key's default now (image cells without positions, the kernel mix (1, 1)).
EARLIER_VALUES: dict[str, Any] = {"wpse_image_positions": False, "wpse_kernel_weights": [1.0, 1.0]}
#: The projection head of a run saved before ``projection_norm`` existed: batch norm whatever ``norm`` said (what
#: ``auto`` now gives for ``norm=batch`` alone).
EARLIER_PROJECTION_NORM = "batch"
#: How a webdataset run saved before the streams were shuffled read its shards: in order, no buffer, no resampling.
EARLIER_STREAM: dict[str, Any] = {"shard_shuffle": False, "shuffle_buffer": 0, "resample_shards": False}

FIELDS = {f.name: f for f in dataclasses.fields(TrainConfig)}
_HINTS = typing.get_type_hints(TrainConfig)


def resume_conflicts(saved: dict[str, Any], config: TrainConfig) -> list[str]:
    """The keys whose value in ``config`` differs from the ``saved`` configuration of a checkpoint, as
    ``key: saved -> new`` lines; keys in :data:`RESUMABLE_CHANGES` and keys ``saved`` lacks are not compared
    (but those :func:`with_earlier_values` sets: they had a value before they were keys)."""
    saved = with_earlier_values(saved)
    current = config.to_dict()
    return [
        f"{key}: {saved[key]!r} -> {current[key]!r}"
        for key in current
        if key not in RESUMABLE_CHANGES and key in saved and saved[key] != current[key]
    ]


def with_earlier_values(saved: dict[str, Any]) -> dict[str, Any]:
    """A saved configuration with the keys it predates set to what its version trained with: a point-set run's
    :data:`EARLIER_VALUES`, a webdataset run's :data:`EARLIER_STREAM`, and :data:`EARLIER_PROJECTION_NORM` where
    ``norm`` was not batch (``auto`` is the same head otherwise); other keys it lacks take their defaults."""
    earlier = dict(EARLIER_VALUES) if saved.get("point_sets") else {}
    if saved.get("dataset") == "webdataset":
        earlier.update(EARLIER_STREAM)
    if saved.get("norm", "batch") != "batch":
        earlier["projection_norm"] = EARLIER_PROJECTION_NORM
    return {**earlier, **saved}


def load_config(overrides: list[str] | None = None, *, presets_dir: Path = PRESETS_DIR) -> TrainConfig:
    """The configuration of ``preset=NAME`` (default ``fashion-mnist``) with ``key=value`` overrides applied."""
    pairs = [_split(item) for item in overrides or []]
    preset = dict(pairs).get("preset", TrainConfig.preset)  # the last, as for every key
    values: dict[str, Any] = {}
    for key, value in _read_preset(preset, presets_dir).items():
        _assign(values, key, value, source=f"preset {preset!r}")
    preset_objective = values.get("objective", TrainConfig.objective)
    command_line: dict[str, Any] = {}
    for key, text in pairs:
        _assign(command_line, key, _parse_value(key, text), source="the command line")
    if command_line.get("objective", preset_objective) != preset_objective:
        accepted = _accepted_parameters(command_line["objective"])
        values["objective_params"] = {
            key: value for key, value in values.get("objective_params", {}).items() if key in accepted
        }
    for encoder in ("image_encoder", "text_encoder"):  # a preset's fields belong to the preset's encoder
        if command_line.get(encoder, values.get(encoder)) != values.get(encoder, getattr(TrainConfig, encoder)):
            values.pop(f"{encoder}_config", None)
    for mapping in PREFIXED_MAPPINGS.values():
        values[mapping] = {**values.get(mapping, {}), **command_line.pop(mapping, {})}
    return TrainConfig(**{**values, **command_line})


def _accepted_parameters(objective: str) -> set[str]:
    from ..objectives import OBJECTIVES

    name, _ = resolve_alias(objective)
    return set(OBJECTIVES[name].defaults()) if name in OBJECTIVES else set()


def _parse_value(key: str, text: str) -> Any:
    """The YAML scalar, list or mapping ``text`` of ``key=text`` ("" stays the empty string)."""
    if text == "":
        return ""
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as error:
        problem = str(error).splitlines()[0]
        raise ConfigError(f"{key} (from the command line): {text!r} is not a YAML value ({problem})") from None


def _check_range(key: str, value: Any, low: float | None, high: float | None) -> None:
    """Raise :class:`ConfigError` naming ``key`` unless ``value`` (or each item of a list) lies in its range."""
    for item in value if isinstance(value, list) else [value]:
        too_low = low is not None and (item <= low if key in _OPEN_BELOW else item < low)
        if isinstance(item, float) and not math.isfinite(item) or too_low or (high is not None and item > high):
            left = "(" if key in _OPEN_BELOW else "["
            bounds = f"{left}{low if low is not None else '-inf'}, {high if high is not None else 'inf'}]"
            raise ConfigError(f"{key} must be in {bounds}, got {value!r}")


def _split(item: str) -> tuple[str, str]:
    if "=" not in item:
        raise ConfigError(f"expected key=value, got {item!r}")
    key, value = item.split("=", 1)
    return key.strip(), value


def _read_preset(preset: str, presets_dir: Path) -> dict[str, Any]:
    path = Path(preset) if preset.endswith((".yaml", ".yml")) else presets_dir / f"{preset}.yaml"
    try:
        text = path.read_text(encoding="utf-8") if path.is_file() else None
        content = None if text is None else yaml.safe_load(text) or {}
    except (OSError, ValueError, yaml.YAMLError) as error:  # ValueError: a NUL byte in the name, not UTF-8
        problem = str(error).splitlines()[0] if str(error) else type(error).__name__
        raise ConfigError(f"preset {preset!r} cannot be read ({problem})") from None
    if text is None:
        available = sorted(p.stem for p in presets_dir.glob("*.yaml"))
        raise ConfigError(f"preset {preset!r} not found ({path}); available: {', '.join(available)}")
    if not isinstance(content, dict):
        raise ConfigError(f"preset {path} must be a mapping of keys to values")
    content.setdefault("preset", preset)
    return content


#: ``PREFIX.NAME=VALUE`` sets ``NAME`` in the mapping key of the prefix.
PREFIXED_MAPPINGS = {
    "objective.": "objective_params",
    "image_encoder.": "image_encoder_config",
    "text_encoder.": "text_encoder_config",
}


def _assign(values: dict[str, Any], key: str, value: Any, *, source: str) -> None:
    for prefix, mapping in PREFIXED_MAPPINGS.items():
        if key.startswith(prefix):
            values.setdefault(mapping, {})[key.removeprefix(prefix)] = value
            return
    if key in PREFIXED_MAPPINGS.values():
        if not isinstance(value, dict):
            raise ConfigError(f"{key} (from {source}) must be a mapping, got {value!r}")
        values.setdefault(key, {}).update(value)
        return
    if key == "compile" and isinstance(value, bool):  # YAML reads true and false as booleans
        value = str(value).lower()
    if key not in FIELDS:
        close = difflib.get_close_matches(key, FIELDS, n=3)
        hint = f"; did you mean {', '.join(close)}?" if close else ""
        raise ConfigError(f"unknown configuration key {key!r} (from {source}){hint}")
    values[key] = _coerce(key, value, _HINTS[key], source)


def _coerce(key: str, value: Any, hint: Any, source: str) -> Any:
    origin = typing.get_origin(hint)
    if origin is list:
        (item_type,) = typing.get_args(hint)
        items = value if isinstance(value, list) else [value]
        return [_coerce(f"{key}[{i}]", item, item_type, source) for i, item in enumerate(items)]
    if origin is dict:
        if not isinstance(value, dict):
            raise ConfigError(f"{key} (from {source}) must be a mapping, got {value!r}")
        return dict(value)
    if origin in (types.UnionType, typing.Union):
        raise ConfigError(f"{key}: union types are not supported in the configuration")
    if hint is bool:
        if isinstance(value, bool):
            return value
    elif hint is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    elif hint is float:
        if isinstance(value, int | float) and not isinstance(value, bool):
            return float(value)
        if isinstance(value, str):  # YAML 1.1 reads 3e-4 (no dot) as a string
            try:
                return float(value)
            except ValueError:
                pass
    elif hint is str:
        if isinstance(value, str | int | float) and not isinstance(value, bool):
            return str(value)
    raise ConfigError(f"{key} (from {source}) must be of type {hint.__name__}, got {value!r}")
