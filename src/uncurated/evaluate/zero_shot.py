"""Zero-shot classification from class prompt embeddings with prompt ensembling (Radford et al. 2021, CLIP).

Each class ``c`` has ``P_c >= 1`` prompt embeddings (one text encoding per
template such as "a photo of a {c}."). Following CLIP's ensembling, every
prompt embedding is L2-normalized, the class's prompts are averaged, and the
average is renormalized: :func:`prompt_ensemble`. An image scores the cosine
similarity of its embedding with each class embedding; top-1 is the argmax,
and an image is a top-5 hit when its class is among its five best-scoring
classes. Top-5 is only defined with at least five classes: below that it is
reported as ``None`` rather than silently measured with fewer candidates.

``normalize=False`` scores a model whose similarity is the plain dot product
(weighted point sets, Uesaka et al. 2025, Sec. 6.2): a class is the plain
mean of its prompt embeddings, not renormalized (by bilinearity, the mean
similarity to its prompts), and an image scores its dot product with it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor

from .classification import ClassificationResult, check_class_labels, check_feature_matrix, classification_result

__all__ = ["ZeroShotAccuracy", "prompt_ensemble", "zero_shot_accuracy"]


@dataclass(frozen=True, eq=False)
class ZeroShotAccuracy(ClassificationResult):
    """Zero-shot accuracies; ``top5_accuracy`` is ``None`` with fewer than 5 classes.

    ``scores`` is the (N, K) float64 cosine similarity of each image with each
    class embedding; its row-wise argmax is the top-1 prediction.
    """

    top5_accuracy: float | None
    scores: Tensor


def prompt_ensemble(class_prompts: Sequence[Tensor] | Tensor) -> Tensor:
    """(K, d) float64 unit class embeddings: normalize each prompt, average per class, renormalize.

    Args:
        class_prompts: one (P_c, d) tensor of prompt embeddings per class, or a (K, P, d) tensor.
    """
    class_prompts = _checked_prompts(class_prompts)
    device = class_prompts[0].device
    means = torch.stack([F.normalize(p.double().to(device), dim=1).mean(dim=0) for p in class_prompts])
    degenerate = torch.nonzero(means.norm(dim=1) == 0).flatten().tolist()
    if degenerate:
        raise ValueError(f"class_prompts of classes {degenerate} average to the zero vector and have no direction")
    return F.normalize(means, dim=1)


@torch.no_grad()
def zero_shot_accuracy(
    image_features: Tensor, class_prompts: Sequence[Tensor] | Tensor, labels: Tensor, *, normalize: bool = True
) -> ZeroShotAccuracy:
    """Classify images by the cosine similarity of their embeddings with the prompt-ensembled classes.

    Args:
        image_features: (N, d) image embeddings.
        class_prompts: as in :func:`prompt_ensemble`.
        labels: (N,) class indices into ``class_prompts``.
        normalize: cosine scores (default); ``False``: dot products with the plain prompt means
            (the module's documentation).
    """
    classes = prompt_ensemble(class_prompts) if normalize else _prompt_means(class_prompts)
    check_feature_matrix("image_features", image_features, dim=classes.shape[1], dim_of="the class prompts")
    num_classes = classes.shape[0]
    check_class_labels("labels", labels, image_features.shape[0], num_classes=num_classes)
    images = image_features.double().to(classes.device)
    scores = (F.normalize(images, dim=1) if normalize else images) @ classes.T
    labels = labels.long().to(scores.device)
    result = classification_result(scores.argmax(dim=1).cpu(), labels.cpu(), num_classes)
    top5 = None
    if num_classes >= 5:
        top5 = float((scores.topk(5, dim=1).indices == labels[:, None]).any(dim=1).double().mean())
    return ZeroShotAccuracy(**vars(result), top5_accuracy=top5, scores=scores)


def _prompt_means(class_prompts: Sequence[Tensor] | Tensor) -> Tensor:
    """(K, d) float64 plain means of each class's prompt embeddings, not normalized."""
    class_prompts = _checked_prompts(class_prompts)
    device = class_prompts[0].device
    return torch.stack([prompts.double().to(device).mean(dim=0) for prompts in class_prompts])


def _checked_prompts(class_prompts: Sequence[Tensor] | Tensor) -> list[Tensor]:
    """``class_prompts`` as a list of (P_c, d) tensors, one per class and of one width (``ValueError`` if not)."""
    if isinstance(class_prompts, Tensor):
        if class_prompts.ndim != 3:
            raise ValueError(
                f"class_prompts must be a (K, P, d) tensor or a sequence of (P_c, d) tensors, "
                f"got a tensor of shape {tuple(class_prompts.shape)}"
            )
    prompts = list(class_prompts)
    if not prompts:
        raise ValueError("class_prompts must hold at least one class, got none")
    for c, matrix in enumerate(prompts):
        check_feature_matrix(
            f"class_prompts[{c}]", matrix, dim=prompts[0].shape[1] if c else None, dim_of="class_prompts[0]"
        )
    return prompts
