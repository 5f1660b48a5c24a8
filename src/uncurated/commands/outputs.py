"""How a toy command leaves its results: ``NAME.png`` and ``NAME.json`` (settings and rows) in one folder."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import asdict
from pathlib import Path


def write_toy_outputs(out: Path, name: str, rows: Sequence, settings: dict, plot: Callable[[Sequence, Path], Path]) -> None:
    """Create ``out``, plot ``rows`` into ``NAME.png``, write ``settings`` and the rows to ``NAME.json``, say so."""
    out.mkdir(parents=True, exist_ok=True)
    figure = plot(rows, out / f"{name}.png")
    figures = out / f"{name}.json"
    figures.write_text(json.dumps({**settings, "rows": [asdict(row) for row in rows]}, indent=2) + "\n")
    print(f"\nwrote {figure} and {figures}")
