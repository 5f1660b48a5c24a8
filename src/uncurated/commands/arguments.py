"""What the subcommands share: argument types that name the accepted range, numeric options declared as data
(:class:`Number`), and how a usage error exits."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from ..errors import RunStopped


def positive_float(text: str) -> float:
    """An argparse ``type`` accepting finite floats > 0."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a number > 0, got {text!r}") from None
    if not 0 < value < float("inf"):
        raise argparse.ArgumentTypeError(f"must be a number > 0, got {text!r}")
    return value


def integer_at_least(low: int):
    """An argparse ``type`` accepting integers >= ``low``."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be an integer >= {low}, got {text!r}") from None
        if value < low:
            raise argparse.ArgumentTypeError(f"must be an integer >= {low}, got {value}")
        return value

    return parse


@dataclass(frozen=True)
class Number:
    """A numeric option, declared once: its flag, what it is, its default, and its range (integers ``>= low``, or
    numbers ``> 0`` when ``low`` is None). Its help ends with the range and the default, so they cannot disagree
    with what the parser accepts; ``many`` takes one value or more."""

    flag: str
    what: str
    default: int | float | Sequence[int] | Sequence[float] | None
    low: int | None = None
    many: bool = False
    metavar: str | None = None
    default_note: str = ""  # after the default in the help, e.g. ", the paper's"; or the default's meaning if None

    def add_to(self, parser: argparse.ArgumentParser) -> None:
        accepted = "> 0" if self.low is None else f">= {self.low}"
        if self.default is None:
            shown = self.default_note
        else:
            shown = " ".join(map(str, self.default)) if self.many else str(self.default)  # type: ignore[arg-type]
            shown += self.default_note
        parser.add_argument(
            self.flag,
            type=positive_float if self.low is None else integer_at_least(self.low),
            nargs="+" if self.many else None,
            default=list(self.default) if self.many else self.default,  # type: ignore[arg-type]
            metavar=self.metavar,
            help=f"{self.what}, {accepted} (default: {shown})",
        )


def add_numbers(parser: argparse.ArgumentParser, numbers: Sequence[Number]) -> None:
    """Add each of ``numbers`` to ``parser``, in order."""
    for number in numbers:
        number.add_to(parser)


def check_distinct(parser: argparse.ArgumentParser, option: str, values: list) -> None:
    """Exit with a usage error (status 2) if ``values`` of ``option`` repeat."""
    if len(set(values)) != len(values):
        parser.error(f"argument {option}: must be distinct, got {' '.join(map(str, values))}")


@contextmanager
def usage_errors(parser: argparse.ArgumentParser):
    """Exit with status 2 and the message when what the command was given cannot be used.

    That is a run that stopped or cannot be rebuilt (:class:`~uncurated.errors.RunStopped`), a missing
    file or folder, or a value out of its range.
    """
    try:
        yield
    except (RunStopped, FileNotFoundError, ValueError) as error:
        parser.exit(2, f"{parser.prog}: error: {error}\n")


def add_source_arguments(parser: argparse.ArgumentParser, files: str) -> None:
    """``SOURCE``, a run folder or a saved file, and ``--out DIR``: what ``eval`` and ``bound`` read and write."""
    parser.add_argument("source", type=Path, metavar="SOURCE", help=f"a run folder (runs/NAME) or {files}")
    parser.add_argument("--out", type=Path, default=None, metavar="DIR", help="output folder")
