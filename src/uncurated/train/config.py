"""Training configuration: YAML presets plus ``key=value`` overrides, checked key by key.

A run is described by one :class:`TrainConfig`: every section of :mod:`.sections` (run, data, model, objective,
optimization, distributed, checkpoints, evaluation) at once, its keys flat. A preset (``configs/NAME.yaml`` or any
YAML file) sets some keys; ``key=value`` arguments override them; the values of string keys are read as text
(``name=007``, ``csv_separator=,``), the others as YAML (``lr=3e-4``, ``widths=[32,64]``, ``resume=true``), and
checked against each key's type. The objective's own parameters are written ``objective.NAME=VALUE``
(``objective.tau_plus=0.1``) and checked by :func:`uncurated.objectives.build`, but for the engine's settings
(``objective.tiling=``, ``objective.block_size=``, ...), which every objective takes: they are checked when the
configuration is built, as one :class:`~uncurated.engine_settings.EngineSettings`
(:meth:`TrainConfig.engine_settings`). Unknown keys, wrong types, values outside a key's range or choices (declared
on the key's field in its section, :mod:`.setting`, and checked however the configuration is built) and text that
is not YAML raise :class:`ConfigError` naming the key. A key given more than once takes its last value, whichever
key it is: ``preset`` too, and ``objective.NAME=`` and an ``objective_params=`` mapping holding ``NAME`` set the
same parameter (likewise ``image_encoder.FIELD=`` with ``image_encoder_config=``, ``text_encoder.FIELD=`` with
``text_encoder_config=``). A preset's keys of its own dataset, pipeline and objective stay with them
(:mod:`.presets`). A resumed run starts from its saved ``config.yaml`` and may change only the keys declared
``resumable`` (:data:`RESUMABLE_CHANGES`).
"""

from __future__ import annotations

import dataclasses
import difflib
import typing
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import yaml

from ..engine_settings import NAMES as ENGINE_SETTINGS
from ..engine_settings import EngineSettings
from ..objective_aliases import resolve_alias
from .data_formats import FORMATS
from .presets import default_run_name, fit_preset, run_defaults
from .sections import (
    DEFAULT_PRESET,
    CheckpointSection,
    DataSection,
    DistributedSection,
    EvaluationSection,
    ModelSection,
    ObjectiveSection,
    OptimizationSection,
    RunSection,
)
from .setting import ConfigError, Rule, Section, coerce, own_keys, rule_of

#: The presets shipped with the package (``src/uncurated/configs``).
PRESETS_DIR = Path(__file__).resolve().parents[1] / "configs"


def as_config_error(build: Callable[[], Any]) -> Any:
    """``build()``, its ``ValueError`` (a bad folder, field or factory) turned into a :class:`ConfigError`."""
    try:
        return build()
    except ConfigError:
        raise
    except ValueError as error:
        raise ConfigError(str(error)) from error


@dataclass
class TrainConfig(
    EvaluationSection,
    CheckpointSection,
    DistributedSection,
    OptimizationSection,
    ObjectiveSection,
    ModelSection,
    DataSection,
    RunSection,
):
    """Every setting of a training run: every section of :mod:`.sections` at once, its keys flat (the sections
    follow in :data:`SECTIONS`' order). See ``configs/*.yaml`` for the presets and ``uncurated train --help`` for
    what each key means and accepts."""

    title: ClassVar[str] = ""

    def __post_init__(self) -> None:
        """Check every key's type and range (each section its own keys), whoever built the configuration, then the
        keys that depend on another section's."""
        super().__post_init__()
        self.dataset_options()
        self.engine_settings()
        self.objective_params = _with_run_length(self.objective, self.epochs, self.objective_params)
        if self.micro_batch_size and self.point_sets:
            raise ConfigError(
                "micro_batch_size applies to point_sets=false: WPSE draws its random features once per call, and "
                "micro-batches embedded in separate calls would not share one draw"
            )

    def objective_spec(self) -> tuple[str, dict[str, Any]]:
        """The registry name and parameters of the objective, aliases resolved."""
        name, implied = resolve_alias(self.objective)
        return name, {**implied, **run_defaults(self.objective), **self.objective_params}

    def dataset_options(self) -> Section:
        """The own keys of the ``dataset``'s format (``dataset.NAME=VALUE``), as its section checks them;
        :class:`ConfigError` naming ``dataset.NAME`` where one is unknown or out of its range."""
        return own_keys("dataset", self.dataset, FORMATS[self.dataset].options, self.dataset_config)

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


#: The configuration's sections in the order of ``--help`` and of :class:`TrainConfig`'s keys.
SECTION_TYPES: tuple[type[Section], ...] = (
    RunSection,
    DataSection,
    ModelSection,
    ObjectiveSection,
    OptimizationSection,
    DistributedSection,
    CheckpointSection,
    EvaluationSection,
)
FIELDS = {f.name: f for f in dataclasses.fields(TrainConfig)}
_HINTS = typing.get_type_hints(TrainConfig)
#: Each section's keys, in the order they are declared.
SECTIONS: dict[str, tuple[str, ...]] = {
    section.title: tuple(f.name for f in dataclasses.fields(section)) for section in SECTION_TYPES
}
#: The rule each key is declared with (:func:`.setting.setting`): its meaning, range, choices, resumability.
RULES: dict[str, Rule] = {key: rule_of(declared) for key, declared in FIELDS.items()}
#: Keys a resumed run may change (declared ``resumable=True``): where and how the run is shown, stored and watched,
#: not what it trains.
RESUMABLE_CHANGES = frozenset(key for key, rule in RULES.items() if rule.resumable)

#: What a WPSE key absent from the saved configuration of an earlier point-set run meant then: the value that
#: version trained with, which is not the key's default now (image cells without positions, the kernel mix (1, 1)).
EARLIER_VALUES: dict[str, Any] = {"wpse_image_positions": False, "wpse_kernel_weights": [1.0, 1.0]}
#: The projection head of a run saved before ``projection_norm`` existed: batch norm whatever ``norm`` said (what
#: ``auto`` now gives for ``norm=batch`` alone).
EARLIER_PROJECTION_NORM = "batch"
#: How a webdataset run saved before the streams were shuffled read its shards: in order, no buffer, no resampling.
EARLIER_STREAM: dict[str, Any] = {"shard_shuffle": False, "shuffle_buffer": 0, "resample_shards": False}


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
    return RULES[key].accepted(kind)


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
    "dataset.": "dataset_config",
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
    values[key] = coerce(key, value, _HINTS[key], source)
