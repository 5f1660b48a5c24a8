"""A spurious-correlation benchmark built from Fashion-MNIST, in the spirit of Waterbirds and CelebA.

**The task.** The binary *target* groups the classes that look alike
(:data:`~uncurated.data.fashion_mnist.CONFUSABLE_GROUPS`): target 0,
``"tops"``, is T-shirt/top, Pullover, Coat and Shirt; target 1,
``"footwear"``, is Sandal, Sneaker and Ankle boot. The three other classes
(Trouser, Dress, Bag) belong to neither and are left out. ``labels`` keep the
Fashion-MNIST classes, so zero-shot classification can use the usual class
prompts (:func:`~uncurated.data.captions.class_prompts`, a predicted class
counting for its target) or the prompts of each target (:func:`target_prompts`).

**The attribute.** Each image gets a background: ``0``, ``"dark"``, the
original black background; or ``1``, ``"light"``, where every pixel below
:data:`BACKGROUND_THRESHOLD` (of 255) is set to :data:`LIGHT_BACKGROUND` and
every other pixel, the garment, keeps its value. A garment's own pixels below
the threshold turn light as well; in Fashion-MNIST's training split those
not reached from the image's border are about 7 pixels an image, against
about 370 of garment.

**The spurious correlation.** Within each class, exactly
``round(correlation * n)`` of its ``n`` images, drawn at random, get the
background of their target (tops on dark, footwear on light) and the others
the other background. :func:`spurious_captions_dataset` uses ``correlation``
(default 0.95) for the training split and 0.5 for the test split, where the
background is then independent of the class. The four *groups* are target x
background (:data:`GROUP_NAMES`, ``group = 2 * target + attribute``): in the
training split tops on light and footwear on dark are the rare minority
groups, and a model that reads the background instead of the garment fails
on them in the test split, which worst-group accuracy shows.

**The captions** are those of :class:`~uncurated.data.captions.FashionCaptions`
(:func:`~uncurated.data.captions.generate_captions`), computed from the
original images, so their words describe the garment and not the background
(a light background would otherwise count as garment). With
``caption_mentions_background`` (the default) every caption ends with
``"on a dark background"`` or ``"on a light background"``, so that the text
encoder learns the attribute too and the spurious direction appears in the
text embeddings. Everything is drawn from ``seed``; the same seed gives the
same dataset.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

import torch
from torch import Tensor

from ..validation import check_choice, check_integer, check_range
from .captions import _CAPTIONS, PROMPT_TEMPLATES, _stream, class_prompts, generate_captions
from .fashion_mnist import CLASS_NAMES, CONFUSABLE_GROUPS, checked_fashion_images, load_fashion_mnist
from .simulate import choose_fraction
from .tensor_dataset import TensorImageDataset

__all__ = [
    "ATTRIBUTE_NAMES",
    "BACKGROUND_THRESHOLD",
    "GROUP_NAMES",
    "LIGHT_BACKGROUND",
    "TARGET_CLASSES",
    "TARGET_NAMES",
    "SpuriousFashion",
    "spurious_captions_dataset",
    "target_prompts",
]

#: The classes of each target, indexed by target: the tops and the footwear.
TARGET_CLASSES: tuple[tuple[int, ...], ...] = CONFUSABLE_GROUPS

#: The targets, indexed by target.
TARGET_NAMES = ("tops", "footwear")

#: The backgrounds, indexed by attribute.
ATTRIBUTE_NAMES = ("dark", "light")

#: The groups, indexed by ``2 * target + attribute``.
GROUP_NAMES = tuple(f"{target} on {attribute}" for target in TARGET_NAMES for attribute in ATTRIBUTE_NAMES)

#: Pixels of a light-background image below this intensity (of 255) are background.
BACKGROUND_THRESHOLD = 10

#: The intensity (of 255) of a light background.
LIGHT_BACKGROUND = 170

# The random stream of the backgrounds, after FashionCaptions' stages.
_BACKGROUND = 4


class SpuriousFashion(TensorImageDataset):
    """Fashion-MNIST tops and footwear on backgrounds correlated with the target (see the module's documentation).

    Args:
        images: uint8 Fashion-MNIST images, (N, 28, 28) or (N, 1, 28, 28).
        labels: (N,) labels in 0..9; the images of classes outside
            :data:`TARGET_CLASSES` are left out.
        correlation: the fraction of each class's images that get the
            background of their target, in [0, 1] (0.5: independent of the class).
        seed: the seed of every random draw, an integer >= 0.
        caption_mentions_background: end every caption with its background
            ("... on a light background").

    The samples are the images kept, in their original order. Per sample,
    ``target`` is its target (0: tops, 1: footwear), ``attribute`` its
    background (0: dark, 1: light), ``group`` is ``2 * target + attribute``
    (:data:`GROUP_NAMES`) and ``source_index`` its position in ``images``.
    """

    def __init__(
        self,
        images: Tensor,
        labels: Tensor,
        *,
        correlation: float = 0.95,
        seed: int = 0,
        caption_mentions_background: bool = True,
    ) -> None:
        correlation = check_range("correlation", correlation, 0.0, 1.0)
        seed = check_integer("seed", seed, 0)
        if not isinstance(caption_mentions_background, bool):
            raise ValueError(f"caption_mentions_background must be a bool, got {caption_mentions_background!r}")
        images, labels = checked_fashion_images(images, labels)

        target_of = torch.full((len(CLASS_NAMES),), -1, dtype=torch.long)
        for target, classes in enumerate(TARGET_CLASSES):
            target_of[list(classes)] = target
        kept = (target_of[labels] >= 0).nonzero().squeeze(1)
        if len(kept) == 0:
            raise ValueError(f"labels must include a class of {TARGET_CLASSES} (tops or footwear), got none")
        images, labels = images[kept], labels[kept]
        targets = target_of[labels]
        captions = generate_captions(images, labels, _stream(seed, _CAPTIONS))

        stream = _stream(seed, _BACKGROUND)
        attribute = torch.empty_like(targets)
        for label in labels.unique().tolist():  # ascending, so the draws follow the seed
            members = (labels == label).nonzero().squeeze(1)
            aligned = choose_fraction(len(members), correlation, stream)
            target = int(target_of[label])
            attribute[members] = torch.where(aligned, target, 1 - target)

        light = attribute.bool()[:, None, None] & (images < BACKGROUND_THRESHOLD)
        images = images.masked_fill(light, LIGHT_BACKGROUND)
        if caption_mentions_background:
            captions = [
                f"{caption} on a {ATTRIBUTE_NAMES[a]} background"
                for caption, a in zip(captions, attribute.tolist(), strict=True)
            ]

        super().__init__(images[:, None], labels, captions, classes=CLASS_NAMES)
        self.target = targets
        self.attribute = attribute
        self.group = 2 * targets + attribute
        self.source_index = kept


def spurious_captions_dataset(
    root: str | os.PathLike | None = None,
    split: str = "train",
    *,
    correlation: float = 0.95,
    seed: int = 0,
    caption_mentions_background: bool = True,
) -> SpuriousFashion:
    """One split of Fashion-MNIST (:func:`~uncurated.data.fashion_mnist.load_fashion_mnist`) as SpuriousFashion.

    Args:
        root: the folder of the Fashion-MNIST files; ``None`` takes the default.
        split: ``"train"``, where each class has its target's background with
            probability ``correlation``, or ``"test"``, where the background is
            balanced within each class (correlation 0.5), whatever ``correlation``.
        correlation: the training split's correlation, in [0, 1].
        seed: the seed of every random draw, an integer >= 0.
        caption_mentions_background: end every caption with its background.
    """
    correlation = check_range("correlation", correlation, 0.0, 1.0)
    check_choice("split", split, ("train", "test"))
    images, labels = load_fashion_mnist(root, split)
    return SpuriousFashion(
        images,
        labels,
        correlation=correlation if split == "train" else 0.5,
        seed=seed,
        caption_mentions_background=caption_mentions_background,
    )


def target_prompts(templates: Sequence[str] = PROMPT_TEMPLATES) -> list[list[str]]:
    """For each target, the class prompts (:func:`~uncurated.data.captions.class_prompts`) of its classes.

    Classify by the mean similarity to a target's prompts; the prompts never
    mention the background.
    """
    prompts = class_prompts(templates)
    return [[prompt for label in classes for prompt in prompts[label]] for classes in TARGET_CLASSES]
