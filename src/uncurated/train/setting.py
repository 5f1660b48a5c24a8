"""One configuration key, declared once: its default, its meaning, its range or choices, and whether a resumed run
may change it; and the checks that read that declaration. Imports nothing of torch (``--help`` reads it).

A key is a field of a configuration section (:mod:`.sections`) declared with :func:`setting`; the section checks
each of its fields against its :class:`Rule` when it is built, however it is built (a preset, the command line, a
saved ``config.yaml`` or code), and ``uncurated train --help`` prints the same rule (:meth:`Rule.accepted`).
"""

from __future__ import annotations

import copy
import dataclasses
import math
import types
import typing
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar

from ..checks import choice_message
from ..errors import RunStopped
from ..model_defaults import ENCODER_PREFIXES


class ConfigError(RunStopped, ValueError):
    """A configuration key that does not exist, a value of the wrong type or out of its range."""

    exit_status = 2
    verdict = "error"


#: What an encoder key accepts besides its built-in names, as its refusal and ``--help`` say it.
ENCODER_SOURCES = ("hf:SOURCE", "python:module:function")


@dataclass(frozen=True)
class Rule:
    """What one key accepts and means: its numeric range (``low``/``high``, ``None`` for no bound, both ends
    included unless ``open_below``; a list's items share it; floats must be finite), its ``choices`` (a tuple, or
    a function giving them when they are read: a registry's names), its built-in ``encoders`` (a key naming an
    encoder also takes ``hf:SOURCE`` and ``python:module:function``), a ``check`` of its own, and whether a
    resumed run may change it (``resumable``: how the run is shown, stored and watched, not what it trains)."""

    meaning: str
    low: float | None = None
    high: float | None = None
    open_below: bool = False
    choices: tuple[str, ...] | Callable[[], tuple[str, ...]] | None = None
    encoders: tuple[str, ...] | Callable[[], tuple[str, ...]] | None = None
    resumable: bool = False
    check: Callable[[Any], None] | None = None

    def accepted_choices(self) -> tuple[str, ...] | None:
        """The values the key accepts, where it names a choice; ``None`` otherwise."""
        if self.encoders is not None:
            return (*self.builtin_encoders(), *ENCODER_SOURCES)
        return self.choices() if callable(self.choices) else self.choices

    def builtin_encoders(self) -> tuple[str, ...]:
        """The encoders the key names without a prefix (a registry's names)."""
        return self.encoders() if callable(self.encoders) else self.encoders or ()

    def bounds(self) -> str | None:
        """The range as ``--help`` and a refusal write it (``[0, inf]``, ``(0.0, inf]``); ``None`` where unbounded."""
        if self.low is None and self.high is None:
            return None
        low = "-inf" if self.low is None else self.low
        high = "inf" if self.high is None else self.high
        return f"{'(' if self.open_below else '['}{low}, {high}]"

    def accepted(self, kind: str) -> str:
        """What the key accepts, as ``--help`` shows it: its ``kind`` (type) and its choices or range."""
        choices = self.accepted_choices()
        if choices is not None:
            return f"{kind}: {' | '.join(choices)}"
        bounds = self.bounds()
        return kind if bounds is None else f"{kind} in {bounds}"

    def enforce(self, key: str, value: Any) -> None:
        """Raise :class:`ConfigError` naming ``key`` unless ``value`` obeys this rule."""
        self._enforce_range(key, value)
        if self.encoders is not None:
            _check_encoder(key, value, self.builtin_encoders())
        elif self.choices is not None and value not in (choices := self.accepted_choices() or ()):
            raise ConfigError(choice_message(key, value, choices))
        if self.check is not None:
            self.check(value)

    def _enforce_range(self, key: str, value: Any) -> None:
        if self.bounds() is None:
            return
        for item in value if isinstance(value, list) else [value]:
            low, high = self.low, self.high
            too_low = low is not None and (item <= low if self.open_below else item < low)
            if isinstance(item, float) and not math.isfinite(item) or too_low or (high is not None and item > high):
                raise ConfigError(f"{key} must be in {self.bounds()}, got {value!r}")


def _check_encoder(key: str, value: str, builtins: tuple[str, ...]) -> None:
    prefix = next((prefix for prefix in ENCODER_PREFIXES if value.startswith(prefix)), None)
    if prefix is None and value not in builtins:
        raise ConfigError(choice_message(key, value, (*builtins, *ENCODER_SOURCES)))
    if prefix is not None and value == prefix:
        raise ConfigError(f"{key}={value} names no {prefix.rstrip(':')} encoder after the colon")


def setting(default: Any, meaning: str, **rule: Any) -> Any:
    """A configuration field: its ``default`` (a list or mapping copied for each configuration) and its
    :class:`Rule` (``meaning`` and the keyword arguments)."""
    metadata = {"rule": Rule(meaning, **rule)}
    if isinstance(default, list | dict):
        return dataclasses.field(default_factory=lambda: copy.deepcopy(default), metadata=metadata)
    return dataclasses.field(default=default, metadata=metadata)


def rule_of(declared: dataclasses.Field[Any]) -> Rule:
    """The :class:`Rule` a field was declared with (:func:`setting`)."""
    rule: Rule = declared.metadata["rule"]
    return rule


def default_of(declared: dataclasses.Field[Any]) -> Any:
    """A field's default value (a fresh copy of a list or mapping)."""
    if declared.default is dataclasses.MISSING:
        return declared.default_factory()  # type: ignore[operator]
    return declared.default


@dataclass
class Section:
    """A section of the training configuration: fields declared with :func:`setting`, each checked against its
    rule when the section is built. ``title`` is the section's name in ``--help``."""

    title: ClassVar[str] = ""

    def __post_init__(self) -> None:
        hints = typing.get_type_hints(type(self))
        for declared in dataclasses.fields(self):
            value = coerce(declared.name, getattr(self, declared.name), hints[declared.name], "the configuration")
            setattr(self, declared.name, value)
            rule_of(declared).enforce(declared.name, value)


@dataclass
class NoOptions(Section):
    """The own keys of a registered data format or encoder that declares none."""

    title: ClassVar[str] = "options"


def own_keys(key: str, name: str, options: type[Section], given: dict[str, Any]) -> Section:
    """The own keys ``given`` of the registered part ``key=name`` (``dataset=csv``), as its section ``options``
    checks them; :class:`ConfigError` naming ``key.FIELD`` where one is unknown or out of its range."""
    known = [declared.name for declared in dataclasses.fields(options)]
    unknown = sorted(set(given) - set(known))
    if unknown:
        raise ConfigError(
            f"{key}.{unknown[0]}: {key}={name} takes no such key; it takes "
            + (", ".join(f"{key}.{field}" for field in known) or "none")
        )
    try:
        return options(**given)
    except ConfigError as error:
        raise ConfigError(f"{key}.{error}") from None


def coerce(key: str, value: Any, hint: Any, source: str) -> Any:
    """``value`` as the type ``hint`` declares (an int as a float, ``3e-4`` read as text as a float, a number as
    text); :class:`ConfigError` naming ``key`` and ``source`` where it is of another type."""
    origin = typing.get_origin(hint)
    if origin is list:
        (item_type,) = typing.get_args(hint)
        items = value if isinstance(value, list) else [value]
        return [coerce(f"{key}[{i}]", item, item_type, source) for i, item in enumerate(items)]
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
