"""FashionCaptions: Fashion-MNIST with GENERATED captions, and the damage of web data on demand.

**The captions are generated, not written by people.** Each caption is a
template (:data:`TEMPLATES`) filled with one of a few synonyms of the image's
class (:data:`SYNONYMS`) and with words about the image itself, computed from
simple pixel statistics (:func:`describe_images`): ``dark`` or ``light``
(mean intensity of the garment's pixels), ``narrow`` or ``wide`` (its
horizontal extent), ``short`` or ``long`` (its vertical extent). A word is
given to the lowest and highest third of each class and left out in the
middle third, so captions differ within a class: ``"a photo of a long dark
coat"``, ``"a jacket that looks narrow"``, ``"a pair of pants"``. Everything
is drawn from ``seed``; the same seed gives the same captions.

Web image-text data is uncurated in ways these clean captions are not.
:class:`FashionCaptions` can simulate three of them, each with one argument
that is off by default. They are applied in the order below, each drawing
from its own random stream, so switching one on leaves the draws of the
steps before it unchanged:

* ``imbalance_ratio``: a long-tailed class distribution; class ``k`` keeps
  ``n_max * ratio ** (-k / 9)`` images (:func:`~uncurated.data.simulate.long_tail_indices`).
* ``mismatch_fraction``: that fraction of the pairs gets the caption of an
  image of another class, a false positive pair; ``mismatch_mode="uniform"``
  draws the other class uniformly, ``"confusable"`` among the classes that look
  alike (:data:`~uncurated.data.fashion_mnist.CONFUSABLE_GROUPS`; the other
  classes draw uniformly).
* ``duplicate_fraction``: that fraction of the pairs gets an exact copy of the
  caption of another image of its class.

Per pair, ``caption_label`` is the class its caption describes,
``caption_is_mismatched`` and ``caption_is_duplicate`` say what was done to
it, and ``source_index`` is its position in the Fashion-MNIST split.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

import numpy as np
import torch
from torch import Tensor

from ..data_defaults import MISMATCH_MODES
from ..validation import check_choice, check_integer, check_range
from .fashion_mnist import CLASS_NAMES, CONFUSABLE_GROUPS, checked_fashion_images, load_fashion_mnist
from .simulate import choose_fraction, draw_same_class, long_tail_indices, other_classes
from .tensor_dataset import TensorImageDataset

#: A few names for each class, indexed by label.
SYNONYMS: tuple[tuple[str, ...], ...] = (
    ("t-shirt", "tee", "top"),
    ("trousers", "pants", "slacks"),
    ("pullover", "sweater", "jumper"),
    ("dress", "frock", "gown"),
    ("coat", "jacket", "overcoat"),
    ("sandal", "slide", "flip-flop"),
    ("shirt", "blouse", "button-down"),
    ("sneaker", "trainer", "running shoe"),
    ("bag", "handbag", "purse"),
    ("ankle boot", "boot", "bootie"),
)

#: Names that are plural nouns, said as "a pair of ...".
PLURALS = frozenset({"trousers", "pants", "slacks"})

#: The caption templates. ``{described}`` is the noun phrase with the image's
#: words ("a long dark coat"), ``{plain}`` the phrase without them ("a coat"),
#: ``{words}`` the words alone ("long and dark"). Templates that use
#: ``{words}`` are only drawn for images that have some.
TEMPLATES = (
    "a photo of {described}",
    "{described}",
    "a picture of {described}",
    "a product photo of {described}",
    "a grayscale image of {described}",
    "this is {described}",
    "{plain}, {words}",
    "{plain} that looks {words}",
)

#: Templates of :func:`class_prompts`, filled with each synonym's plain noun phrase.
PROMPT_TEMPLATES = ("a photo of {plain}", "a picture of {plain}", "{plain}")

#: The words of each pixel statistic, for its lowest and highest third within a class, in adjective order.
WORDS = (("short", "long"), ("narrow", "wide"), ("dark", "light"))

#: Pixels above this intensity (of 1) belong to the garment.
FOREGROUND = 0.1

# One random stream per stage, so that switching one simulation on leaves the others' draws alone.
_IMBALANCE, _CAPTIONS, _MISMATCH, _DUPLICATE = range(4)


class FashionCaptions(TensorImageDataset):
    """Fashion-MNIST images paired with generated captions (see the module's documentation).

    Args:
        images: uint8 Fashion-MNIST images, (N, 28, 28) or (N, 1, 28, 28).
        labels: (N,) labels in 0..9.
        seed: the seed of every random draw, an integer >= 0.
        mismatch_fraction: the fraction of pairs given the caption of another
            class, in [0, 1].
        mismatch_mode: ``"uniform"`` or ``"confusable"``.
        imbalance_ratio: the size of the largest class over the smallest, >= 1
            (1: balanced).
        duplicate_fraction: the fraction of pairs given an exact copy of
            another caption of their class, in [0, 1]; with
            ``mismatch_fraction`` at most 1 in all (the two sets do not overlap).

    The samples are the images kept by the imbalance, in their original
    order; a sample's index is its position among them. :meth:`batch` serves
    whole batches; :func:`class_prompts` gives prompts for zero-shot evaluation.
    """

    def __init__(
        self,
        images: Tensor,
        labels: Tensor,
        *,
        seed: int = 0,
        mismatch_fraction: float = 0.0,
        mismatch_mode: str = "uniform",
        imbalance_ratio: float = 1.0,
        duplicate_fraction: float = 0.0,
    ) -> None:
        seed = check_integer("seed", seed, 0)
        mismatch_fraction = check_range("mismatch_fraction", mismatch_fraction, 0.0, 1.0)
        check_choice("mismatch_mode", mismatch_mode, MISMATCH_MODES)
        imbalance_ratio = check_range("imbalance_ratio", imbalance_ratio, 1.0)
        duplicate_fraction = check_range("duplicate_fraction", duplicate_fraction, 0.0, 1.0)
        if mismatch_fraction + duplicate_fraction > 1:
            raise ValueError(
                f"mismatch_fraction + duplicate_fraction must be at most 1, got {mismatch_fraction:g} + "
                f"{duplicate_fraction:g}"
            )
        images, labels = checked_fashion_images(images, labels)

        kept = torch.arange(len(labels))
        if imbalance_ratio != 1:
            kept = long_tail_indices(labels, imbalance_ratio, _stream(seed, _IMBALANCE))
        images, labels = images[kept], labels[kept]
        generated = generate_captions(images, labels, _stream(seed, _CAPTIONS))
        count = len(labels)
        everyone = torch.arange(count)

        stream = _stream(seed, _MISMATCH)
        mismatched = choose_fraction(count, mismatch_fraction, stream)
        groups = CONFUSABLE_GROUPS if mismatch_mode == "confusable" else ()
        caption_label = labels.clone()
        caption_label[mismatched] = other_classes(labels[mismatched], len(CLASS_NAMES), stream, groups=groups)
        source = everyone.clone()
        source[mismatched] = draw_same_class(everyone, labels, caption_label[mismatched], stream)

        stream = _stream(seed, _DUPLICATE)
        duplicated = choose_fraction(count, duplicate_fraction, stream, among=~mismatched)
        originals = everyone[~mismatched & ~duplicated]
        source[duplicated] = draw_same_class(originals, labels, labels[duplicated], stream)

        super().__init__(images[:, None], labels, [generated[i] for i in source.tolist()], classes=CLASS_NAMES)
        self.caption_label = caption_label
        self.caption_is_mismatched = mismatched
        self.caption_is_duplicate = duplicated
        self.source_index = kept


def fashion_captions_dataset(root: str | os.PathLike | None = None, split: str = "train", **options) -> FashionCaptions:
    """One split of Fashion-MNIST (:func:`~uncurated.data.fashion_mnist.load_fashion_mnist`) as FashionCaptions.

    ``options`` are the keyword arguments of :class:`FashionCaptions`.
    """
    images, labels = load_fashion_mnist(root, split)
    return FashionCaptions(images, labels, **options)


def class_prompts(templates: Sequence[str] = PROMPT_TEMPLATES) -> list[list[str]]:
    """For each Fashion-MNIST class, a prompt per template and synonym: ``"a photo of a tee"``, ...

    ``templates`` use ``{plain}``, the synonym with its article ("a tee", "a
    pair of pants"). Classify by the mean similarity to a class's prompts.
    """
    return [
        [template.format(plain=_noun_phrase((), name)) for name in names for template in templates]
        for names in SYNONYMS
    ]


def describe_images(images: Tensor, labels: Tensor) -> list[tuple[str, ...]]:
    """The words of each image (:data:`WORDS`), from its pixel statistics relative to its class.

    For each statistic (vertical extent, horizontal extent, mean intensity of
    the pixels above :data:`FOREGROUND`), an image below the class's first
    tercile gets the first word, one above its second tercile the second word.
    """
    statistics = _pixel_statistics(images)
    words: list[list[str]] = [[] for _ in range(len(images))]
    for column, (low_word, high_word) in enumerate(WORDS):
        values = statistics[:, column]
        low, high = torch.empty_like(values), torch.empty_like(values)
        for label in labels.unique():
            members = labels == label
            low[members], high[members] = torch.quantile(
                values[members], torch.tensor([1 / 3, 2 / 3], dtype=values.dtype)
            )
        for i in (values < low).nonzero().squeeze(1).tolist():
            words[i].append(low_word)
        for i in (values > high).nonzero().squeeze(1).tolist():
            words[i].append(high_word)
    return [tuple(image_words) for image_words in words]


def generate_captions(images: Tensor, labels: Tensor, generator: torch.Generator | None = None) -> list[str]:
    """A caption for each (N, 28, 28) uint8 image of class ``labels``: template, synonym and the image's words."""
    words = describe_images(images, labels)
    count = len(labels)
    synonym_draws = torch.randint(len(SYNONYMS[0]), (count,), generator=generator).tolist()
    template_draws = torch.rand(count, generator=generator, dtype=torch.float64).tolist()
    plain_templates = [template for template in TEMPLATES if "{words}" not in template]
    captions = []
    for label, image_words, synonym, draw in zip(labels.tolist(), words, synonym_draws, template_draws, strict=True):
        choices = TEMPLATES if image_words else plain_templates
        template = choices[min(int(draw * len(choices)), len(choices) - 1)]
        name = SYNONYMS[label][synonym]
        captions.append(
            template.format(
                described=_noun_phrase(image_words, name),
                plain=_noun_phrase((), name),
                words=_join(image_words),
            )
        )
    return captions


def _pixel_statistics(images: Tensor) -> Tensor:
    """(N, 3) float64: vertical extent, horizontal extent (pixels) and mean foreground intensity (0..1)."""
    pixels = images.double() / 255
    foreground = pixels > FOREGROUND
    statistics = []
    for axis in (2, 1):  # a row holds garment if any of its columns does, and the other way round
        occupied = foreground.any(dim=axis)
        positions = torch.arange(occupied.shape[1], dtype=torch.float64)
        first = torch.where(occupied, positions, np.inf).amin(dim=1)
        last = torch.where(occupied, positions, -np.inf).amax(dim=1)
        statistics.append(torch.where(occupied.any(dim=1), last - first + 1, 0.0))
    area = foreground.sum(dim=(1, 2))
    statistics.append((pixels * foreground).sum(dim=(1, 2)) / area.clamp(min=1))
    return torch.stack(statistics, dim=1)


def _noun_phrase(words: Sequence[str], name: str) -> str:
    """``name`` after its article and ``words``: "a long coat", "an overcoat", "a pair of dark pants"."""
    phrase = " ".join((*words, name))
    if name in PLURALS:
        return f"a pair of {phrase}"
    return f"{'an' if phrase[0] in 'aeiou' else 'a'} {phrase}"


def _join(words: Sequence[str]) -> str:
    """ "", "dark", "long and dark", "long, narrow and dark"."""
    return ", ".join(words[:-1]) + " and " + words[-1] if len(words) > 1 else "".join(words)


def _stream(seed: int, stage: int) -> torch.Generator:
    """The random stream of one stage, independent of the others."""
    return torch.Generator().manual_seed(int(np.random.SeedSequence([seed, stage]).generate_state(1)[0]))
