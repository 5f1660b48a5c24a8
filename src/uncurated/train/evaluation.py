"""What a trained model is measured on: its features, run through :mod:`uncurated.evaluate.suite`.

Every run is judged by three classifiers on the same frozen features of the
layer ``probe_layer`` (a linear probe with its regularization searched on a
validation split, the weighted cosine kNN, the mean classifier) fit on up to
``probe_train_size`` training images and scored on the test split, next to the
same probe on raw pixels and on a freshly initialized model of the same
architecture (what training added; ``probe_baselines=false`` leaves these two
out). Image-text runs are also measured in the
joint space: zero-shot top-1 / top-5 from prompt ensembles, Recall@1/5/10 in
both directions with several captions per test image (the test split's own
and freshly generated ones) over the distinct captions (generated captions
repeat, and a repeated text is one candidate, correct for all its images), and Chen et al. 2024's margins.
Zero-shot and retrieval score pairs as the model was trained to: the cosine of CLIP's embeddings, the dot product
of a point-set model's vectors (Uesaka et al. 2025: a class is the plain mean of its prompts' vectors, with the
model's stored draw of random features; the margins stay cosine).

The training run reports these numbers; ``uncurated eval`` adds the k-variance
margins and the plots (:func:`evaluate` with ``full=True``).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import torch
from torch import Tensor, nn

from .. import data
from ..data.captions import generate_captions
from ..evaluate.linear_probe import linear_probe
from ..evaluate.suite import ClassifierFeatures, ImageTextFeatures, classifier_suite, image_text_suite, write_plots
from ..models.encoders import FeatureModel
from .builders import build_model
from .config import TrainConfig
from .random_state import seed_everything

#: Training features the k-variance margins are measured on (an assignment problem per class).
KV_SAMPLES = 5000
#: Test images whose two augmented views make the pair-similarity histogram of a two-view model.
PAIR_IMAGES = 2000
#: Captions per test image in retrieval: the split's own and this many minus one generated ones.
CAPTIONS_PER_IMAGE = 5


def evaluate(
    config: TrainConfig,
    model,
    splits,
    device: torch.device,
    *,
    augment=None,
    full: bool = False,
    plots: Path | None = None,
    say: Callable[[str], None] = lambda message: None,
    **classifier_options,
) -> dict:
    """The measurements of the module's documentation on the test split; ``full`` adds the kV margins.

    ``plots``, a folder, also receives the PNGs (t-SNE, per-class accuracy,
    pair similarities of two augmented views or of images and captions,
    margins), whose names the result lists under ``plots``' ``files``; ``augment`` makes
    the two views of a two-view model's pairs. ``classifier_options`` go to
    :func:`~uncurated.evaluate.suite.classifier_suite`
    (``probe``, ``knn_k``, ``knn_temperature``); ``say`` is told each stage as it starts.
    """
    say("embedding the probe's training and test images")
    batches = _probe_batches(config, splits)
    features = classifier_features(config, model, batches, device)
    kv_samples = KV_SAMPLES if full else None
    say("linear probe (C searched on a validation split), kNN, mean classifier" + (", kV margins" if full else ""))
    results = classifier_suite(features, kv_samples=kv_samples, seed=config.seed, **classifier_options)
    results["linear_probe"].update(train_images=len(batches[0]["label"]), layer=config.probe_layer)
    if config.probe_baselines:
        say("the same probe on raw pixels and on an untrained model")
        results["linear_probe"].update(_baselines(config, splits.train, batches, device))
    image_text = None
    if config.pipeline == "image_text":
        say(f"zero-shot, retrieval with {CAPTIONS_PER_IMAGE} captions per image, margins")
        image_text = image_text_features(model, splits.test, device, seed=config.seed)
        results.update(image_text_suite(image_text, seed=config.seed))
    if plots is not None:
        say(f"plots into {plots}")
        pairs = (image_text.images, image_text.captions[: len(image_text.images)]) if image_text else None
        if pairs is None and augment is not None:
            pairs = _two_views(model, _first_images(splits.test, PAIR_IMAGES), augment, device, config.seed)
        class_names = data.CLASS_NAMES if config.dataset.startswith("fashion") else None
        written = write_plots(
            plots,
            test_features=features.test_features,
            test_labels=features.test_labels,
            pairs=pairs,
            image_text=image_text,
            class_names=class_names,
            seed=config.seed,
            results={name: result for name, result in results.items() if name != "retrieval"},
        )
        results["plots"] = {"files": [path.name for path in written]}
    return results


def classifier_features(config: TrainConfig, model, batches: tuple[dict, dict], device) -> ClassifierFeatures:
    """The ``probe_layer`` features of the probe's training and test images (:func:`_probe_batches`)."""
    train_batch, test_batch = batches
    layer = config.probe_layer
    return ClassifierFeatures(
        embed(model, train_batch["image"], device, layer),
        train_batch["label"],
        embed(model, test_batch["image"], device, layer),
        test_batch["label"],
    )


