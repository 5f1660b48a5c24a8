"""PNG figures of the thesis's representation analyses, drawn on matplotlib's Agg canvas.

- :func:`pair_similarities` and :func:`plot_similarity_histograms`: the
  cosine similarities of positive and negative pairs as two overlaid density
  histograms (thesis Fig. 4-5: better representations separate the two).
- :func:`plot_tsne`: a t-SNE map of the features coloured by class (thesis
  Figs. 3-4, 5-4 and 8-4; scikit-learn's defaults on a random subset).
- :func:`plot_per_class_accuracy`: the per-class accuracies of several
  methods as grouped bars.

The figures are drawn on their own Agg canvas, leaving pyplot's global
backend alone. Each writer returns the path it wrote.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor

from ..validation import check_features, check_integer
from .classification import check_class_labels, check_feature_matrix, count_classes

__all__ = ["pair_similarities", "plot_per_class_accuracy", "plot_similarity_histograms", "plot_tsne"]


@torch.no_grad()
def pair_similarities(
    a: Tensor, b: Tensor, labels: Tensor | None = None, *, max_pairs: int = 100_000, seed: int = 0
) -> tuple[Tensor, Tensor]:
    """Float64 cosine similarities ``cos(a_i, b_j)`` of the positive and of the negative pairs.

    Without ``labels`` the positives are the aligned pairs ``(i, i)`` and the
    negatives every ``(i, j)`` with ``i != j``. With ``labels`` the positives
    are the pairs of equal labels (``i == j`` included) and the negatives the
    pairs of different labels. A group of more than ``max_pairs`` pairs is
    sampled uniformly, with replacement, from a generator seeded with ``seed``.

    Args:
        a, b: (B, d) aligned embeddings: two views, or images and their captions.
        labels: optional (B,) class indices.
    """
    check_features(a, b, names=("a", "b"))
    count = a.shape[0]
    if labels is None:
        labels = torch.arange(count)
    check_class_labels("labels", labels, count)
    max_pairs = check_integer("max_pairs", max_pairs, 1)
    generator = torch.Generator().manual_seed(check_integer("seed", seed, 0))
    a, b = F.normalize(a.double(), dim=1), F.normalize(b.double().to(a.device), dim=1)
    positive, negative = _pair_indices(labels.long().cpu())
    similarities = []
    for total, locate in (positive, negative):
        flat = torch.arange(total) if total <= max_pairs else torch.randint(total, (max_pairs,), generator=generator)
        rows, columns = (index.to(a.device) for index in locate(flat))
        similarities.append((a[rows] * b[columns]).sum(dim=1))
    return similarities[0], similarities[1]


_PairGroup = tuple[int, Callable[[Tensor], tuple[Tensor, Tensor]]]


def _pair_indices(labels: Tensor) -> tuple[_PairGroup, _PairGroup]:
    """For equal-label and for different-label pairs: their count and a map from ``0 .. count-1`` to ``(i, j)``.

    The pairs are enumerated over the rows sorted by label without forming the
    ``B x B`` grid, so a large batch can be sampled cheaply.
    """
    order = torch.argsort(labels, stable=True)
    _, sizes = torch.unique_consecutive(labels[order], return_counts=True)
    starts = torch.cumsum(sizes, 0) - sizes
    # Equal labels: class c owns sizes[c]^2 consecutive flat indices.
    block_ends = torch.cumsum(sizes * sizes, 0)

    def equal(flat: Tensor) -> tuple[Tensor, Tensor]:
        c = torch.searchsorted(block_ends, flat, right=True)
        offset = flat - (block_ends[c] - sizes[c] * sizes[c])
        return order[starts[c] + offset // sizes[c]], order[starts[c] + offset % sizes[c]]

    # Different labels: sorted row p (class c) owns B - sizes[c] flat indices, one per row outside its class.
    row_class = torch.repeat_interleave(torch.arange(len(sizes)), sizes)
    row_lengths = len(labels) - sizes[row_class]
    row_ends = torch.cumsum(row_lengths, 0)

    def different(flat: Tensor) -> tuple[Tensor, Tensor]:
        p = torch.searchsorted(row_ends, flat, right=True)
        c = row_class[p]
        column = flat - (row_ends[p] - row_lengths[p])
        column = column + sizes[c] * (column >= starts[c])
        return order[p], order[column]

    return (int(block_ends[-1]), equal), (int(row_ends[-1]), different)


def plot_similarity_histograms(
    positive_similarities: Tensor | np.ndarray,
    negative_similarities: Tensor | np.ndarray,
    path: str | Path,
    *,
    bins: int = 50,
    title: str | None = None,
) -> Path:
    """Two overlaid density histograms, positive and negative pairs, on shared bins (thesis Fig. 4-5)."""
    groups = {}
    named = (("positive_similarities", positive_similarities), ("negative_similarities", negative_similarities))
    for name, values in named:
        values = _flat_numpy(values)
        if values.size == 0 or not np.isfinite(values).all():
            raise ValueError(f"{name} must be a non-empty array of finite similarities, got {values.size} values")
        groups[name] = values
    bins = check_integer("bins", bins, 1)
    low = min(v.min() for v in groups.values())
    high = max(v.max() for v in groups.values())
    edges = np.linspace(low, high if high > low else low + 1e-6, bins + 1)
    figure, ax = _figure((5.0, 3.6))
    for kind, color in (("positive", "tab:blue"), ("negative", "tab:orange")):
        values = groups[f"{kind}_similarities"]
        ax.hist(values, bins=edges, density=True, alpha=0.55, color=color, label=f"{kind} pairs (n={values.size})")
    ax.set_xlabel("cosine similarity")
    ax.set_ylabel("density")
    if title:
        ax.set_title(title)
    ax.legend()
    return _save(figure, path)


def plot_tsne(
    features: Tensor,
    labels: Tensor,
    path: str | Path,
    class_names: Sequence[str] | None = None,
    max_points: int = 2000,
    seed: int = 0,
) -> Path:
    """A 2-D t-SNE map of at most ``max_points`` random rows (seeded), coloured by class.

    scikit-learn's t-SNE with its defaults (Euclidean distances on the
    features as given), except that the perplexity is lowered to
    ``(n - 1) / 3`` for ``n < 91`` points so that it stays below ``n``.
    """
    from sklearn.manifold import TSNE

    check_feature_matrix("features", features)
    check_class_labels("labels", labels, features.shape[0])
    num_classes = count_classes(labels)
    names = _class_names(class_names, num_classes)
    max_points = check_integer("max_points", max_points, 3)
    chosen = torch.randperm(features.shape[0], generator=torch.Generator().manual_seed(check_integer("seed", seed, 0)))
    chosen = chosen[:max_points].sort().values
    points = features.detach().double().cpu()[chosen].numpy()
    chosen_labels = labels.cpu()[chosen].numpy()
    if len(points) < 3:
        raise ValueError(f"features must have at least 3 rows for t-SNE, got {len(points)}")
    perplexity = min(30.0, (len(points) - 1) / 3)
    embedded = TSNE(perplexity=perplexity, random_state=seed).fit_transform(points)
    figure, ax = _figure((6.0, 5.0))
    colours = _colours(num_classes)
    for c in np.unique(chosen_labels):
        here = chosen_labels == c
        ax.scatter(embedded[here, 0], embedded[here, 1], s=6, color=colours[c], label=names[c])
    ax.set_xticks([])
    ax.set_yticks([])
    ax.set_title(f"t-SNE of {len(points)} points")
    if num_classes <= 20:
        ax.legend(markerscale=2.5, fontsize="small", loc="best")
    return _save(figure, path)


def plot_per_class_accuracy(
    per_class: Mapping[str, Sequence[float] | np.ndarray | Tensor],
    path: str | Path,
    class_names: Sequence[str] | None = None,
) -> Path:
    """Grouped bars: for each class, one bar per method (``per_class`` maps a method to its K accuracies).

    A ``nan`` accuracy (a class absent from the scored labels) draws no bar.
    """
    if not per_class:
        raise ValueError("per_class must map at least one method to its per-class accuracies, got none")
    rows = {method: _flat_numpy(values) for method, values in per_class.items()}
    num_classes = len(next(iter(rows.values())))
    for method, values in rows.items():
        if len(values) != num_classes or num_classes == 0:
            raise ValueError(
                f"per_class[{method!r}] must hold one accuracy per class like the first method "
                f"({num_classes} >= 1 values), got {len(values)}"
            )
    names = _class_names(class_names, num_classes)
    width = 0.8 / len(rows)
    positions = np.arange(num_classes)
    figure, ax = _figure((min(30.0, max(6.0, 1.5 + 0.25 * num_classes * math.sqrt(len(rows)))), 4.0))
    for m, (method, values) in enumerate(rows.items()):
        ax.bar(positions + (m - (len(rows) - 1) / 2) * width, np.nan_to_num(values, nan=0.0), width, label=method)
    slanted = num_classes > 10
    ax.set_xticks(
        positions,
        names[:num_classes],
        rotation=60 if slanted else 0,
        ha="right" if slanted else "center",
        fontsize="small",
    )
    ax.set_ylabel("accuracy")
    ax.set_ylim(0, 1)
    ax.legend(fontsize="small")
    ax.grid(axis="y", alpha=0.3)
    return _save(figure, path)


def _figure(size: tuple[float, float]):
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    figure = Figure(figsize=size, layout="constrained")
    FigureCanvasAgg(figure)
    return figure, figure.subplots()


def _save(figure, path: str | Path) -> Path:
    path = Path(path)
    figure.savefig(path, dpi=110)
    return path


def _colours(count: int) -> list:
    from matplotlib import colormaps

    name = "tab10" if count <= 10 else "tab20" if count <= 20 else "turbo"
    cmap = colormaps[name]
    return [cmap(i) for i in range(count)] if count <= 20 else [cmap(i / max(count - 1, 1)) for i in range(count)]


def _class_names(class_names: Sequence[str] | None, num_classes: int) -> list[str]:
    if class_names is None:
        return [str(c) for c in range(num_classes)]
    names = [str(name) for name in class_names]
    if len(names) < num_classes:
        raise ValueError(f"class_names must name all {num_classes} classes, got {len(names)} names")
    return names


def _flat_numpy(values: Tensor | np.ndarray | Sequence[float]) -> np.ndarray:
    if isinstance(values, Tensor):
        values = values.detach().cpu()
    return np.asarray(values, dtype=np.float64).reshape(-1)
