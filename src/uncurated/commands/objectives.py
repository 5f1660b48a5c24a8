"""``uncurated objectives``: every objective with its summary, its parameters' defaults and its papers."""

from __future__ import annotations

import argparse

NAME = "objectives"
HELP = "list every objective with its summary, parameters and papers"
DESCRIPTION = (
    "List every contrastive objective: its name, summary, parameters with their defaults, and the papers to "
    "cite (docs/references.md has their BibTeX)."
)


def run(args: argparse.Namespace) -> int:
    from .. import objectives
    from ..demo import format_parameters

    for spec in objectives.available():
        print(f"{spec.name}: {spec.summary}")
        print(f"    {format_parameters(spec.defaults)}")
        for reference in spec.papers:
            print(f"    paper: {reference.citation()}")
    return 0
