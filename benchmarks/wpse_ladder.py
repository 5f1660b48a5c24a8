"""The ablation ladder from CLIP to WPSE (Uesaka et al. 2025), at the quick bench's image-text budget.

Every rung trains the quick preset's noisy image-text run (24,000 FashionCaptions pairs, 1.5 epochs at batch
64, the same ResNet, data and seeds) and changes one thing from the rung before:

    a    CLIP on the trained transformer text tower (the bench's twin of the WPSE arm)
    b    CLIP on the point-set head: one point per side (the pooled features), weight 1, linear kernel
    c    WPSE Linear: every token a point, learned weights (100 tanh), the linear kernel alone
    d    WPSE: the official kernel mix, 0.667 u.v + 0.333 Gaussian(sigma 0.5)
    dt   (d) with the paper's learned temperature (1/t = theta from 1/0.07, clamped to [1, 100])
    e-*  (d) or (dt) with the kernels and mixes the paper searched, one seed each
    fa   CLIP on the frozen MiniLM tower (the bench's default recipe)
    f    the best WPSE rung on the frozen MiniLM tower's token states, a trained point-set head

Each run's joint space is measured from its checkpoint by two protocols, over the same 5 fixed
random-feature draws (D = 512): the cosine of the embeddings (how the run evaluation scored every model before
point sets were scored by their own similarity), and the similarity the model was trained with: the cosine
for CLIP, the dot product of Eq. 8 vectors for point sets (Uesaka et al. 2025, Sec. 6.2: a class is the plain
mean of its prompts' vectors, not renormalized). For rung (b), whose vectors are unit vectors, the two agree.
The probe reads the image encoder's features either way.

Runs live in ``--out`` (``runs/wpse-ladder``), one folder each; a finished run is reused, an interrupted one
resumes, so the command can be run again until everything is done. ``--shard I/N`` trains every N-th run
from the I-th (two processes on two cores). The summary goes to ``benchmarks/results/wpse_ladder.json`` and
``.png``: mean +- std over the seeds of each rung.

    python benchmarks/wpse_ladder.py --rungs a b c d dt            # train and summarize these rungs
    python benchmarks/wpse_ladder.py --summarize                   # only evaluate finished runs and write
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
import time
from pathlib import Path

import torch

from uncurated.bench.presets import NOISY, QUICK
from uncurated.bench.runner import prepare_data
from uncurated.train import load_config, train

RESULTS = Path(__file__).resolve().parent / "results"
SEEDS = (0, 1, 2)
TRANSFORMER = ("text_encoder=transformer",)
MINILM = ("text_encoder=minilm",)
POINT_SETS = ("point_sets=true",)
NO_POSITIONS = ("wpse_image_positions=false",)  # the image points as (c) and (d) first had them: cells, no position
POSITIONS = ("wpse_image_positions=true",)
LINEAR = ("wpse_kernel_weights=[1, 0]",)
PAPER_TEMPERATURE = ("objective.learnable=true", "objective.temperature=0.07")

#: rung -> (label, overrides, seeds)
RUNGS: dict[str, tuple[str, tuple[str, ...], tuple[int, ...]]] = {
    "a": ("CLIP", TRANSFORMER, SEEDS),
    "b": (
        "CLIP on the point-set head (M = 1, w = 1, linear)",
        TRANSFORMER + POINT_SETS + ("wpse_points=pooled", "wpse_weights=ones") + LINEAR,
        SEEDS,
    ),
    "c": ("WPSE Linear (M cells, learned w, linear)", TRANSFORMER + POINT_SETS + LINEAR + NO_POSITIONS, SEEDS),
    "d": ("WPSE, official mix (0.667, 0.333), Gaussian 0.5", TRANSFORMER + POINT_SETS + NO_POSITIONS, SEEDS),
    # Where (b) -> (c) loses its points: the image's layout, which CLIP's 2 x 2 grid pooling keeps and a set of
    # feature-map cells does not (a ViT's tokens carry position embeddings), or the learned weights.
    "a-avg": ("(a) with global average pooling (no layout)", TRANSFORMER + ("pool=avg",), SEEDS[:1]),
    "c-ones": (
        "(c) with every weight 1",
        TRANSFORMER + POINT_SETS + LINEAR + NO_POSITIONS + ("wpse_weights=ones",),
        SEEDS[:1],
    ),
    "c-pos": ("(c) + a learned embedding per cell position", TRANSFORMER + POINT_SETS + LINEAR + POSITIONS, SEEDS),
    "d-pos": ("(d) + a learned embedding per cell position", TRANSFORMER + POINT_SETS + POSITIONS, SEEDS),
    "dt": (
        "(d) + the paper's learned 1/t in [1, 100]",
        TRANSFORMER + POINT_SETS + NO_POSITIONS + PAPER_TEMPERATURE,
        SEEDS[:1],
    ),
    "fa": ("CLIP, frozen MiniLM", MINILM, SEEDS),
    "f": ("(d-pos) on the frozen MiniLM tower's token states", MINILM + POINT_SETS + POSITIONS, SEEDS),
}
#: The kernels the paper searched (Gaussian sigma or IMQ c in {0.5, 0.75, 1.0}) but (d)'s Gaussian 0.5, one seed each.
SEARCHED = [(kernel, scale) for kernel in ("gaussian", "imq") for scale in ("0.5", "0.75", "1.0")][1:]
for _kernel, _scale in SEARCHED:
    RUNGS[f"e-{_kernel}-{_scale}"] = (
        f"(d-pos) with {_kernel} {_scale}",
        TRANSFORMER + POINT_SETS + POSITIONS + (f"wpse_kernel={_kernel}", f"wpse_kernel_scale={_scale}"),
        SEEDS[:1],
    )
#: The other mixes (alpha1, alpha2) the paper searched, with (d-pos)'s Gaussian 0.5, one seed each.
for _alpha1, _alpha2 in (("0.6", "0.4"), ("0.5", "0.5"), ("0.4", "0.6"), ("0.333", "0.667")):
    RUNGS[f"e-mix-{_alpha1}"] = (
        f"(d-pos) with the mix ({_alpha1}, {_alpha2})",
        TRANSFORMER + POINT_SETS + POSITIONS + (f"wpse_kernel_weights=[{_alpha1}, {_alpha2}]",),
        SEEDS[:1],
    )


def base_overrides() -> tuple[str, ...]:
    """The quick preset's noisy image-text run, as its WPSE claim trains it."""
    return QUICK.image_text_base + NOISY + ("objective=clip",)


