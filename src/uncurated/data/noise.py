"""Label noise: flipping labels to semantically related classes (thesis Sec. 5.3.1, App. A.3.4).

For the supervised-positives experiments of RINCE (positive pairs are two
images with the same label), the thesis flips "the true labels to
semantically related ones, e.g. CAT <-> DOG, with probability eta/2", the
class-dependent noise of the label-noise literature. For Fashion-MNIST the
related classes are :data:`~uncurated.data.fashion_mnist.RELATED_CLASSES`
(T-shirt/top <-> Shirt, Pullover <-> Coat, Sandal <-> Sneaker,
Ankle boot -> Sneaker, Trouser <-> Dress; Bag keeps its label, so on
balanced data 9/10 of eta/2 of the labels flip).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import torch
from torch import Tensor

from ..validation import check_range


def flip_labels(
    labels: Tensor,
    eta: float,
    related: Mapping[int, Sequence[int]],
    generator: torch.Generator | None = None,
) -> tuple[Tensor, Tensor]:
    """Flip each label with probability ``eta / 2`` to one of its related classes.

    Args:
        labels: (N,) integer labels.
        eta: the noise rate, in [0, 1].
        related: for each class, the classes it may flip to (one drawn
            uniformly); a class missing from the map, or mapped to nothing,
            never flips.
        generator: the random stream (on the CPU).

    Returns:
        ``(noisy, flipped)``: the new labels, on the device and of the dtype
        of ``labels``, and a boolean mask of the labels that changed.
    """
    eta = check_range("eta", eta, 0.0, 1.0)
    if not isinstance(labels, Tensor) or labels.ndim != 1 or labels.is_floating_point():
        raise ValueError(f"labels must be a 1-D integer tensor, got {labels!r:.80}")
    for label, targets in related.items():
        if label in targets:
            raise ValueError(f"related[{label}] must not contain the class itself, got {tuple(targets)}")
    clean = labels.cpu()
    noisy = clean.clone()
    draws = torch.rand(len(clean), generator=generator)
    for label in clean.unique().tolist():
        targets = tuple(related.get(label, ()))
        where = (clean == label) & (draws < eta / 2)
        if not targets or not bool(where.any()):
            continue
        picks = torch.randint(len(targets), (int(where.sum()),), generator=generator)
        noisy[where] = torch.tensor(targets, dtype=clean.dtype)[picks]
    return noisy.to(labels.device), (noisy != clean).to(labels.device)
