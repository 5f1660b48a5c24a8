"""The bench's view of NUCLR's learned popularities (Wang et al. 2025): each class's mean zeta against its share
of the training pairs, on the noisy image-text data, with their Spearman correlation per side."""

from __future__ import annotations

import math
from pathlib import Path


def popularity_plot(results, path: Path) -> dict:
    """NUCLR's learned zeta averaged per class, against the class frequency of its training pairs (noisy data)."""
    runs = [
        run
        for run in results.runs
        if run.spec.suite == "image_text" and run.spec.arm.objective_key == "nuclr" and run.spec.arm.role == "noisy"
    ]
    if not runs:
        return {}
    try:
        from ..data import TensorImageDataset
        from ..objectives import StatefulObjective
        from ..train.restore import load_run

        points = []
        for run in runs:
            restored = load_run(run.folder)
            train, objective = restored.splits.train, restored.objective
            if not isinstance(train, TensorImageDataset) or not isinstance(objective, StatefulObjective):
                raise ValueError(f"{run.folder}: NUCLR's popularity plot needs its in-memory data and per-sample state")
            labels = train.labels.cpu()
            for side in ("a", "b"):
                _, zeta = objective.sample_values("zeta", side)  # one process: every sample's row
                for label in labels.unique().tolist():
                    members = labels == label
                    points.append((side, int(label), float(members.double().mean()), float(zeta[members].mean())))
    except Exception as error:  # the plot is a view of the run, not a reason to lose the report
        return {"text": f"NUCLR's popularities could not be read ({type(error).__name__}: {error})."}
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    figure = Figure(figsize=(5.5, 4.0), layout="constrained")
    FigureCanvasAgg(figure)
    ax = figure.subplots()
    correlations = {}
    for side, marker, label in (("a", "o", "image side"), ("b", "^", "text side")):
        chosen = [(f, z) for s, _, f, z in points if s == side]
        ax.scatter([f for f, _ in chosen], [z for _, z in chosen], marker=marker, label=label)
        correlations[side] = _spearman([f for f, _ in chosen], [z for _, z in chosen])
    ax.set_xscale("log")
    ax.set_xlabel("class share of the training pairs (log scale)")
    ax.set_ylabel("mean learned zeta of the class")
    ax.set_title("NUCLR popularity vs class frequency", fontsize=9)
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    figure.savefig(path, dpi=110)
    text = (
        "NUCLR's learned popularity: Spearman correlation between a class's share of the training pairs and "
        f"its mean zeta, {correlations['a']:+.2f} on the image side and {correlations['b']:+.2f} on the text "
        "side (popular classes, more likely false negatives, should get larger zeta)."
    )
    return {
        "figure": str(path),
        "text": text,
        "spearman_image": correlations["a"],
        "spearman_text": correlations["b"],
        "points": [{"side": s, "class": c, "frequency": f, "zeta": z} for s, c, f, z in points],
    }


def _spearman(x: list[float], y: list[float]) -> float:
    def ranks(values):
        order = sorted(range(len(values)), key=values.__getitem__)
        result = [0.0] * len(values)
        for rank, index in enumerate(order):
            result[index] = float(rank)
        return result

    if len(x) < 2:
        return math.nan
    rx, ry = ranks(x), ranks(y)
    mx, my = sum(rx) / len(rx), sum(ry) / len(ry)
    cov = sum((a - mx) * (b - my) for a, b in zip(rx, ry, strict=True))
    var = math.sqrt(sum((a - mx) ** 2 for a in rx) * sum((b - my) ** 2 for b in ry))
    return cov / var if var else math.nan
