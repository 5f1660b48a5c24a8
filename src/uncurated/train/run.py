"""A whole training run: build the parts, train (or resume), evaluate, write the report.

A run lives in ``<out>/<name>/``: ``config.yaml`` (the resolved
configuration), ``metrics.csv`` and ``curves.png`` (the training curves),
``checkpoints/`` and ``report.json`` (what the run reached). The evaluation
depends on the pipeline: two views are judged by a linear probe on the
encoder's features, next to the same probe on raw pixels; image-text runs by
zero-shot accuracy from class prompts, image-text retrieval recall and the
linear probe. Zero-shot and retrieval compare L2-normalized embeddings for
every model, point-set models included (whose paper leaves them unnormalized:
the argmax over classes is the same up to the classes' norms).
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import torch
import yaml
from torch import Tensor

from .. import data
from ..evaluate.linear_probe import linear_probe
from .build import build_augmentation, build_model, build_objective, build_splits
from .checkpoint import latest_checkpoint
from .config import ConfigError, TrainConfig
from .distributed import Distributed, setup, teardown
from .metrics import plot_curves
from .trainer import Trainer, TrainingParts, embed, seed_everything


def run_name(config: TrainConfig) -> str:
    return config.name or f"{Path(config.preset).stem}-{config.objective}-seed{config.seed}"


def train(config: TrainConfig) -> dict:
    """Train as ``config`` says and return the report (also written to ``report.json``)."""
    context = setup(config.device)
    try:
        return _train(config, context)
    finally:
        teardown(context)


def _train(config: TrainConfig, context: Distributed) -> dict:
    run_dir = Path(config.out) / run_name(config)
    if context.is_main:
        _prepare_run_dir(run_dir, config)
    context.barrier()
    seed_everything(config.seed)
    splits = build_splits(config)
    model = build_model(config, splits.train).to(context.device)
    objective = build_objective(config, splits.train).to(context.device)
    parts = TrainingParts(model, objective, splits.train, build_augmentation(config), config.pipeline)
    trainer = Trainer(config, parts, context, run_dir)
    resumed = config.resume and trainer.resume()
    say = _printer(context)
    say(
        f"{'resuming' if resumed else 'training'} {run_dir.name}: {config.pipeline} on {config.dataset} "
        f"({'streamed' if trainer.streamed else len(splits.train)} samples), {config.objective}, "
        f"{trainer.total_steps} steps of "
        f"{config.batch_size}" + (f" from step {trainer.position.step}" if resumed else "")
    )
    started = time.perf_counter()
    progress = _progress_bar(trainer, config, context)
    log = trainer.fit(progress=progress.update if progress else None)
    if progress:
        progress.close()
    seconds = time.perf_counter() - started
    report = {"run": str(run_dir), "config": config.to_dict(), "train_seconds": seconds, "steps": trainer.total_steps}
    if context.is_main:
        plot_curves(log.path, run_dir / "curves.png", keys=("loss", "lr", "temperature"))
        if splits.test is not None:
            say("evaluating ...")
            report["evaluation"] = evaluate(config, model, splits, context.device)
        (run_dir / "report.json").write_text(json.dumps(report, indent=2) + "\n")
        say(format_report(report))
    return report


def evaluate(config: TrainConfig, model, splits, device: torch.device) -> dict:
    """The pipeline's measurements on the test split (see the module's documentation)."""
    results = {"linear_probe": _probe(config, model, splits, device)}
    if config.pipeline == "image_text":
        results.update(_zero_shot_and_retrieval(model, splits.test, device))
    return results


def _probe(config: TrainConfig, model, splits, device) -> dict:
    train_set, test_set = splits.train, splits.test
    count = len(train_set) if not config.probe_train_size else min(config.probe_train_size, len(train_set))
    chosen = torch.randperm(len(train_set), generator=torch.Generator().manual_seed(config.seed))[:count]
    train_batch, test_batch = train_set.batch(chosen), test_set.batch(torch.arange(len(test_set)))
    layer = config.probe_layer
    learned = linear_probe(
        embed(model, train_batch["image"], device, layer), train_batch["label"],
        embed(model, test_batch["image"], device, layer), test_batch["label"],
    )
    pixels = linear_probe(
        train_batch["image"].flatten(1), train_batch["label"], test_batch["image"].flatten(1), test_batch["label"]
    )
    # What training added: the same probe on a freshly initialized model of the same architecture.
    seed_everything(config.seed)
    untrained_model = build_model(config, train_set).to(device)
    untrained = linear_probe(
        embed(untrained_model, train_batch["image"], device, layer), train_batch["label"],
        embed(untrained_model, test_batch["image"], device, layer), test_batch["label"],
    )
    return {
        "train_images": count,
        "layer": layer,
        "accuracy": learned.accuracy,
        "untrained_accuracy": untrained.accuracy,
        "raw_pixels_accuracy": pixels.accuracy,
    }


@torch.no_grad()
def _zero_shot_and_retrieval(model, test_set, device) -> dict:
    model.eval()
    batch = test_set.batch(torch.arange(len(test_set)))
    images = _normalized(
        torch.cat([model.embed_images(chunk.to(device)).float().cpu() for chunk in batch["image"].split(1024)])
    )
    texts = _normalized(torch.cat([
        model.embed_texts(batch["caption"][start : start + 1024]).float().cpu()
        for start in range(0, len(test_set), 1024)
    ]))
    prompts = data.class_prompts()
    classes = torch.stack([
        _normalized(_normalized(model.embed_texts(group).float().cpu()).mean(0, keepdim=True))[0] for group in prompts
    ])
    zero_shot = float(((images @ classes.T).argmax(1) == batch["label"]).double().mean())
    similarity = images @ texts.T
    targets = torch.arange(len(test_set))
    return {
        "zero_shot_accuracy": zero_shot,
        "retrieval": {
            "image_to_text_r1": _recall(similarity, targets, 1),
            "image_to_text_r5": _recall(similarity, targets, 5),
            "text_to_image_r1": _recall(similarity.T, targets, 1),
            "text_to_image_r5": _recall(similarity.T, targets, 5),
        },
    }


def _recall(similarity: Tensor, targets: Tensor, k: int) -> float:
    top = similarity.topk(k, dim=1).indices
    return float((top == targets[:, None]).any(dim=1).double().mean())


def _normalized(x: Tensor) -> Tensor:
    return torch.nn.functional.normalize(x, dim=-1)


def format_report(report: dict) -> str:
    lines = [f"run {report['run']}: {report['steps']} steps in {report['train_seconds']:.0f} s"]
    evaluation = report.get("evaluation", {})
    probe = evaluation.get("linear_probe")
    if probe:
        lines.append(
            f"linear probe on {probe['layer']} features (fit on {probe['train_images']} train images, scored on "
            f"the test split): {100 * probe['accuracy']:.2f}%  (untrained encoder: "
            f"{100 * probe['untrained_accuracy']:.2f}%, raw pixels: {100 * probe['raw_pixels_accuracy']:.2f}%)"
        )
    if "zero_shot_accuracy" in evaluation:
        retrieval = evaluation["retrieval"]
        lines.append(f"zero-shot accuracy from class prompts: {100 * evaluation['zero_shot_accuracy']:.2f}%")
        lines.append(
            "retrieval R@1 / R@5: image->text "
            f"{100 * retrieval['image_to_text_r1']:.2f}% / {100 * retrieval['image_to_text_r5']:.2f}%, "
            f"text->image {100 * retrieval['text_to_image_r1']:.2f}% / {100 * retrieval['text_to_image_r5']:.2f}%"
        )
    return "\n".join(lines)


def _prepare_run_dir(run_dir: Path, config: TrainConfig) -> None:
    if not config.resume and latest_checkpoint(run_dir / "checkpoints") is not None:
        raise ConfigError(
            f"{run_dir} already holds a run; pass resume=true to continue it or name=... for a new one"
        )
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "config.yaml").write_text(yaml.safe_dump(config.to_dict(), sort_keys=False))


def _printer(context: Distributed):
    def say(message: str) -> None:
        if context.is_main:
            print(message, file=sys.stderr, flush=True)

    return say


def _progress_bar(trainer: Trainer, config: TrainConfig, context: Distributed):
    if not (config.progress and context.is_main):
        return None
    from tqdm import tqdm

    return _Progress(tqdm(total=trainer.total_steps, initial=trainer.position.step, unit="step", file=sys.stderr))


class _Progress:
    """Moves a tqdm bar to the logged step and shows the latest loss and throughput."""

    def __init__(self, bar) -> None:
        self.bar = bar

    def update(self, row: dict, total: int) -> None:
        self.bar.update(int(row["step"]) - self.bar.n)
        self.bar.set_postfix(loss=f"{row['loss']:.4f}", samples_per_s=f"{row['samples_per_second']:.0f}")

    def close(self) -> None:
        self.bar.close()
