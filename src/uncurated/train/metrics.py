"""Training metrics: a CSV file that grows row by row (and the trackers ``report_to`` names, :mod:`.trackers`),
and a PNG of the curves at the end."""

from __future__ import annotations

import csv
import os
from collections.abc import Sequence
from pathlib import Path

from .trackers import Tracker

#: The prefix of the columns of an evaluation during training (:mod:`.periodic_evaluation`), added to the file by
#: its first evaluation row.
EVALUATION_PREFIX = "eval_"


class MetricsLog:
    """Appends rows of metrics to ``path`` (CSV with a header); survives resumption by appending.

    On resumption, rows past the restored step are dropped first, so the file
    matches the checkpoint the run continues from. Every row also goes to the
    ``trackers`` (its numbers but the step, at its step). A row with columns the
    file lacks (an evaluation's, :data:`EVALUATION_PREFIX`) rewrites the file
    with them added; the rows before hold them empty.
    """

    def __init__(
        self,
        path: Path,
        fields: list[str],
        *,
        resume_step: int | None = None,
        trackers: Sequence[Tracker] = (),
    ) -> None:
        self.path = path
        self.fields = list(fields)
        kept = []
        if resume_step is not None and path.is_file():
            kept = [row for row in read_metrics(path) if int(row["step"]) <= resume_step]
            header = kept[0] if kept else {}
            self.fields += [key for key in header if key.startswith(EVALUATION_PREFIX) and key not in self.fields]
        self._rewrite(kept)
        self.trackers = list(trackers)

    def write(self, row: dict[str, float]) -> None:
        added = [key for key in row if key not in self.fields]
        if added:
            self.fields += added
            self._rewrite(read_metrics(self.path))
        with self.path.open("a", newline="") as file:
            csv.DictWriter(file, self.fields).writerow({key: row.get(key, "") for key in self.fields})
        values = {key: value for key, value in row.items() if key != "step" and isinstance(value, int | float)}
        for tracker in self.trackers:
            tracker.log(values, int(row["step"]))

    def close(self) -> None:
        """Close the trackers (the CSV file is closed after every row)."""
        for tracker in self.trackers:
            tracker.close()
        self.trackers = []

    def _rewrite(self, rows: list[dict[str, str]]) -> None:
        """Replace the file by ``rows`` atomically: a kill meanwhile leaves the old file, never a cut one."""
        temporary = self.path.with_name(f".{self.path.name}.tmp")
        with temporary.open("w", newline="") as file:
            writer = csv.DictWriter(file, self.fields, extrasaction="ignore")  # a column this run does not log
            writer.writeheader()
            writer.writerows(rows)
        os.replace(temporary, self.path)


def read_metrics(path: Path) -> list[dict[str, str]]:
    with path.open(newline="") as file:
        return list(csv.DictReader(file))


def plot_curves(csv_path: Path, png_path: Path, keys: tuple[str, ...] = ("loss", "lr")) -> Path:
    """A PNG with one panel per metric in ``keys`` against the step."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    rows = [row for row in read_metrics(csv_path) if row.get("loss", "") != ""]  # not an evaluation's rows
    keys = tuple(key for key in keys if rows and rows[0].get(key, "") != "")
    figure = Figure(figsize=(4.5 * max(len(keys), 1), 3.4), layout="constrained")
    FigureCanvasAgg(figure)
    axes = figure.subplots(1, max(len(keys), 1), squeeze=False)[0]
    steps = [int(row["step"]) for row in rows]
    for ax, key in zip(axes[: len(keys)], keys, strict=True):  # no key: one empty panel
        ax.plot(steps, [float(row[key]) for row in rows])
        ax.set_xlabel("step")
        ax.set_title(key)
        ax.grid(alpha=0.3)
    figure.savefig(png_path, dpi=110)
    return png_path