def run_overrides(rung: str, seed: int, out: Path, data: Path) -> list[str]:
    return [
        *base_overrides(),
        *RUNGS[rung][1],
        f"seed={seed}",
        f"out={out / 'runs'}",
        f"name={rung}-seed{seed}",
        f"data_dir={data}",
        "resume=true",
        "progress=false",
        "probe_baselines=false",
    ]


def train_runs(specs: list[tuple[str, int]], out: Path, data: Path) -> None:
    for rung, seed in specs:
        folder = out / "runs" / f"{rung}-seed{seed}"
        if (folder / "report.json").is_file():
            continue
        print(f"[ladder] training {folder.name} (load {os.getloadavg()[0]:.1f})", flush=True)
        started = time.perf_counter()
        train(load_config(run_overrides(rung, seed, out, data)))
        seconds = time.perf_counter() - started
        (folder / "ladder_time.json").write_text(json.dumps({"wall_seconds": seconds, "load": os.getloadavg()}))
        print(f"[ladder] {folder.name}: {seconds:.0f} s", flush=True)


@torch.no_grad()
def joint_space_scores(folder: Path, draws: int = 5) -> dict:
    """Zero-shot and R@1 both ways by each protocol, averaged over ``draws`` fixed random-feature draws (D = 512;
    one for models without random features), and the norms of the vectors the dot product compares."""
    from uncurated.evaluate.retrieval import retrieval_recall
    from uncurated.evaluate.zero_shot import zero_shot_accuracy
    from uncurated.train.evaluation import image_text_features
    from uncurated.train.restore import load_run

    restored = load_run(folder)
    model, test = restored.model, restored.splits.test
    embedding = getattr(model, "embedding", None)
    rows = []
    for draw in range(draws if embedding is not None and embedding.kernel.alpha2 else 1):
        if embedding is not None:
            embedding.redraw(draw, restored.config.projection_dim)
        features = image_text_features(model, test, "cpu", seed=restored.config.seed)
        row = {}
        trained = getattr(model, "similarity", "cosine") == "cosine"  # CLIP's is the cosine, point sets' the dot
        for protocol, normalize in (("cosine", True), ("trained", trained)):
            zero_shot = zero_shot_accuracy(
                features.images, features.class_prompts, features.labels, normalize=normalize
            )
            recall = retrieval_recall(
                features.images,
                features.captions,
                features.caption_image,
                ks=(1,),
                caption_ids=features.caption_ids,
                normalize=normalize,
            )
            row[f"{protocol}_zero_shot"] = zero_shot.accuracy
            row[f"{protocol}_image_to_text_r1"] = recall["image_to_text_r1"]
            row[f"{protocol}_text_to_image_r1"] = recall["text_to_image_r1"]
        classes = torch.stack([prompts.double().mean(dim=0) for prompts in features.class_prompts]).norm(dim=1)
        row["image_norm"] = float(features.images.double().norm(dim=1).mean())
        row["caption_norm"] = float(features.captions.double().norm(dim=1).mean())
        row["class_norm_spread"] = float(classes.std() / classes.mean())  # what the dot product's argmax sees
        rows.append(row)
    result = {key: statistics.fmean(row[key] for row in rows) for key in rows[0]}
    result["trained_zero_shot_draws"] = [row["trained_zero_shot"] for row in rows]
    return result


