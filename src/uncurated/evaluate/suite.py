"""The evaluation suite: every measurement of a trained encoder, from its features, as JSON-ready dicts.

Two groups of measurements, each a function of feature tensors only, so that
a training run, ``uncurated eval`` on a run folder and ``uncurated eval`` on a
saved feature file all compute the same numbers:

- :func:`classifier_suite`: the linear probe (regularization searched on a
  validation split), the weighted cosine kNN and the mean classifier, all
  three on the same frozen features and labels, plus the thesis's ch. 8
  k-variance margins of the mean classifier on the training features
  (:func:`kv_margins`);
- :func:`image_text_suite`: zero-shot top-1 / top-5 from prompt ensembles,
  Recall@1/5/10 in both directions with any number of captions per image
  (over the distinct captions when the features say which texts repeat),
  Chen et al. 2024's margins: the per-batch margins of matched pairs in both
  directions and the zero-shot margins, and the embeddings' effective rank
  (:func:`effective_rank`, whether an encoder collapsed).

:func:`write_plots` draws what is better looked at: the positive and negative
pair similarities (thesis Figs. 4-5), a t-SNE of the test features coloured by
class, the per-class accuracy of every classifier and the margin histograms.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import Tensor

from ..theory.kvariance import kv_gn_margin, kv_margin
from ..theory.margins import batch_margins, plot_margin_histograms, zero_shot_margins
from . import knn
from .classification import ClassificationResult
from .knn import knn_classifier
from .linear_probe import linear_probe, torch_linear_probe
from .mean_classifier import class_means, mean_classifier
from .plots import pair_similarities, plot_per_class_accuracy, plot_similarity_histograms, plot_tsne
from .retrieval import retrieval_recall
from .zero_shot import prompt_ensemble, zero_shot_accuracy

PROBES = ("sklearn", "torch")


@dataclass
class ClassifierFeatures:
    """Frozen features of labelled training and test images (what probes read)."""

    train_features: Tensor
    train_labels: Tensor
    test_features: Tensor
    test_labels: Tensor


@dataclass
class ImageTextFeatures:
    """Embeddings in the joint space: images with their labels, captions, and prompts per class.

    ``caption_image[m]`` is the image caption ``m`` describes; ``class_prompts``
    is (K, P, d) or one (P_k, d) tensor per class. ``caption_ids[m]``, when
    given, identifies caption ``m``'s text: retrieval then runs over the
    distinct captions (:func:`~uncurated.evaluate.retrieval.retrieval_recall`).
    ``normalized``: the model scores pairs by the cosine of these embeddings
    (CLIP); ``False``: by their dot product (weighted point sets), which
    zero-shot and retrieval then use.
    """

    images: Tensor
    labels: Tensor
    captions: Tensor
    caption_image: Tensor
    class_prompts: Tensor | Sequence[Tensor]
    caption_ids: Tensor | None = None
    normalized: bool = True


def classifier_suite(
    features: ClassifierFeatures,
    *,
    probe: str = "sklearn",
    knn_k: int = knn.DEFAULT_K,
    knn_temperature: float = knn.DEFAULT_TEMPERATURE,
    kv_samples: int | None = 5000,
    seed: int = 0,
) -> dict[str, dict]:
    """Linear probe, kNN and mean classifier on ``features``; the kV margins on ``kv_samples`` (``None``: skip)."""
    if probe not in PROBES:
        raise ValueError(f"probe must be one of {', '.join(PROBES)}, got {probe!r}")
    arguments = (features.train_features, features.train_labels, features.test_features, features.test_labels)
    fitted = (linear_probe if probe == "sklearn" else torch_linear_probe)(*arguments, seed=seed)
    probe_summary = {**summary(fitted), "probe": probe}
    probe_summary.update(
        {key: getattr(fitted, key) for key in ("C", "weight_decay") if getattr(fitted, key) is not None}
    )
    knn_k = min(knn_k, len(features.train_labels))
    knn = {
        **summary(knn_classifier(*arguments, k=knn_k, temperature=knn_temperature)),
        "k": knn_k,
        "temperature": knn_temperature,
    }
    results = {"linear_probe": probe_summary, "knn": knn, "mean_classifier": summary(mean_classifier(*arguments))}
    if kv_samples is not None:
        results["kv_margins"] = kv_margins(
            features.train_features, features.train_labels, samples=kv_samples, seed=seed
        )
    return results


def kv_margins(features: Tensor, labels: Tensor, *, samples: int = 5000, seed: int = 0) -> dict[str, float]:
    """Medians of kV-Margin and kV-GN-Margin (thesis ch. 8) of the mean classifier on ``samples`` training features.

    The classifier is ``f(phi) = normalize(phi) . mu_c`` with the class
    means of the same features: every contrastive run has it, unlike a
    trained head, and it is the classifier of Nozawa & Sato 2021's bounds.
    """
    generator = torch.Generator().manual_seed(seed)
    chosen = torch.randperm(len(labels), generator=generator)[:samples]
    phi = features[chosen].double()
    present, y = torch.unique(labels[chosen], return_inverse=True)  # absent label ids have no mean
    means = class_means(phi, y, len(present)).double()

    def logits(x: Tensor) -> Tensor:
        return torch.nn.functional.normalize(x, dim=-1) @ means.T

    return {
        "samples": len(chosen),
        "kv_margin_median": kv_margin(phi, logits, y, seed=seed).median,
        "kv_gn_margin_median": kv_gn_margin(phi, logits, y, seed=seed).median,
    }


def image_text_suite(features: ImageTextFeatures, *, margin_batch: int = 256, seed: int = 0) -> dict[str, dict]:
    """Zero-shot accuracy, retrieval recall (by the model's own similarity: ``features.normalized``) and
    Chen et al. 2024's margins (of cosine scores) on joint-space embeddings."""
    normalize = features.normalized
    zero_shot = zero_shot_accuracy(features.images, features.class_prompts, features.labels, normalize=normalize)
    ks = [k for k in (1, 5, 10) if k <= len(features.images)]
    return {
        "zero_shot": {**summary(zero_shot), "top5_accuracy": zero_shot.top5_accuracy},
        "retrieval": retrieval_recall(
            features.images,
            features.captions,
            features.caption_image,
            ks=ks,
            caption_ids=features.caption_ids,
            normalize=normalize,
        ),
        "margins": {key: _describe(values) for key, values in margins(features, margin_batch, seed).items()},
        "embeddings": {
            "image_effective_rank": effective_rank(features.images),
            "text_effective_rank": effective_rank(features.captions),
        },
    }


def effective_rank(embeddings: Tensor) -> float:
    """Roy & Vetterli 2007's effective rank of an ``(n, d)`` embedding matrix: the exponential of the entropy of
    its normalized singular values, 1 when every row is one vector (a collapsed encoder), d when the rows span
    every direction equally."""
    values = torch.linalg.svdvals(embeddings.double())
    shares = values / values.sum()
    shares = shares[shares > 0]
    return float(torch.exp(-(shares * shares.log()).sum()))


def margins(features: ImageTextFeatures, batch_size: int = 256, seed: int = 0) -> dict[str, Tensor]:
    """Chen et al. 2024's margins: of matched pairs within random batches, both directions, and zero-shot.

    Each image is paired with its first caption; the images are shuffled and
    cut into batches of ``batch_size`` (the last, partial one dropped unless
    it is the only one), the score matrix being cosine similarity.
    """
    images = torch.nn.functional.normalize(features.images.double(), dim=-1)
    first_caption = _first_caption(features.caption_image, len(images))
    captions = torch.nn.functional.normalize(features.captions[first_caption].double(), dim=-1)
    order = torch.randperm(len(images), generator=torch.Generator().manual_seed(seed))
    size = min(batch_size, len(images))
    batches = order[: len(order) // size * size].view(-1, size)
    scores = images[batches] @ captions[batches].transpose(1, 2)
    image_to_text, text_to_image = batch_margins(scores)
    classes = prompt_ensemble(features.class_prompts)
    return {
        "image_to_text": image_to_text.flatten(),
        "text_to_image": text_to_image.flatten(),
        "zero_shot": zero_shot_margins(images @ classes.T, features.labels),
    }


def summary(result: ClassificationResult) -> dict:
    """The accuracies of a classifier as a JSON-ready dict (``None`` for a class absent from the test labels)."""
    return {
        "accuracy": result.accuracy,
        "mean_per_class_accuracy": result.mean_per_class_accuracy,
        "per_class_accuracy": [None if math.isnan(value) else value for value in result.per_class_accuracy],
    }


def write_plots(
    out: Path,
    *,
    test_features: Tensor,
    test_labels: Tensor,
    results: Mapping[str, dict],
    pairs: tuple[Tensor, Tensor] | None = None,
    image_text: ImageTextFeatures | None = None,
    class_names: Sequence[str] | None = None,
    seed: int = 0,
) -> list[Path]:
    """Write the suite's PNGs into ``out``; return their paths.

    ``pairs`` are two aligned embeddings of the same test images (two views,
    or images and captions) for the similarity histograms.
    """
    out.mkdir(parents=True, exist_ok=True)
    written = [plot_tsne(test_features, test_labels, out / "tsne.png", class_names=class_names, seed=seed)]
    per_class = {
        name: [math.nan if value is None else value for value in result["per_class_accuracy"]]
        for name, result in results.items()
        if "per_class_accuracy" in result
    }
    if per_class:
        written.append(plot_per_class_accuracy(per_class, out / "per_class_accuracy.png", class_names=class_names))
    if pairs is not None:
        positive, negative = pair_similarities(*pairs, seed=seed)
        written.append(
            plot_similarity_histograms(
                positive, negative, out / "similarities.png", title="Cosine similarity of positive and negative pairs"
            )
        )
    if image_text is not None:
        written.append(plot_margin_histograms(margins(image_text, seed=seed), out / "margins.png"))
    return written


def _first_caption(caption_image: Tensor, images: int) -> Tensor:
    count = len(caption_image)
    first = torch.full((images,), count, dtype=torch.long)
    first.scatter_reduce_(0, caption_image.long(), torch.arange(count), reduce="amin")
    if (first == count).any():
        raise ValueError("caption_image: every image needs at least one caption")
    return first


def _describe(values: Tensor) -> dict[str, float]:
    values = values.double()
    return {
        "mean": float(values.mean()),
        "median": float(values.median()),
        "fraction_positive": float((values > 0).double().mean()),
    }
