"""Training configuration: YAML presets plus ``key=value`` overrides, checked key by key.

A run is described by one flat :class:`TrainConfig`. A preset (``configs/NAME.yaml``
or any YAML file) sets some keys; ``key=value`` arguments override them; the
values of string keys are read as text (``name=007``, ``csv_separator=,``), the
others as YAML (``lr=3e-4``, ``widths=[32,64]``, ``resume=true``), and checked
against each key's type. The objective's own
parameters are written ``objective.NAME=VALUE`` (``objective.tau_plus=0.1``)
and checked by :func:`uncurated.objectives.build`, but for the engine's settings
(``objective.tiling=``, ``objective.block_size=``, ...), which every objective
takes: they are checked when the configuration is built, as one
:class:`~uncurated.engine_settings.EngineSettings` (:meth:`TrainConfig.engine_settings`). Unknown keys, wrong
types, values outside a key's range (:data:`RANGES`, checked however the
configuration is built) and text that is not YAML raise :class:`ConfigError`
naming the key. A key given more than once takes its last value, whichever
key it is: ``preset`` too, and ``objective.NAME=`` and an ``objective_params=``
mapping holding ``NAME`` set the same parameter (likewise
``image_encoder.FIELD=`` with ``image_encoder_config=``, ``text_encoder.FIELD=``
with ``text_encoder_config=``). A preset's keys of its own dataset, pipeline
and objective stay with them (:mod:`.presets`). A resumed run starts from its
saved ``config.yaml`` and may change only the keys of :data:`RESUMABLE_CHANGES`.
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
from ..objective_aliases import resolve_alias
from .keys import OPEN_BELOW, RANGES
from .presets import default_run_name, fit_preset, run_defaults
from .trackers import tracker_names

#: The presets shipped with the package (``src/uncurated/configs``).
PRESETS_DIR = Path(__file__).resolve().parents[1] / "configs"
#: The preset of a run that names none: two views of Fashion-MNIST in clutter, where training beats its baselines.
DEFAULT_PRESET = "fashion-clutter"

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
#: ``parallel``: how the towers are spread over the training processes; ``fsdp_mixed_precision``: FSDP2's
#: mixed-precision policy of the towers (:mod:`uncurated.train.parallel`).
PARALLEL_MODES = ("ddp", "fsdp")
FSDP_MIXED_PRECISIONS = ("none", "bf16", "bf16_reduce_fp32")


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
    """Every setting of a training run. See ``configs/*.yaml`` for the presets and :mod:`.keys` for what each
    key means (``uncurated train --help`` prints it)."""

    # The run.
    preset: str = DEFAULT_PRESET
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
    positives: str = "augmentation"
    label_noise: float = 0.0
    oracle_negatives: bool = False
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
    image_resize: str = "auto"
    num_workers: int = 0
    data_on_device: bool = False
    samples_per_shard: int = 10000
    shard_reader: str = "tarfile"
    shard_shuffle: bool = True
    shuffle_buffer: int = 1000
    resample_shards: bool = False
    steps_per_epoch: int = 0
    train_subset: int = 0
    max_skipped_fraction: float = 0.01

    # Model.
    image_encoder: str = "resnet"
    image_encoder_config: dict[str, Any] = field(default_factory=dict)
    image_pooling: str = "auto"
    widths: list[int] = field(default_factory=lambda: list(defaults.RESNET_WIDTHS))
    blocks: list[int] = field(default_factory=lambda: list(defaults.RESNET_BLOCKS))
    pool: str = defaults.RESNET_POOL
    norm: str = "batch"
    projection_norm: str = "auto"
    projection_dim: int = defaults.PROJECTION_DIM
    projection_layers: int = defaults.PROJECTION_LAYERS
    text_encoder: str = "transformer"
    text_encoder_config: dict[str, Any] = field(default_factory=dict)
    text_pooling: str = "auto"
    vocab_size: int = 30522
    text_width: int = defaults.TEXT_WIDTH
    text_layers: int = defaults.TEXT_LAYERS
    text_heads: int = defaults.TEXT_HEADS
    max_caption_length: int = 24
    # WPSE (point_sets=true); the defaults are the library's (uncurated.similarity, models.point_set_head).
    point_sets: bool = False
    wpse_points: str = "tokens"
    wpse_image_positions: bool = True
    wpse_weights: str = defaults.WEIGHT_ACTIVATION
    wpse_kernel: str = defaults.NONLINEAR_KERNEL
    wpse_kernel_scale: float = defaults.KERNEL_SCALE
    wpse_kernel_weights: list[float] = field(default_factory=lambda: list(defaults.KERNEL_WEIGHTS))
    wpse_features: int = defaults.WPSE_TRAIN_FEATURES
    wpse_eval_features: int = defaults.WPSE_EVAL_FEATURES
    wpse_pooling: str = defaults.WPSE_POOLING

    # Objective.
    objective: str = "dcl"
    objective_params: dict[str, Any] = field(default_factory=dict)

    # Optimization.
    epochs: float = 5.0
    batch_size: int = 256
    micro_batch_size: int = 0
    lr: float = 1e-3
    projection_lr: float = 0.0
    weight_decay: float = 1e-6
    warmup_epochs: float = 0.5
    grad_clip: float = 0.0
    max_nonfinite_steps: int = 5
    precision: str = "auto"
    parallel: str = "ddp"
    fsdp_mixed_precision: str = "none"
    sync_batch_norm: bool = False
    compile: str = "auto"
    gradient_checkpointing: bool = False

    # Checkpoints and logs.
    checkpoint_every: int = 0
    checkpoint_minutes: float = 0.0
    checkpoint_each_epoch: bool = True
    checkpoint_async: bool = False
    keep_checkpoints: int = 2
    log_every: int = 20
    report_to: str = "none"

    # Evaluation.
    eval_every: int = 0
    probe_train_size: int = 20000
    probe_layer: str = "encoder"
    probe_baselines: bool = True
    zero_shot_dir: str = ""
    zero_shot_classes: str = ""
    zero_shot_templates: str = "imagenet1k"
    retrieval_file: str = ""
    retrieval_images: str = ""

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
        as_config_error(lambda: tracker_names(self.report_to))
        self.objective_params = _with_run_length(self.objective, self.epochs, self.objective_params)
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
        return name, {**implied, **run_defaults(self.objective), **self.objective_params}

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


#: ``compile``: ``true`` or ``false`` sets the objective's ``compile`` (unless ``objective.compile`` does);
#: ``auto`` leaves the objective's default (compiled on CUDA where Triton is installed, not on the CPU).
COMPILE_CHOICES = ("auto", "true", "false")

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
    "fsdp_mixed_precision": FSDP_MIXED_PRECISIONS,
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
#: memory can continue with it; ``fsdp_mixed_precision`` its rounding, its checkpoints float32 whatever the policy).
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
        "checkpoint_async",
        "keep_checkpoints",
        "log_every",
        "report_to",
        "eval_every",
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
        "fsdp_mixed_precision",
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
    :data:`EARLIER_VALUES`, a webdataset run's :data:`EARLIER_STREAM`, :data:`EARLIER_PROJECTION_NORM` where
    ``norm`` was not batch (``auto`` is the same head otherwise), and NUCLR's :data:`EARLIER_RUN_LENGTH` where its
    parameters lack them; other keys it lacks take their defaults. A value the configuration holds is kept."""
    earlier = dict(EARLIER_VALUES) if saved.get("point_sets") else {}
    if saved.get("dataset") == "webdataset":
        earlier.update(EARLIER_STREAM)
    if saved.get("norm", "batch") != "batch":
        earlier["projection_norm"] = EARLIER_PROJECTION_NORM
    values = {**earlier, **saved}
    params = saved.get("objective_params")
    if resolve_alias(str(saved.get("objective", "")))[0] == "nuclr" and isinstance(params, dict):
        values["objective_params"] = {**EARLIER_RUN_LENGTH, **params}
    return values


#: NUCLR's zeta freeze and schedule length in a run saved before the configuration recorded them: 5 frozen epochs
#: whatever the run's length, and no schedule over the epochs (its parameters then).
EARLIER_RUN_LENGTH: dict[str, Any] = {"freeze_epochs": 5.0, "epochs": None}


def _with_run_length(objective: str, epochs: float, params: dict[str, Any]) -> dict[str, Any]:
    """``params`` with what an objective that spans the run takes from its length (NUCLR: the epochs and the zeta
    freeze they give), recorded so that a resumed run keeps them; others' as given."""
    from ..objectives import OBJECTIVES

    hook = getattr(OBJECTIVES.get(resolve_alias(objective)[0]), "run_length_parameters", None)
    return params if hook is None else hook(epochs, params)


def load_config(overrides: list[str] | None = None, *, presets_dir: Path = PRESETS_DIR) -> TrainConfig:
    """The configuration of ``key=value`` ``overrides`` (:func:`resolve_config`), without its notes."""
    return resolve_config(overrides, presets_dir=presets_dir)[0]


def resolve_config(
    overrides: list[str] | None = None, *, presets_dir: Path = PRESETS_DIR
) -> tuple[TrainConfig, list[str]]:
    """The configuration of ``key=value`` ``overrides`` and the ``note:`` lines of how it was resolved.

    ``resume=true`` (or ``latest``) continues the run of ``out/name`` from its ``config.yaml``, the command line's
    keys changed (the trainer checks them against :data:`RESUMABLE_CHANGES`). Otherwise the preset
    (``preset=``, default :data:`DEFAULT_PRESET`) is read and the command line applied over it, the preset's keys
    of another dataset, pipeline or objective left behind (:mod:`.presets`); an unnamed run is named after what
    it trains (:func:`default_run_name`). The notes say what the preset left behind (a run that finds
    nothing to resume says so when it starts).
    """
    command_line: dict[str, Any] = {}
    for key, text in (_split(item) for item in overrides or []):
        _assign(command_line, key, _parse_value(key, text), source="the command line")
    if command_line.get("resume") and command_line.get("name"):
        folder = Path(command_line.get("out", TrainConfig.out)) / command_line["name"]
        resumed = _resumed_config(folder, command_line)
        if resumed is not None:
            return resumed, []
    config, notes = _from_preset(command_line, presets_dir)
    resumed = _resumed_config(Path(config.out) / config.name, command_line) if config.resume else None
    return (config, notes) if resumed is None else (resumed, [])


#: The keys whose change on the command line leaves a preset's keys behind (:func:`.presets.fit_preset`).
SWITCHING_KEYS = ("dataset", "pipeline", "objective")


def _from_preset(command_line: dict[str, Any], presets_dir: Path) -> tuple[TrainConfig, list[str]]:
    """The preset's configuration with the ``command_line`` over it, named; the notes of what was left behind."""
    preset = command_line.get("preset", DEFAULT_PRESET)
    values: dict[str, Any] = {}
    for key, value in _read_preset(preset, presets_dir).items():
        _assign(values, key, value, source=f"preset {preset!r}")
    own_dataset = values.get("dataset", TrainConfig.dataset)
    notes = fit_preset(preset, values, command_line, {key: FIELDS[key].default for key in SWITCHING_KEYS})
    for encoder in ("image_encoder", "text_encoder"):  # a preset's fields belong to the preset's encoder
        if command_line.get(encoder, values.get(encoder)) != values.get(encoder, getattr(TrainConfig, encoder)):
            values.pop(f"{encoder}_config", None)
    config = TrainConfig(**_merged(values, command_line))
    if not config.name:
        config.name = default_run_name(config, own_dataset)
    return config, notes


def _merged(values: dict[str, Any], command_line: dict[str, Any]) -> dict[str, Any]:
    """``values`` with the ``command_line``'s over them, the mappings of :data:`PREFIXED_MAPPINGS` merged key by key."""
    merged = {**values, **command_line}
    for mapping in PREFIXED_MAPPINGS.values():
        merged[mapping] = {**values.get(mapping, {}), **command_line.get(mapping, {})}
    return merged


def _resumed_config(folder: Path, command_line: dict[str, Any]) -> TrainConfig | None:
    """The configuration of the run saved in ``folder`` with the ``command_line``'s keys changed; ``None`` where
    the folder holds no ``config.yaml``."""
    path = folder / "config.yaml"
    if not path.is_file():
        return None
    try:
        saved = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, yaml.YAMLError) as error:
        problem = str(error).splitlines()[0] if str(error) else type(error).__name__
        raise ConfigError(f"resume=true: {path} cannot be read ({problem})") from None
    if not isinstance(saved, dict):
        raise ConfigError(f"resume=true: {path} must be a mapping of configuration keys")
    values: dict[str, Any] = {}
    for key, value in with_earlier_values(saved).items():
        _assign(values, key, value, source=str(path))
    given = command_line.get("preset", values.get("preset"))
    if given != values.get("preset"):
        raise ConfigError(
            f"resume=true continues {folder} as its config.yaml says (preset={values.get('preset')}); "
            f"preset={given} would not be read: leave it out, or give name=... for a new run"
        )
    return TrainConfig(**_merged(values, {**command_line, "name": folder.name, "out": str(folder.parent)}))


#: Other words for ``resume=true``; ``auto`` for ``torchrun --max-restarts``, whose restarts continue the run.
RESUME_ALIASES = ("latest", "auto")


def _parse_value(key: str, text: str) -> Any:
    """The value of ``key=text``: the text itself for a string key, else a YAML scalar, list or mapping ("" stays
    the empty string; ``resume=latest`` and ``resume=auto`` are ``resume=true``)."""
    field_type = _HINTS.get(key)
    if text == "" or field_type is str:
        return text
    if key == "resume" and text in RESUME_ALIASES:
        return True
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as error:
        problem = str(error).splitlines()[0]
        raise ConfigError(f"{key} (from the command line): {text!r} is not a YAML value ({problem})") from None


def accepted(key: str) -> str:
    """What ``key`` accepts, as ``--help`` shows it: its type and its choices or range."""
    hint = _HINTS[key]
    kind = getattr(hint, "__name__", str(hint)) if typing.get_origin(hint) is None else str(hint).replace("typing.", "")
    if key in CHOICES or key in ENCODER_CHOICES:
        extra = ("hf:SOURCE", "python:module:function") if key in ENCODER_CHOICES else ()
        return f"{kind}: {' | '.join((*CHOICES.get(key, ENCODER_CHOICES.get(key, ())), *extra))}"
    if key not in RANGES:
        return kind
    low, high = RANGES[key]
    left = "(" if key in OPEN_BELOW else "["
    return f"{kind} in {left}{'-inf' if low is None else low}, {'inf' if high is None else high}]"


def _check_range(key: str, value: Any, low: float | None, high: float | None) -> None:
    """Raise :class:`ConfigError` naming ``key`` unless ``value`` (or each item of a list) lies in its range."""
    for item in value if isinstance(value, list) else [value]:
        too_low = low is not None and (item <= low if key in OPEN_BELOW else item < low)
        if isinstance(item, float) and not math.isfinite(item) or too_low or (high is not None and item > high):
            left = "(" if key in OPEN_BELOW else "["
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
