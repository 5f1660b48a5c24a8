"""The report's plots, as dot plots with intervals on axes that do not exaggerate.

* :func:`claims_plot`: one row per claim measured in accuracy points, our
  mean paired difference with its 95% interval, the paper's effect marked,
  the band of +-SESOI shaded and zero drawn: the reader sees at once whether
  the interval reaches the paper, sits inside the band, or says nothing;
* :func:`arms_plot`: one row per arm, its mean over seeds with the seeds'
  range, on the full 0 to 100% axis with chance (and a baseline) marked, so a
  difference of a point looks like one.
"""

from __future__ import annotations

import math
import textwrap
from pathlib import Path

#: Characters per line of a row's label: a claim's title wraps rather than squeezing the plot out of the figure.
LABEL_WIDTH = 58


def claims_plot(claims, path: Path) -> Path | None:
    """The claims in accuracy points (see the module's documentation); ``None`` when none was measured."""
    figure = claims_figure(claims)
    if figure is None:
        return None
    figure.savefig(path, dpi=110)
    return path


def claims_figure(claims):
    """The figure :func:`claims_plot` saves."""
    rows = [claim for claim in claims if claim.spec.unit == "points" and claim.verdict.count > 0]
    if not rows:
        return None
    figure, ax = _figure(len(rows))
    for position, claim in enumerate(rows):
        spec, v = claim.spec, claim.verdict
        y = len(rows) - 1 - position
        ax.fill_betweenx([y - 0.3, y + 0.3], -100 * spec.sesoi, 100 * spec.sesoi, color="0.88", linewidth=0)
        if math.isfinite(v.low):
            ax.plot([100 * v.low, 100 * v.high], [y, y], color="tab:blue", linewidth=2)
        ax.plot(100 * v.mean, y, "o", color="tab:blue")
        ax.plot(100 * spec.paper_effect, y, "D", color="tab:red", markerfacecolor="none", markersize=7)
    ax.axvline(0, color="black", linewidth=0.8)
    labels = [_wrapped(f"{c.spec.title} ({c.verdict.label})") for c in reversed(rows)]
    ax.set_yticks(range(len(rows)), labels, fontsize=7)
    ax.set_xlabel("effect in accuracy points\ndot: ours with its 95% interval; diamond: the paper's; grey: ±SESOI")
    ax.grid(axis="x", alpha=0.3)
    return figure


def arms_plot(rows, path: Path, xlabel: str, chance: float | None, baseline: float | None) -> Path | None:
    """``rows``: (label, values over seeds as fractions); dots at the mean, lines over the seeds' range, on 0-100%."""
    figure = arms_figure(rows, xlabel, chance, baseline)
    if figure is None:
        return None
    figure.savefig(path, dpi=110)
    return path


def arms_figure(rows, xlabel: str, chance: float | None, baseline: float | None):
    """The figure :func:`arms_plot` saves."""
    rows = [(label, values) for label, values in rows if values]
    if not rows:
        return None
    figure, ax = _figure(len(rows))
    for position, (_, values) in enumerate(rows):
        y = len(rows) - 1 - position
        mean = sum(values) / len(values)
        ax.plot([100 * min(values), 100 * max(values)], [y, y], color="tab:blue", linewidth=2)
        ax.plot(100 * mean, y, "o", color="tab:blue")
    if chance is not None:
        ax.axvline(100 * chance, color="tab:red", linestyle=":", linewidth=1, label="chance")
    if baseline is not None:
        ax.axvline(100 * baseline, color="black", linestyle="--", linewidth=1, label="raw pixels")
    if chance is not None or baseline is not None:
        ax.legend(fontsize=7, loc="lower right")
    ax.set_xlim(0, 100)
    ax.set_yticks(range(len(rows)), [_wrapped(label) for label, _ in reversed(rows)], fontsize=7)
    ax.set_xlabel(f"{xlabel} (%); dot: mean over seeds, line: the seeds' range")
    ax.grid(axis="x", alpha=0.3)
    return figure


def _wrapped(label: str) -> str:
    return textwrap.fill(label, LABEL_WIDTH)


def _figure(rows: int):
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    figure = Figure(figsize=(9.0, 1.4 + 0.42 * rows), layout="constrained")
    FigureCanvasAgg(figure)
    return figure, figure.subplots()