def measure(folder: Path) -> dict:
    """The figures of one finished run (cached in ``ladder_eval.json``): both protocols, the probe, the time."""
    cached = folder / "ladder_eval.json"
    if cached.is_file():
        return json.loads(cached.read_text())
    report = json.loads((folder / "report.json").read_text())
    result = {
        **joint_space_scores(folder),
        "probe": report["evaluation"]["linear_probe"]["accuracy"],
        "train_seconds": report["train_seconds"],
        "final_temperature": _final_temperature(folder),
    }
    cached.write_text(json.dumps(result, indent=1) + "\n")
    return result


def _final_temperature(folder: Path) -> float:
    rows = (folder / "metrics.csv").read_text().splitlines()
    header = rows[0].split(",")
    return float(rows[-1].split(",")[header.index("temperature")])


METRICS = (
    "cosine_zero_shot",
    "trained_zero_shot",
    "cosine_image_to_text_r1",
    "trained_image_to_text_r1",
    "cosine_text_to_image_r1",
    "trained_text_to_image_r1",
    "probe",
    "final_temperature",
    "image_norm",
    "caption_norm",
    "class_norm_spread",
)


def summarize(rungs: list[str], out: Path) -> dict:
    summary = {}
    for rung in rungs:
        label, overrides, seeds = RUNGS[rung]
        runs = {
            seed: measure(out / "runs" / f"{rung}-seed{seed}")
            for seed in seeds
            if (out / "runs" / f"{rung}-seed{seed}" / "report.json").is_file()
        }
        if not runs:
            continue
        row = {"label": label, "overrides": list(overrides), "seeds": sorted(runs), "runs": runs}
        for metric in METRICS:
            values = [run[metric] for run in runs.values()]
            row[metric] = {
                "mean": statistics.fmean(values),
                "std": statistics.stdev(values) if len(values) > 1 else math.nan,
            }
        summary[rung] = row
        print(
            f"{rung:>14} n={len(runs)} zero-shot cosine {_pm(row['cosine_zero_shot'])} trained "
            f"{_pm(row['trained_zero_shot'])}, R@1 i->t cosine {_pm(row['cosine_image_to_text_r1'])} trained "
            f"{_pm(row['trained_image_to_text_r1'])}, probe {_pm(row['probe'])}  {label}",
            flush=True,
        )
    return summary


