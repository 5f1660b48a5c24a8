"""Reading a run's measurements, and summarizing them over seeds.

:func:`metric` is the one place that knows the shape of a run's
``report["evaluation"]``: every table and claim asks it for a logical name
(``"linear_probe.accuracy"``, ``"zero_shot.top1"``, ...), and it tries the
layouts the evaluation has had, returning ``None`` when a value is absent.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

#: Logical metric name -> the paths (dotted keys under ``report["evaluation"]``) that may hold it, in order.
METRIC_PATHS: dict[str, tuple[str, ...]] = {
    "linear_probe.accuracy": ("linear_probe.accuracy",),
    "linear_probe.raw_pixels_accuracy": ("linear_probe.raw_pixels_accuracy", "raw_pixels.accuracy"),
    "linear_probe.untrained_accuracy": ("linear_probe.untrained_accuracy", "untrained.accuracy"),
    "knn.accuracy": ("knn.accuracy", "knn.top1"),
    "mean_classifier.accuracy": ("mean_classifier.accuracy", "mean_classifier.top1"),
    "zero_shot.top1": ("zero_shot.top1", "zero_shot.accuracy", "zero_shot_accuracy"),
    "zero_shot.top5": ("zero_shot.top5",),
    "retrieval.image_to_text_r1": ("retrieval.image_to_text_r1",),
    "retrieval.text_to_image_r1": ("retrieval.text_to_image_r1",),
    "retrieval.image_to_text_r5": ("retrieval.image_to_text_r5",),
    "retrieval.text_to_image_r5": ("retrieval.text_to_image_r5",),
    "embeddings.image_effective_rank": ("embeddings.image_effective_rank",),
}

#: The columns of each suite's results table: (logical metric, header).
TWO_VIEW_COLUMNS = (
    ("linear_probe.accuracy", "linear probe"),
    ("knn.accuracy", "kNN"),
    ("mean_classifier.accuracy", "mean classifier"),
)
IMAGE_TEXT_COLUMNS = (
    ("zero_shot.top1", "zero-shot top-1"),
    ("retrieval.image_to_text_r1", "R@1 image->text"),
    ("retrieval.text_to_image_r1", "R@1 text->image"),
    ("linear_probe.accuracy", "linear probe"),
)


def metric(report: dict | None, name: str) -> float | None:
    """The value of logical metric ``name`` in a run's report, or ``None`` when the report lacks it."""
    if not report:
        return None
    evaluation = report.get("evaluation") or {}
    for path in METRIC_PATHS.get(name, (name,)):
        value = _lookup(evaluation, path)
        if isinstance(value, int | float) and not isinstance(value, bool):
            return float(value)
    return None


def _lookup(tree: dict, path: str):
    node = tree
    for part in path.split("."):
        if not isinstance(node, dict) or part not in node:
            return None
        node = node[part]
    return node


@dataclass(frozen=True)
class Summary:
    """A metric over seeds: mean, sample standard deviation (0 for one seed) and count."""

    mean: float
    std: float
    count: int

    @property
    def stderr(self) -> float:
        return self.std / math.sqrt(self.count) if self.count > 1 else math.nan


def summarize(values: Iterable[float | None]) -> Summary | None:
    """The :class:`Summary` of the finite values, or ``None`` when there is none."""
    kept = [float(v) for v in values if v is not None and math.isfinite(v)]
    if not kept:
        return None
    mean = sum(kept) / len(kept)
    std = math.sqrt(sum((v - mean) ** 2 for v in kept) / (len(kept) - 1)) if len(kept) > 1 else 0.0
    return Summary(mean, std, len(kept))


def format_summary(summary: Summary | None, *, percent: bool = True, digits: int = 2) -> str:
    """``"86.47 ± 0.31"`` (in percent by default), the mean alone for one seed, ``"—"`` when missing."""
    if summary is None:
        return "—"
    scale = 100.0 if percent else 1.0
    text = f"{scale * summary.mean:.{digits}f}"
    if summary.count > 1:
        text += f" ± {scale * summary.std:.{digits}f}"
    return text


def per_seed(reports: dict[int, dict], name: str) -> dict[int, float]:
    """``{seed: value}`` of a metric over the runs of one arm, leaving out seeds without it."""
    values = {seed: metric(report, name) for seed, report in reports.items()}
    return {seed: value for seed, value in values.items() if value is not None and math.isfinite(value)}


def paired_differences(first: dict[int, float], second: dict[int, float]) -> list[float]:
    """``first[s] - second[s]`` for the seeds both have (a paired comparison: same seed, same data)."""
    return [first[seed] - second[seed] for seed in sorted(first) if seed in second]


def mean(values: Sequence[float]) -> float:
    return sum(values) / len(values) if values else math.nan
