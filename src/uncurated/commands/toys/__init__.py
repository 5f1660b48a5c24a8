"""``uncurated toy TOY``: the theory's toy experiments, one module per toy.

A toy module states its ``NAME``, ``HELP``, ``DESCRIPTION``, its numeric options as data (``OPTIONS``, a tuple of
:class:`~uncurated.commands.arguments.Number`) and ``run``; :func:`add_toy` builds every toy's parser alike, its
numbers then ``--out`` (default ``runs/toy-NAME``)."""

from __future__ import annotations

import argparse
from types import ModuleType

from .. import add_command
from ..arguments import add_numbers
from ..outputs import add_out_argument
from . import clip_margin, dcl, nuclr, wpse

TOYS = (nuclr, wpse, dcl, clip_margin)
NAME = "toy"
HELP = "run a toy experiment of the theory"
DESCRIPTION = "Toy experiments with a known true model, where the papers' claims can be checked exactly."
EPILOG = "Run `uncurated toy TOY --help` for the options of a toy."


def add_arguments(parser: argparse.ArgumentParser) -> None:
    toys = parser.add_subparsers(title="toys", dest="toy", required=True, metavar="TOY")
    for module in TOYS:
        add_toy(toys, module)


def add_toy(toys: argparse._SubParsersAction, module: ModuleType) -> argparse.ArgumentParser:
    """The parser of the toy ``module``: its ``OPTIONS``, then ``--out`` for its PNG and JSON."""
    parser = add_command(toys, module)
    add_numbers(parser, module.OPTIONS)
    add_out_argument(parser, f"runs/toy-{module.NAME}")
    return parser