@torch.no_grad()
def image_text_features(model, test_set, device, *, seed: int = 0) -> ImageTextFeatures:
    """Joint-space embeddings of the test images, their captions and the class prompts."""
    model.eval()
    batch = test_set.batch(torch.arange(len(test_set)))
    images = torch.cat([model.embed_images(chunk.to(device)).float().cpu() for chunk in batch["image"].split(1024)])
    captions = list(batch["caption"])
    pixels = (batch["image"] * 255).round().to(torch.uint8).squeeze(1)
    for extra in range(1, CAPTIONS_PER_IMAGE):
        generator = torch.Generator().manual_seed(seed * CAPTIONS_PER_IMAGE + extra)
        captions += generate_captions(pixels, batch["label"], generator)
    texts = list(dict.fromkeys(captions))  # generated captions repeat: each distinct text is embedded once
    caption_ids = torch.tensor([position for position in map({text: i for i, text in enumerate(texts)}.get, captions)])
    text_embeddings = torch.cat(
        [model.embed_texts(texts[start : start + 1024]).float().cpu() for start in range(0, len(texts), 1024)]
    )
    prompts = [model.embed_texts(group).float().cpu() for group in data.class_prompts()]
    return ImageTextFeatures(
        images=images,
        labels=batch["label"],
        captions=text_embeddings[caption_ids],
        caption_image=torch.arange(len(images)).repeat(CAPTIONS_PER_IMAGE),
        class_prompts=prompts,
        caption_ids=caption_ids,
        normalized=getattr(model, "similarity", "cosine") == "cosine",  # a point-set model's: "dot"
    )


def _first_images(test_set, count: int) -> Tensor:
    return test_set.batch(torch.arange(min(count, len(test_set))))["image"]


def _probe_batches(config: TrainConfig, splits) -> tuple[dict, dict]:
    """Up to ``probe_train_size`` random training images (seeded) and the whole test split."""
    train_set, test_set = splits.train, splits.test
    count = len(train_set) if not config.probe_train_size else min(config.probe_train_size, len(train_set))
    chosen = torch.randperm(len(train_set), generator=torch.Generator().manual_seed(config.seed))[:count]
    return _on_host(train_set.batch(chosen)), _on_host(test_set.batch(torch.arange(len(test_set))))


def _on_host(batch: dict) -> dict:
    """A batch's tensors on the CPU, where the probes run (the training data may be held on the GPU)."""
    return {key: value.cpu() if isinstance(value, Tensor) else value for key, value in batch.items()}


def _baselines(config: TrainConfig, train_set, batches: tuple[dict, dict], device) -> dict:
    """The same probe on raw pixels and on an untrained model of the same architecture."""
    train_batch, test_batch = batches
    train_labels, test_labels = train_batch["label"], test_batch["label"]
    pixels = linear_probe(
        train_batch["image"].flatten(1), train_labels, test_batch["image"].flatten(1), test_labels, seed=config.seed
    )
    seed_everything(config.seed)
    untrained_model = build_model(config, train_set).to(device)
    layer = config.probe_layer
    untrained = linear_probe(
        embed(untrained_model, train_batch["image"], device, layer),
        train_labels,
        embed(untrained_model, test_batch["image"], device, layer),
        test_labels,
        seed=config.seed,
    )
    return {
        "untrained_accuracy": untrained.accuracy,
        "raw_pixels_accuracy": pixels.accuracy,
    }


@torch.no_grad()
def _two_views(model, images: Tensor, augment, device, seed: int) -> tuple[Tensor, Tensor]:
    model.eval()
    generator = torch.Generator().manual_seed(seed)
    embed_images = getattr(model, "embed_images", model)
    views = [embed_images(augment(images, generator).to(device)).float().cpu() for _ in range(2)]
    return views[0], views[1]


