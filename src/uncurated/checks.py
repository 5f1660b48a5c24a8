"""The checks of plain values (a choice, an integer) and the phrasing of a refused choice; imports nothing heavy.

:mod:`uncurated.validation` (which checks tensors, and so imports torch) re-exports these checks, and the training
configuration, which must load without torch (``uncurated --help`` starts without it), phrases its refused choices
with :func:`choice_message`: a refused choice reads the same wherever it is made, ``NAME must be one of 'a', 'b';
got 'x'``, with ``(did you mean 'a'?)`` where a choice is close to what was given.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable
from numbers import Integral


def choice_message(name: str, value: object, choices: Iterable[str]) -> str:
    """The message refusing ``value`` for ``name``: the accepted ``choices``, what was given, the closest choice."""
    choices = tuple(choices)
    return f"{name} must be one of {', '.join(map(repr, choices))}; got {value!r}{did_you_mean(value, choices)}"


def did_you_mean(value: object, choices: Iterable[str]) -> str:
    """`` (did you mean 'x'?)`` naming the choice closest to ``value``, or ``""`` where none is close."""
    close = difflib.get_close_matches(str(value), tuple(choices), n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""


def check_choice(name: str, value: str, choices: Iterable[str]) -> str:
    """Return ``value`` if it is one of ``choices``, else raise ``ValueError`` (:func:`choice_message`)."""
    choices = tuple(choices)
    if value not in choices:
        raise ValueError(choice_message(name, value, choices))
    return value


def check_integer(name: str, value: int, low: int) -> int:
    """Return ``value`` as an int if it is an integer (not a bool) ``>= low``, else raise ``ValueError``."""
    if isinstance(value, bool) or not isinstance(value, Integral) or value < low:
        raise ValueError(f"{name} must be an integer >= {low}, got {value!r}")
    return int(value)
