"""How a toy command leaves its results: ``NAME.png`` and ``NAME.json`` (settings and rows) in one folder, ``--out``."""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable, Sequence
from dataclasses import asdict
from pathlib import Path


def write_toy_outputs(
    out: Path, name: str, rows: Sequence, settings: dict, plot: Callable[[Sequence, Path], Path]
) -> None:
    """Create ``out``, plot ``rows`` into ``NAME.png``, write ``settings`` and the rows to ``NAME.json``, say so."""
    out.mkdir(parents=True, exist_ok=True)
    figure = plot(rows, out / f"{name}.png")
    figures = out / f"{name}.json"
    figures.write_text(json.dumps({**settings, "rows": [asdict(row) for row in rows]}, indent=2) + "\n")
    print(f"\nwrote {figure} and {figures}")


def add_out_argument(parser: argparse.ArgumentParser, folder: str) -> None:
    """``--out DIR``: where a toy writes its PNG and JSON (default ``folder``)."""
    parser.add_argument(
        "--out",
        type=Path,
        default=Path(folder),
        metavar="DIR",
        help="folder for the PNG and JSON, created if missing (default: %(default)s)",
    )
