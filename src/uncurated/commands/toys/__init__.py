"""``uncurated toy TOY``: the theory's toy experiments, one module per toy."""

from __future__ import annotations

import argparse

from .. import add_command
from . import clip_margin, dcl, nuclr, wpse

TOYS = (nuclr, wpse, dcl, clip_margin)
NAME = "toy"
HELP = "run a toy experiment of the theory"
DESCRIPTION = "Toy experiments with a known true model, where the papers' claims can be checked exactly."
EPILOG = "Run `uncurated toy TOY --help` for the options of a toy."


def add_arguments(parser: argparse.ArgumentParser) -> None:
    toys = parser.add_subparsers(title="toys", dest="toy", required=True, metavar="TOY")
    for module in TOYS:
        add_command(toys, module)