#: The margin by which the trained encoder's linear probe must pass both the untrained encoder's and raw pixels'
#: for training to count as having learned (the learning gate ``format_report`` states).
LEARNING_GATE = 0.02


def learning_gate(probe: dict) -> str:
    """Whether the probe passed the untrained encoder and raw pixels by :data:`LEARNING_GATE`, as one line."""
    best = max(probe["untrained_accuracy"], probe["raw_pixels_accuracy"])
    margin = probe["accuracy"] - best
    verdict = "passed" if margin >= LEARNING_GATE else "FAILED: training did not add what the baselines have"
    return (
        f"learning gate ({100 * LEARNING_GATE:g} points over the untrained encoder and raw pixels): {verdict} "
        f"({100 * margin:+.2f} points over the better one)"
    )


def format_report(report: dict) -> str:
    """The evaluation of a report as a few lines of text."""
    lines = [f"run {report['run']}: {report['steps']} steps in {report['train_seconds']:.0f} s"]
    evaluation = report.get("evaluation", {})
    probe = evaluation.get("linear_probe")
    if probe:
        baselines = (
            f"  (untrained encoder: {100 * probe['untrained_accuracy']:.2f}%, raw pixels: "
            f"{100 * probe['raw_pixels_accuracy']:.2f}%)"
            if "untrained_accuracy" in probe
            else ""
        )
        lines.append(
            f"linear probe on {probe['layer']} features (fit on {probe['train_images']} train images, scored on "
            f"the test split): {100 * probe['accuracy']:.2f}%{baselines}"
        )
        if "untrained_accuracy" in probe:
            lines.append(learning_gate(probe))
    if "knn" in evaluation:
        knn, mean = evaluation["knn"], evaluation["mean_classifier"]
        lines.append(
            f"kNN (k {knn['k']}, t {knn['temperature']:g}): {100 * knn['accuracy']:.2f}%, "
            f"mean classifier: {100 * mean['accuracy']:.2f}%"
        )
    if "zero_shot" in evaluation:
        zero_shot, retrieval = evaluation["zero_shot"], evaluation["retrieval"]
        top5 = zero_shot["top5_accuracy"]
        lines.append(
            f"zero-shot from class prompts: top-1 {100 * zero_shot['accuracy']:.2f}%"
            + (f", top-5 {100 * top5:.2f}%" if top5 is not None else "")
        )
        recalls = ", ".join(
            f"{direction.replace('_to_', '->')} "
            + " / ".join(f"{100 * value:.2f}%" for key, value in retrieval.items() if key.startswith(direction))
            for direction in ("image_to_text", "text_to_image")
        )
        cutoffs = " / ".join(f"R@{key.rsplit('_r', 1)[1]}" for key in retrieval if key.startswith("image_to_text"))
        lines.append(
            f"retrieval over the distinct texts of {CAPTIONS_PER_IMAGE} captions per image, {cutoffs}: {recalls}"
        )
    if "zero_shot_folder" in evaluation:
        result = evaluation["zero_shot_folder"]
        lines.append(
            f"zero-shot on {result['images']} images of {result['classes']} classes: "
            f"top-1 {100 * result['accuracy']:.2f}%"
        )
    if "caption_retrieval" in evaluation:
        result = evaluation["caption_retrieval"]
        lines.append(
            f"retrieval on {result['images']} images, {result['captions']} captions: R@1 image->text "
            f"{100 * result['image_to_text_r1']:.2f}%, text->image {100 * result['text_to_image_r1']:.2f}%"
        )
    return "\n".join(lines)


def embed(
    model: nn.Module, images: Tensor, device: torch.device, layer: str = "encoder", batch_size: int = 1024
) -> Tensor:
    """The features probes read (``model.features(..., layer)``) of ``images``, in eval mode, on the CPU."""
    if not isinstance(model, FeatureModel):
        raise TypeError(f"{type(model).__name__} has no features(images, layer) for the probes to read")
    model.eval()
    outputs = []
    with torch.no_grad():
        for start in range(0, len(images), batch_size):
            outputs.append(model.features(images[start : start + batch_size].to(device), layer).float().cpu())
    return torch.cat(outputs)
