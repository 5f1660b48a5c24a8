"""The bounds of Nozawa & Sato 2021 on a trained encoder: augmented features, the table over K, the Fig. 1 plot.

The paper's procedure (Sec. 5, "Bound Evaluation"): embed several
augmentations of every training sample to get the class means ``mu_c``, embed
as many augmentations of every validation sample (view 0 is the anchor, view
1 the positive and negative candidate, their mean ``mu(x)``), then measure
both bounds for each ``K`` with :func:`.negatives_bound.bound_terms`. The
features can be saved (``save_features``) and measured again later or
elsewhere without the model.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import Tensor

from ..classes import class_means
from ..validation import check_integer
from .negatives_bound import BoundTerms, bound_terms, collision_bound

FEATURE_KEYS = ("train_views", "train_labels", "test_views", "test_labels", "temperature")


@dataclass
class BoundFeatures:
    """L2-normalized embeddings of ``A`` augmentations per sample, (N, A, d), with labels and the temperature."""

    train_views: Tensor
    train_labels: Tensor
    test_views: Tensor
    test_labels: Tensor
    temperature: float

    @property
    def classes(self) -> int:
        return int(max(self.train_labels.max(), self.test_labels.max())) + 1


@torch.no_grad()
def augmented_embeddings(
    embed: Callable[[Tensor], Tensor],
    images: Tensor,
    augment: Callable[[Tensor, torch.Generator], Tensor],
    *,
    views: int = 10,
    seed: int = 0,
    batch_size: int = 512,
    progress: Callable[[int], object] | None = None,
) -> Tensor:
    """(N, views, d) L2-normalized ``embed(augment(images))``, one independent augmentation per view.

    ``augment(batch, generator)`` must draw its randomness from ``generator``
    (as :class:`uncurated.data.Augmentation` does), so the result depends on
    ``seed`` only. ``progress`` is called with the number of images embedded.
    """
    views = check_integer("views", views, 1)
    generator = torch.Generator().manual_seed(seed)
    chunks = []
    for start in range(0, len(images), batch_size):
        batch = images[start : start + batch_size]
        embedded = [embed(augment(batch, generator)).float().cpu() for _ in range(views)]
        chunks.append(torch.nn.functional.normalize(torch.stack(embedded, dim=1), dim=-1))
        if progress is not None:
            progress(len(batch) * views)
    return torch.cat(chunks)


def save_features(features: BoundFeatures, path: Path) -> None:
    torch.save({key: getattr(features, key) for key in FEATURE_KEYS}, path)


def load_features(path: Path) -> BoundFeatures:
    """Features saved by :func:`save_features` (or any ``torch.save``-d dict with :data:`FEATURE_KEYS`)."""
    content = torch.load(path, map_location="cpu", weights_only=True)
    missing = [key for key in FEATURE_KEYS if not isinstance(content, dict) or key not in content]
    if missing:
        raise ValueError(f"{path} is not a bound feature file: it lacks {', '.join(missing)}")
    return BoundFeatures(**{key: content[key] for key in FEATURE_KEYS[:4]}, temperature=float(content["temperature"]))


@dataclass(frozen=True)
class BoundReport:
    """The bound terms for every ``K``, and the K-independent collision bound of Eq. 27."""

    rows: tuple[BoundTerms, ...]
    collision_bound: float

    def as_dict(self) -> dict:
        return {"collision_bound": self.collision_bound, "rows": [row.as_dict() for row in self.rows]}


def measure_bounds(
    features: BoundFeatures, negatives: Sequence[int], *, epochs: int = 10, seed: int = 0
) -> BoundReport:
    """Bound terms for each ``K`` in ``negatives`` on ``features`` (class means from the training views)."""
    if not negatives:
        raise ValueError("negatives must list at least one K")
    means = class_means(features.train_views, features.train_labels, features.classes, normalize=False)
    rows = tuple(
        bound_terms(
            features.test_views,
            features.test_labels,
            means,
            k,
            temperature=features.temperature,
            epochs=epochs,
            seed=seed,
        )
        for k in negatives
    )
    spread = collision_bound(features.train_views[:, 0], features.train_views[:, 1], features.train_labels)
    return BoundReport(rows, spread)


#: Table rows: (label, attribute), in the order of the paper's Tables 1 and 4-6.
TABLE_ROWS = (
    ("tau", "tau"),
    ("v", "v"),
    ("mean classifier acc", "mean_accuracy"),
    ("L_Info", "info_nce"),
    ("d(f)", "gap"),
    ("bound (8)", "bound_curl"),
    ("collision (8)", "collision_curl"),
    ("L_sup (8)", "sup_curl"),
    ("L_sub (8)", "sub_curl"),
    ("bound (10)", "bound"),
    ("L_sup (10)", "sup"),
    ("L_sub (10)", "sub"),
    ("supervised loss", "supervised_loss"),
    ("upper bound (8)", "upper_curl"),
    ("upper bound (10)", "upper"),
)


def format_bound_table(report: BoundReport) -> str:
    """The report as the paper prints it: one column per ``K + 1``, terms with their coefficients."""
    header = f"{'K + 1':<22}" + "".join(f"{row.negatives + 1:>12}" for row in report.rows)
    lines = [header]
    for label, attribute in TABLE_ROWS:
        lines.append(f"{label:<22}" + "".join(_cell(getattr(row, attribute)) for row in report.rows))
    lines.append(f"{'collision bound (27)':<22}{report.collision_bound:>12.3f}  (K-independent)")
    return "\n".join(lines)


def _cell(value: float) -> str:
    return f"{value:>12.3f}" if abs(value) < 1e5 else f"{value:>12.3g}"


def plot_bounds(report: BoundReport, path: Path) -> None:
    """Nozawa & Sato 2021, Fig. 1 in spirit: both upper bounds on the supervised loss and the loss itself against K."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ks = [row.negatives for row in report.rows]
    figure, axis = plt.subplots(figsize=(6, 4))
    for attribute, label, marker in (
        ("upper_curl", "upper bound from Eq. 8 (CURL)", "o"),
        ("upper", "upper bound from Eq. 10 (proposed)", "*"),
        ("supervised_loss", "mean classifier's supervised loss", "s"),
    ):
        values = [getattr(row, attribute) for row in report.rows]
        shown = [(k, v) for k, v in zip(ks, values, strict=True) if 0 < v < float("inf")]
        if shown:
            axis.plot(*zip(*shown, strict=True), marker=marker, label=label)
    axis.set_xscale("log", base=2)
    axis.set_yscale("log")
    axis.set_xlabel("negatives K")
    axis.set_ylabel("supervised loss (log scale)")
    axis.set_title("Bounds on the supervised loss against K (Nozawa & Sato 2021, Fig. 1)")
    axis.legend(fontsize=8)
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)
