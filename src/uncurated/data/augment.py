"""Batched image augmentations with kornia, on the device the images are on.

:class:`Augmentation` applies, in this order and each with its own strength
(:class:`AugmentationConfig`): a random resized crop, a horizontal flip, a
random affine transform (rotation, translation, zoom; the uncovered border
is black, like Fashion-MNIST's background), random erasing (a black
rectangle), a colour jitter and a grayscale conversion (RGB images), additive
Gaussian noise, and last the *augmentation noise* of
the thesis (Sec. 5.3.1, App. A.3.4): "after applying all the transformations
[...], images are further cropped into 1/5 of their original size with
probability eta", which makes that fraction of the positive pairs share
almost nothing. Here 1/5 is of the area (``noise_crop_area``), the crop's
aspect ratio is drawn in [3/4, 4/3], and the crop is resized back to the
image's size. The output is clamped to [0, 1].

Presets (:data:`PRESETS`) fit the packaged datasets and any strength can be
overridden by keyword: ``Augmentation("fashion-mnist", flip=0.0, noise_eta=0.4)``.

**Determinism.** kornia draws its random parameters from torch's global
random state and takes no generator. Given a ``torch.Generator`` (per call)
or a ``seed`` (at construction), every call instead runs in a forked copy of
the global state (``torch.random.fork_rng``, on the CPU and on the images'
CUDA device) seeded from that generator: the same generator state gives the
same output on the same device and versions, and the global random state is
left untouched. Without either, the global state is used and advanced.
Other accelerators than CUDA are not forked: there the noise draws come
from, and advance, the global state of that device.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from ..data_defaults import AUGMENTATIONS
from ..validation import check_choice, check_integer, check_range


@dataclass(frozen=True)
class AugmentationConfig:
    """The strengths of the augmentations; the defaults apply none.

    Attributes:
        crop_scale: the range of the area fraction kept by the random resized
            crop, ``0 < low <= high <= 1``; ``None`` for no crop.
        crop_ratio: the range of the crop's aspect ratio, ``0 < low <= high``.
        flip: the probability of a horizontal flip, in [0, 1].
        affine: the probability of a random affine transform, in [0, 1].
        degrees: rotations are drawn in [-degrees, degrees], in [0, 180].
        translate: shifts are drawn up to this fraction of the size, in [0, 1).
        scale: the range of the affine zoom factor, ``0 < low <= high``.
        erase: the probability of erasing a rectangle, in [0, 1].
        erase_scale: the range of the erased area fraction, ``0 < low <= high < 1``.
        jitter: the probability of a colour jitter of brightness, contrast and
            saturation by up to 0.4 and hue by up to ``hue`` (SimCLR's strength 0.5), in [0, 1]; RGB images only.
        hue: the largest hue shift of the colour jitter, as a fraction of the colour wheel, in [0, 0.5]
            (0.5: any hue; SimCLR's 0.1 keeps a colour near its own).
        grayscale: the probability of turning the image gray, in [0, 1]; RGB images only.
        noise_std: the standard deviation of additive Gaussian noise, >= 0.
        noise_eta: the probability of the thesis' extra crop, in [0, 1].
        noise_crop_area: the area fraction that crop keeps, in (0, 1].
    """

    crop_scale: tuple[float, float] | None = None
    crop_ratio: tuple[float, float] = (3 / 4, 4 / 3)
    flip: float = 0.0
    affine: float = 0.0
    degrees: float = 0.0
    translate: float = 0.0
    scale: tuple[float, float] = (1.0, 1.0)
    erase: float = 0.0
    erase_scale: tuple[float, float] = (0.02, 0.2)
    jitter: float = 0.0
    hue: float = 0.1
    grayscale: float = 0.0
    noise_std: float = 0.0
    noise_eta: float = 0.0
    noise_crop_area: float = 0.2

    def __post_init__(self) -> None:
        for name in ("flip", "affine", "erase", "jitter", "grayscale", "noise_eta"):
            check_range(name, getattr(self, name), 0.0, 1.0)
        check_range("degrees", self.degrees, 0.0, 180.0)
        check_range("hue", self.hue, 0.0, 0.5)
        check_range("translate", self.translate, 0.0, 1.0, high_open=True)
        check_range("noise_std", self.noise_std, 0.0)
        check_range("noise_crop_area", self.noise_crop_area, 0.0, 1.0, low_open=True)
        # The ranges are stored as checked tuples (YAML gives lists); the dataclass is frozen, hence __setattr__.
        if self.crop_scale is not None:
            object.__setattr__(self, "crop_scale", _check_pair("crop_scale", self.crop_scale, high=1.0))
        object.__setattr__(self, "crop_ratio", _check_pair("crop_ratio", self.crop_ratio))
        object.__setattr__(self, "scale", _check_pair("scale", self.scale))
        object.__setattr__(self, "erase_scale", _check_pair("erase_scale", self.erase_scale, high=1.0, high_open=True))


def _check_pair(name: str, pair, *, high: float = math.inf, high_open: bool = False) -> tuple[float, float]:
    """``pair`` as a tuple ``(low, high)`` of numbers with ``0 < low <= high``, below the bound ``high``."""
    if isinstance(pair, (str, bytes)) or not hasattr(pair, "__len__") or len(pair) != 2:
        raise ValueError(f"{name} must be a pair (low, high), got {pair!r}")
    low = check_range(name, pair[0], 0.0, high, low_open=True, high_open=high_open)
    top = check_range(name, pair[1], low, high, high_open=high_open)
    return low, top


#: The presets: Fashion-MNIST's garments are centred and fill the image, so its
#: crops keep at least half of the area; digits are not mirror-symmetric, so
#: they are never flipped; ``fashion-clutter`` may move the hue anywhere; ``crop`` and ``simclr`` are for RGB
#: photographs; ``none`` applies nothing.
PRESETS = {
    "fashion-mnist": AugmentationConfig(
        crop_scale=(0.5, 1.0), flip=0.5, affine=0.5, degrees=10.0, translate=0.1, scale=(0.9, 1.1), noise_std=0.03
    ),
    "digits": AugmentationConfig(
        crop_scale=(0.7, 1.0), affine=0.5, degrees=10.0, translate=0.1, scale=(0.9, 1.1), noise_std=0.03
    ),
    # Web-scale image-text pretraining (Uesaka et al. 2025's setup: a random resized crop of 50 to 100% of the area).
    "crop": AugmentationConfig(crop_scale=(0.5, 1.0)),
    # SimCLR's CIFAR augmentations (the thesis' two-view experiments): crop, flip, colour jitter, grayscale.
    "simclr": AugmentationConfig(crop_scale=(0.08, 1.0), flip=0.5, jitter=0.8, grayscale=0.2),
    # Fashion-MNIST in clutter (data/fashion_clutter.py): the garment's colour is random, so the jitter may move
    # the hue anywhere on the wheel and the two views disagree on it; crops down to a fifth of the area make the
    # views disagree on the position and scale, as SimCLR's do on CIFAR.
    "fashion-clutter": AugmentationConfig(crop_scale=(0.2, 1.0), flip=0.5, jitter=0.8, hue=0.5, grayscale=0.2),
    "none": AugmentationConfig(),
}


class Augmentation(nn.Module):
    """Random augmentations of a batch of images, built from a preset and overrides.

    Args:
        preset: one of :data:`PRESETS`.
        seed: if given, the module owns a generator seeded with it and every
            call without ``generator`` draws from it (reproducible runs); an
            integer >= 0.
        **overrides: fields of :class:`AugmentationConfig` replacing the preset's.

    Call it on (B, C, H, W) floating-point images in [0, 1]; it returns
    augmented images of the same shape, dtype and device, in [0, 1]. Two
    calls on the same batch give two independent views.
    """

    def __init__(self, preset: str = "fashion-mnist", *, seed: int | None = None, **overrides) -> None:
        super().__init__()
        check_choice("preset", preset, AUGMENTATIONS)
        fields = {field.name for field in dataclasses.fields(AugmentationConfig)}
        unknown = sorted(set(overrides) - fields)
        if unknown:
            raise ValueError(f"unknown augmentation option {unknown[0]!r}; accepted: {', '.join(sorted(fields))}")
        self.preset = preset
        self.config = dataclasses.replace(PRESETS[preset], **overrides)
        self.generator = None if seed is None else torch.Generator().manual_seed(check_integer("seed", seed, 0))
        self._steps_by_size: dict[tuple[int, int], tuple[list[nn.Module], nn.Module | None]] = {}

    def forward(self, images: Tensor, generator: torch.Generator | None = None) -> Tensor:
        """Augment ``images`` (B, C, H, W); ``generator`` (a CPU generator) makes the call reproducible."""
        if not isinstance(images, Tensor) or images.ndim != 4 or not images.is_floating_point():
            raise ValueError(f"images must be a floating-point tensor of shape (B, C, H, W), got {images!r:.80}")
        if (self.config.jitter or self.config.grayscale) and images.shape[1] != 3:
            raise ValueError(f"jitter and grayscale apply to RGB images (B, 3, H, W), got {images.shape[1]} channels")
        generator = self.generator if generator is None else generator
        transforms, noise_crop = self._steps(images.shape[-2], images.shape[-1])
        with nullcontext() if generator is None else _forked_rng(generator, images.device):
            for transform in transforms:
                images = transform(images)
            if self.config.noise_std:
                images = images + self.config.noise_std * torch.randn_like(images)
            if noise_crop is not None:
                # Drawn here per image: kornia's RandomResizedCrop takes its p for the whole batch.
                chosen = (torch.rand(len(images)) < self.config.noise_eta).nonzero().squeeze(1).to(images.device)
                images = images.index_copy(0, chosen, noise_crop(images[chosen]))
        return images.clamp(0, 1)

    def extra_repr(self) -> str:
        changed = "".join(
            f", {field.name}={getattr(self.config, field.name)}"
            for field in dataclasses.fields(AugmentationConfig)
            if getattr(self.config, field.name) != getattr(PRESETS[self.preset], field.name)
        )
        return f"{self.preset!r}{changed}"

    def _steps(self, height: int, width: int) -> tuple[list[nn.Module], nn.Module | None]:
        """The kornia transforms before the noise and the thesis' noise crop, built once per image size."""
        if (height, width) not in self._steps_by_size:
            import kornia.augmentation as K  # imported here: kornia takes over a second to import

            config = self.config
            transforms: list[nn.Module] = []
            if config.crop_scale is not None:
                transforms.append(
                    K.RandomResizedCrop((height, width), scale=config.crop_scale, ratio=config.crop_ratio)
                )
            if config.flip:
                transforms.append(K.RandomHorizontalFlip(p=config.flip))
            if config.affine:
                shift = (config.translate, config.translate)
                transforms.append(K.RandomAffine(config.degrees, translate=shift, scale=config.scale, p=config.affine))
            if config.erase:
                transforms.append(K.RandomErasing(scale=config.erase_scale, p=config.erase))
            if config.jitter:
                transforms.append(K.ColorJitter(0.4, 0.4, 0.4, config.hue, p=config.jitter))
            if config.grayscale:
                transforms.append(K.RandomGrayscale(p=config.grayscale))
            noise_crop = None
            if config.noise_eta:
                area = (config.noise_crop_area, config.noise_crop_area)
                noise_crop = K.RandomResizedCrop((height, width), scale=area)
            self._steps_by_size[height, width] = transforms, noise_crop
        return self._steps_by_size[height, width]


@contextmanager
def _forked_rng(generator: torch.Generator, device: torch.device) -> Iterator[None]:
    """Run the block on a copy of the global random state (CPU and ``device``) seeded from ``generator``."""
    seed = int(torch.randint(2**62, (), generator=generator))
    cuda = device.type == "cuda"
    with torch.random.fork_rng(devices=[device] if cuda else []):
        torch.random.default_generator.manual_seed(seed)
        if cuda:
            with torch.cuda.device(device):
                torch.cuda.manual_seed(seed)
        yield
