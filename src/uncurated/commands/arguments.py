"""What the subcommands share: argument types that name the accepted range, and how a usage error exits."""

from __future__ import annotations

import argparse
from contextlib import contextmanager
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
