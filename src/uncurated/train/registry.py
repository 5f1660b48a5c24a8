"""A registry of named parts (data formats, encoders): each registers itself once under its name, and a name
registered twice is refused at once, naming both builders. Imports nothing of torch."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any, Generic, Protocol, TypeVar

from ..checks import choice_message


class Kind(Protocol):
    """What a registry holds: a part's ``name`` and its ``build`` (frozen dataclasses of the data formats and the
    encoders)."""

    @property
    def name(self) -> str: ...

    @property
    def build(self) -> Callable[..., Any]: ...


Entry = TypeVar("Entry", bound=Kind)


class DuplicateRegistration(ValueError):
    """A name registered twice: the second registration is refused, naming the first."""


def origin(function: Callable[..., object]) -> str:
    """Where ``function`` is defined, ``module.name``: what a refused registration names."""
    return f"{function.__module__}.{getattr(function, '__qualname__', repr(function))}"


class Registry(Generic[Entry]):
    """Entries by name, in the order they were registered; ``kind`` (``data format``) names them in messages."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self._entries: dict[str, Entry] = {}
        self._origins: dict[str, str] = {}

    def register(self, entry: Entry) -> Entry:
        """Register ``entry`` under its name; a name registered twice is refused (:class:`DuplicateRegistration`),
        naming both builders (:func:`origin`)."""
        name, where = entry.name, origin(entry.build)
        if name in self._entries:
            raise DuplicateRegistration(
                f"{self.kind} {name!r} is registered twice: by {self._origins[name]} and by {where}"
            )
        self._entries[name] = entry
        self._origins[name] = where
        return entry

    def unregister(self, name: str) -> None:
        """Remove ``name`` (a test's temporary registration)."""
        del self._entries[name], self._origins[name]

    def names(self) -> tuple[str, ...]:
        """The registered names, in the order they were registered (what the configuration's key accepts)."""
        return tuple(self._entries)

    def __contains__(self, name: object) -> bool:
        return name in self._entries

    def __iter__(self) -> Iterator[str]:
        return iter(self._entries)

    def __getitem__(self, name: str) -> Entry:
        """The entry of ``name``; ``KeyError`` with the registered names where none is."""
        if name not in self._entries:
            raise KeyError(choice_message(self.kind, name, self._entries))
        return self._entries[name]
