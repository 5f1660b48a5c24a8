"""Debiasing a trained image-text model on the spurious benchmark: zero-shot group metrics before and after.

The model must have been trained on ``dataset=fashion-spurious`` (``uncurated debias RUN`` rebuilds a
run's model and checks that it was) (tops and
footwear whose background, dark or light, follows the class in training and
not at test). The text tower embeds the targets' prompts into zero-shot class
vectors; three classifiers are compared on the balanced test split:

* ``none``: the class vectors as they are;
* ``orthogonal``: with the spurious directions (the embeddings of the prompt
  set's spurious prompts) projected out, ``P0`` (thesis Sec. 7.2);
* ``calibrated``: ``P* = P0 (I + lambda/|S| sum (z_i - z_j)(z_i - z_j)^T)^-1``
  from the set's pairs that differ only in the background (Lemma 7.1).

Images are not touched: the projection acts on the text side only. Besides
classification, each target's class vector retrieves its ``top_k`` nearest
test images, and MaxSkew@k measures how unevenly the two backgrounds fill
that list (0: balanced, log 2: one background only; the test split is
balanced, so a fair retriever scores near 0).
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
import torch.nn.functional as F

from .. import data
from .metrics import group_robustness, max_skew_at_k
from .projection import DISCRIMINATIVE_LAMBDA, calibrated_projection, orthogonal_projection, project
from .prompts import load_prompts

METHODS = ("none", "orthogonal", "calibrated")


@torch.no_grad()
def debias_model(
    model, test_split, *, prompts: str = "fashion-captions", lam: float = DISCRIMINATIVE_LAMBDA, top_k: int = 100
) -> dict:
    """Group metrics of ``model``'s zero-shot classifier on the spurious ``test_split``, before and after
    projection (see the module docstring); ``model`` embeds images and texts, in eval mode."""
    test = test_split.batch(torch.arange(len(test_split)))
    images = F.normalize(torch.cat([model.embed_images(chunk) for chunk in test["image"].split(1024)]), dim=-1)

    def embed(texts: list[str]) -> torch.Tensor:
        return F.normalize(model.embed_texts(texts).double(), dim=-1)

    prompt_set = load_prompts(prompts)
    class_vectors = torch.stack([embed(group).mean(0) for group in data.target_prompts()])
    spurious = embed(list(prompt_set.spurious_prompts)).T
    pairs = prompt_set.pairs([prompt_set.classes[label] for group in data.TARGET_CLASSES for label in group])
    z_i, z_j = embed([a for a, _ in pairs]), embed([b for _, b in pairs])
    p0 = orthogonal_projection(spurious)
    projections = {
        "none": torch.eye(class_vectors.shape[1], dtype=class_vectors.dtype),
        "orthogonal": p0,
        "calibrated": calibrated_projection(p0, z_i, z_j, lam=lam),
    }
    results = {}
    for method, matrix in projections.items():
        weights = project(class_vectors, matrix).float()
        predictions = (images @ weights.T).argmax(dim=1)
        scores = group_robustness(predictions, test_split.target, test_split.group)
        retrieved = (weights @ images.T).topk(min(top_k, len(images)), dim=1).indices
        skews = [max_skew_at_k(test_split.attribute[row], 2) for row in retrieved]
        results[method] = {
            "worst_group": scores.worst_group,
            "average": scores.average,
            "gap": scores.gap,
            "max_skew_at_k": sum(skews) / len(skews),
            "per_group": {data.GROUP_NAMES[g]: accuracy for g, accuracy in scores.per_group.items()},
        }
    return {"prompts": prompts, "lambda": lam, "pairs": len(pairs), "top_k": top_k, "results": results}


def write_outputs(report: dict, out: Path) -> tuple[Path, Path]:
    """``debias.json`` and ``debias.png`` (worst-group and average accuracy per method) in ``out``."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    out.mkdir(parents=True, exist_ok=True)
    json_path, png_path = out / "debias.json", out / "debias.png"
    json_path.write_text(json.dumps(report, indent=2) + "\n")
    figure = Figure(figsize=(5.5, 3.4), layout="constrained")
    FigureCanvasAgg(figure)
    ax = figure.subplots()
    methods = list(report["results"])
    for offset, key in ((-0.2, "worst_group"), (0.2, "average")):
        values = [100 * report["results"][m][key] for m in methods]
        ax.bar([i + offset for i in range(len(methods))], values, width=0.4, label=key.replace("_", "-"))
    ax.set_xticks(range(len(methods)), methods)
    ax.set_ylabel("zero-shot accuracy (%)")
    ax.set_ylim(0, 100)
    ax.legend()
    ax.set_title("spurious FashionCaptions: before and after projection")
    figure.savefig(png_path, dpi=110)
    return json_path, png_path


def format_table(report: dict) -> str:
    lines = [f"{'method':>11} {'worst-group':>12} {'average':>8} {'gap':>6} {'MaxSkew@' + str(report['top_k']):>12}"]
    for method, row in report["results"].items():
        lines.append(
            f"{method:>11} {100 * row['worst_group']:>11.2f}% {100 * row['average']:>7.2f}% {100 * row['gap']:>5.2f}"
            f" {row['max_skew_at_k']:>12.3f}"
        )
    return "\n".join(lines)