def _pm(stat: dict) -> str:
    std = "" if math.isnan(stat["std"]) else f" +- {100 * stat['std']:.2f}"
    return f"{100 * stat['mean']:.2f}{std}"


def plot(summary: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rungs = list(summary)
    panels = (
        ("zero-shot top-1 (%)", ("cosine_zero_shot", "trained_zero_shot")),
        ("R@1 image -> text (%)", ("cosine_image_to_text_r1", "trained_image_to_text_r1")),
        ("linear probe (%)", ("probe",)),
    )
    figure, axes = plt.subplots(1, 3, figsize=(15, 4.5))
    for axis, (title, metrics) in zip(axes, panels, strict=True):
        width = 0.8 / len(metrics)
        for k, metric in enumerate(metrics):
            means = [100 * summary[r][metric]["mean"] for r in rungs]
            stds = [100 * (0 if math.isnan(summary[r][metric]["std"]) else summary[r][metric]["std"]) for r in rungs]
            name = "the trained similarity (point sets: dot product)" if metric.startswith("trained") else "cosine"
            axis.bar(
                [i + (k - (len(metrics) - 1) / 2) * width for i in range(len(rungs))],
                means,
                width,
                yerr=stds,
                capsize=2,
                label=name if len(metrics) > 1 else None,
            )
        axis.set_xticks(range(len(rungs)), rungs, rotation=60, fontsize=8)
        axis.set_title(title)
        lows = [100 * summary[r][m]["mean"] for r in rungs for m in metrics]
        axis.set_ylim(max(0, min(lows) - 10), min(100, max(lows) + 5))
        if len(metrics) > 1:
            axis.legend(fontsize=8)
    figure.suptitle("From CLIP to WPSE at the quick bench's image-text budget (mean +- std over seeds)")
    figure.tight_layout()
    figure.savefig(path, dpi=110)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rungs", nargs="+", default=list(RUNGS), choices=list(RUNGS), metavar="RUNG")
    parser.add_argument("--out", type=Path, default=Path("runs/wpse-ladder"))
    parser.add_argument("--shard", default="0/1", help="I/N: train every N-th run from the I-th (default 0/1)")
    parser.add_argument("--summarize", action="store_true", help="train nothing: evaluate and write the summary")
    parser.add_argument("--results", type=Path, default=RESULTS / "wpse_ladder")
    args = parser.parse_args(argv)
    index, count = (int(part) for part in args.shard.split("/"))
    data, note = prepare_data(QUICK, args.out / "data", None)
    print(f"[ladder] {note}", flush=True)
    if not args.summarize:
        specs = [(rung, seed) for seed in SEEDS for rung in args.rungs if seed in RUNGS[rung][2]]
        train_runs(specs[index::count], args.out, data)
        if count > 1:
            return
    summary = summarize(args.rungs, args.out)
    report = {
        "benchmark": "wpse_ladder",
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        "cores": os.cpu_count(),
        "load_at_summary": os.getloadavg(),
        "base_overrides": list(base_overrides()),
        "test_images": QUICK.test_size,
        "rungs": summary,
    }
    args.results.parent.mkdir(parents=True, exist_ok=True)
    args.results.with_suffix(".json").write_text(json.dumps(report, indent=1) + "\n")
    plot(summary, args.results.with_suffix(".png"))
    print(f"wrote {args.results.with_suffix('.json')} and .png", file=sys.stderr)


if __name__ == "__main__":
    main()
