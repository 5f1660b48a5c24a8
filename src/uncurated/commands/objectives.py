"""``uncurated objectives``: every objective with its summary and its parameters' defaults."""

from __future__ import annotations

import argparse

from .. import objectives
from ..demo import format_parameters

NAME = "objectives"
HELP = "list every objective with its summary and parameters"
DESCRIPTION = "List every contrastive objective: its name, summary and parameters with their defaults."


def run(args: argparse.Namespace) -> int:
    for spec in objectives.available():
        print(f"{spec.name}: {spec.summary}")
        print(f"    {format_parameters(spec.defaults)}")
    return 0
