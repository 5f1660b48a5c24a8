"""Training metrics: a CSV file that grows row by row (and TensorBoard events when it is installed),
and a PNG of the curves at the end."""

from __future__ import annotations

import csv
import os
from pathlib import Path


class MetricsLog:
    """Appends rows of metrics to ``path`` (CSV with a header); survives resumption by appending.

    On resumption, rows past the restored step are dropped first, so the file
    matches the checkpoint the run continues from. When the ``tensorboard``
    package is installed the rows also go to ``tensorboard/`` beside the CSV.
    """

    def __init__(self, path: Path, fields: list[str], *, resume_step: int | None = None) -> None:
        self.path = path
        self.fields = fields
        kept = []
        if resume_step is not None and path.is_file():
            kept = [row for row in read_metrics(path) if int(row["step"]) <= resume_step]
        self._rewrite(kept)
        self.tensorboard = _tensorboard_writer(path.parent / "tensorboard")

    def write(self, row: dict[str, float]) -> None:
        with self.path.open("a", newline="") as file:
            csv.DictWriter(file, self.fields).writerow({key: row.get(key, "") for key in self.fields})
        if self.tensorboard is not None:
            for key, value in row.items():
                if key != "step" and isinstance(value, int | float):
                    self.tensorboard.add_scalar(key, value, int(row["step"]))
            self.tensorboard.flush()

    def _rewrite(self, rows: list[dict[str, str]]) -> None:
        """Replace the file by ``rows`` atomically: a kill meanwhile leaves the old file, never a cut one."""
        temporary = self.path.with_name(f".{self.path.name}.tmp")
        with temporary.open("w", newline="") as file:
            writer = csv.DictWriter(file, self.fields, extrasaction="ignore")  # a column this run does not log
            writer.writeheader()
            writer.writerows(rows)
        os.replace(temporary, self.path)


def _tensorboard_writer(folder: Path):
    try:
        from torch.utils.tensorboard import SummaryWriter
    except ImportError:  # tensorboard is optional
        return None
    return SummaryWriter(str(folder))


def read_metrics(path: Path) -> list[dict[str, str]]:
    with path.open(newline="") as file:
        return list(csv.DictReader(file))


def plot_curves(csv_path: Path, png_path: Path, keys: tuple[str, ...] = ("loss", "lr")) -> Path:
    """A PNG with one panel per metric in ``keys`` against the step."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    rows = read_metrics(csv_path)
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
