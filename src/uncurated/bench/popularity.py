"""The bench's view of NUCLR's learned popularities (Wang et al. 2025): each class's mean zeta against its share
of the training pairs, on the noisy image-text data, with their Spearman correlation per side."""

from __future__ import annotations

from pathlib import Path

from .manipulation import spearman, zeta_reading


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
        points = []
        for run in runs:
            reading = zeta_reading({**run.report, "run": str(run.folder)})
            if reading is None:
                raise ValueError(f"{run.folder} has no checkpoint to read zeta from")
            points += [(p["side"], p["class"], p["share"], p["zeta"]) for p in reading["points"]]
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
        correlations[side] = spearman([f for f, _ in chosen], [z for _, z in chosen])
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
