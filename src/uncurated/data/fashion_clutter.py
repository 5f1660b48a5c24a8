"""Fashion-MNIST in clutter: each garment at a random position, scale and colour on a cluttered background.

Fashion-MNIST's garments are centred, aligned and clean, so at small scale a
linear probe on raw pixels or on an untrained encoder reads them about as well
as a contrastively trained encoder, and two-view objectives cannot be told
apart. Controlled settings such as the colourful and cluttered MNIST variants
(Tian et al. 2020) instead put the object at a random position, colour and
scale on a textured background: pixels then fail and the invariances the
augmentations teach matter. This dataset is built that way, procedurally and
deterministically, from the Fashion-MNIST files already on disk; it is *not*
CIFAR-10, the dataset of Chuang's thesis (2023).

Each image (RGB, :data:`DEFAULT_SIDE` pixels square) is made of

* a background of four tiles, each a random crop of another image of the
  same Fashion-MNIST split, tinted a random colour and dimmed to
  ``background`` (garment fragments: texture with the statistics of the
  foreground, but no whole garment);
* the garment, resized to a random side in ``scale`` times the canvas,
  placed at a random position, in a random saturated colour, over the
  background with its intensity as the opacity.

Labels are the garment's (Fashion-MNIST's ten classes); the train and test
splits come from Fashion-MNIST's. The images depend only on the source
files, the :class:`ClutterDesign`, the seed, the side and the count; they are
cached as an ``.npz`` under :func:`cache_dir` whose key records
:data:`GENERATOR_VERSION`, the design, the seed, the side, the count and a
digest of the source, so a cache written by another version or seed is
rebuilt, never read as current.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from torch.nn import functional as F

from ..validation import check_choice, check_integer, check_range
from .fashion_mnist import CLASS_NAMES, load_fashion_mnist
from .tensor_dataset import TensorImageDataset

__all__ = [
    "DEFAULT_DESIGN",
    "DEFAULT_SEED",
    "DEFAULT_SIDE",
    "GENERATOR_VERSION",
    "ClutterDesign",
    "cache_dir",
    "fashion_clutter_dataset",
    "render_clutter",
]

#: Bumped whenever the same inputs would render different images: older caches are then rebuilt.
GENERATOR_VERSION = 1

#: The side of the square RGB images, in pixels.
DEFAULT_SIDE = 32

#: The seed of the rendering: the dataset is fixed, like a downloaded one; a run's ``seed`` does not change it.
DEFAULT_SEED = 0

#: The environment variable naming the cache folder (else ``$XDG_CACHE_HOME/uncurated``, else ``~/.cache/uncurated``).
CACHE_ENV = "UNCURATED_CACHE_DIR"

#: The splits, in the order that numbers their random streams.
SPLITS = ("train", "test")

#: Images rendered at once (bounds the float32 working memory to about 60 MB at side 32).
_CHUNK = 5000


@dataclass(frozen=True)
class ClutterDesign:
    """How an image is composed.

    Attributes:
        background: ``"patches"`` (tiles cut from other garments, tinted),
            ``"noise"`` (smooth random colour noise) or ``"plain"`` (one random colour).
        background_strength: the background's brightness, in [0, 1].
        scale: the range of the garment's side as a fraction of the canvas, ``0 < low <= high <= 1``.
        saturation: the range of the garment colour's saturation, ``0 <= low <= high <= 1``.
    """

    background: str = "patches"
    background_strength: float = 0.5
    scale: tuple[float, float] = (0.5, 0.875)
    saturation: tuple[float, float] = (0.6, 1.0)

    def __post_init__(self) -> None:
        check_choice("background", self.background, ("patches", "noise", "plain"))
        check_range("background_strength", self.background_strength, 0.0, 1.0)
        low, high = self.scale
        check_range("scale", low, 0.0, 1.0, low_open=True)
        check_range("scale", high, low, 1.0)
        low, high = self.saturation
        check_range("saturation", low, 0.0, 1.0)
        check_range("saturation", high, low, 1.0)
        object.__setattr__(self, "scale", (float(self.scale[0]), float(self.scale[1])))
        object.__setattr__(self, "saturation", (float(self.saturation[0]), float(self.saturation[1])))


#: The design ``dataset=fashion-clutter`` renders (benchmarks/clutter_design.py compares it with others).
DEFAULT_DESIGN = ClutterDesign()


def cache_dir() -> Path:
    """The folder generated datasets are cached in: ``$UNCURATED_CACHE_DIR``, else ``$XDG_CACHE_HOME/uncurated``,
    else ``~/.cache/uncurated``."""
    if os.environ.get(CACHE_ENV):
        return Path(os.environ[CACHE_ENV])
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "uncurated"


def _hsv_to_rgb(hue: np.ndarray, saturation: np.ndarray, value: np.ndarray) -> np.ndarray:
    """(N,) HSV colours in [0, 1] as (N, 3) RGB in [0, 1]."""
    sector = hue * 6.0
    index = np.floor(sector).astype(np.int64) % 6
    fraction = sector - np.floor(sector)
    p, q, t = value * (1 - saturation), value * (1 - fraction * saturation), value * (1 - (1 - fraction) * saturation)
    table = np.stack(
        [
            np.stack([value, t, p], 1),
            np.stack([q, value, p], 1),
            np.stack([p, value, t], 1),
            np.stack([p, q, value], 1),
            np.stack([t, p, value], 1),
            np.stack([value, p, q], 1),
        ]
    )
    return table[index, np.arange(len(hue))].astype(np.float32)


def _background(rng: np.random.Generator, source: np.ndarray, count: int, side: int, design: ClutterDesign):
    """(count, 3, side, side) float32 backgrounds in [0, background_strength]."""
    strength = design.background_strength
    if design.background == "plain":
        colours = _hsv_to_rgb(rng.random(count), rng.random(count), np.ones(count)) * strength
        return np.broadcast_to(colours[:, :, None, None], (count, 3, side, side)).copy()
    if design.background == "noise":
        coarse = torch.from_numpy(rng.random((count, 3, 4, 4), dtype=np.float32))
        smooth = F.interpolate(coarse, size=(side, side), mode="bicubic", align_corners=False)
        return (smooth.clamp(0, 1).numpy() * strength).astype(np.float32)
    tile = (side + 1) // 2
    if tile > source.shape[-1]:
        raise ValueError(f"side must be at most {2 * source.shape[-1]} for background='patches', got {side}")
    canvas = np.empty((count, 3, 2 * tile, 2 * tile), dtype=np.float32)
    for row in range(2):
        for column in range(2):
            which = rng.integers(0, len(source), count)
            top, left = (rng.integers(0, source.shape[-1] - tile + 1, count) for _ in range(2))
            rows = top[:, None] + np.arange(tile)[None]
            columns = left[:, None] + np.arange(tile)[None]
            patches = source[which[:, None, None], rows[:, :, None], columns[:, None, :]].astype(np.float32) / 255
            colours = _hsv_to_rgb(rng.random(count), rng.uniform(0.3, 1.0, count), np.ones(count))
            rows_out, columns_out = slice(row * tile, (row + 1) * tile), slice(column * tile, (column + 1) * tile)
            canvas[:, :, rows_out, columns_out] = patches[:, None] * colours[:, :, None, None] * strength
    return canvas[:, :, :side, :side]


def render_clutter(
    images: np.ndarray,
    *,
    seed: int = DEFAULT_SEED,
    side: int = DEFAULT_SIDE,
    design: ClutterDesign = DEFAULT_DESIGN,
    background_source: np.ndarray | None = None,
    stream: int = 0,
) -> np.ndarray:
    """Render garments (N, 28, 28) uint8 as cluttered (N, 3, side, side) uint8 images.

    ``background_source`` (default ``images``) supplies the background tiles;
    ``stream`` separates the random draws of renderings that share a seed (the
    splits). The same arguments give the same images.
    """
    seed = check_integer("seed", seed, 0)
    side = check_integer("side", side, 8)
    source = images if background_source is None else background_source
    rng = np.random.default_rng([GENERATOR_VERSION, seed, side, check_integer("stream", stream, 0)])
    out = np.empty((len(images), 3, side, side), dtype=np.uint8)
    for start in range(0, len(images), _CHUNK):
        chunk = images[start : start + _CHUNK]
        count = len(chunk)
        canvas = _background(rng, source, count, side, design)
        low, high = (max(2, round(fraction * side)) for fraction in design.scale)
        sizes = rng.integers(low, high + 1, count)
        hue, saturation = rng.random(count), rng.uniform(*design.saturation, count)
        colours = _hsv_to_rgb(hue, saturation, np.ones(count))
        offsets = rng.random((count, 2))
        garments = torch.from_numpy(chunk).float()[:, None] / 255
        for size in np.unique(sizes):
            chosen = np.flatnonzero(sizes == size)
            resized = F.interpolate(garments[chosen], size=(int(size), int(size)), mode="bilinear", antialias=True)
            intensity = resized.clamp(0, 1).numpy()
            # Opaque where the garment is; its shading kept as brightness over the random colour.
            alpha = np.minimum(1.0, 3.0 * intensity)
            foreground = (0.35 + 0.65 * intensity) * colours[chosen, :, None, None]
            tops = np.floor(offsets[chosen, 0] * (side - size + 1)).astype(np.int64)
            lefts = np.floor(offsets[chosen, 1] * (side - size + 1)).astype(np.int64)
            for position, image in enumerate(chosen):
                top, left = tops[position], lefts[position]
                region = canvas[image, :, top : top + size, left : left + size]
                region *= 1 - alpha[position]
                region += alpha[position] * foreground[position]
        out[start : start + count] = np.clip(np.rint(canvas * 255), 0, 255).astype(np.uint8)
    return out


def _cache_key(split: str, seed: int, side: int, count: int, design: ClutterDesign, digest: str) -> dict:
    return {
        "generator_version": GENERATOR_VERSION,
        "split": split,
        "seed": seed,
        "side": side,
        "count": count,
        "design": dataclasses.asdict(design),
        "source_sha1": digest,
    }


def _cache_path(folder: Path, key: dict) -> Path:
    name = hashlib.sha1(json.dumps(key, sort_keys=True).encode()).hexdigest()[:16]
    version, split, seed, side = (key[field] for field in ("generator_version", "split", "seed", "side"))
    return folder / f"fashion-clutter-v{version}-{split}-s{seed}-{side}px-{name}.npz"


def fashion_clutter_dataset(
    root: str | os.PathLike | None = None,
    split: str = "train",
    *,
    seed: int = DEFAULT_SEED,
    side: int = DEFAULT_SIDE,
    count: int | None = None,
    design: ClutterDesign | None = None,
    cache: str | os.PathLike | None = None,
) -> TensorImageDataset:
    """One split of Fashion-MNIST in clutter as a :class:`TensorImageDataset` of (N, 3, side, side) uint8 images.

    Args:
        root: the Fashion-MNIST folder (see :func:`~uncurated.data.load_fashion_mnist`).
        split: ``"train"`` (from Fashion-MNIST's 60,000) or ``"test"`` (its 10,000).
        seed: the rendering's seed, an integer >= 0.
        side: the images' side in pixels, an integer in [8, 56].
        count: render only the split's first ``count`` garments (small test sets); ``None`` for all.
        design: how images are composed (:class:`ClutterDesign`); ``None`` for :data:`DEFAULT_DESIGN`.
        cache: the cache folder; ``None`` for :func:`cache_dir`.

    The rendered split is read from the cache when its key (generator
    version, design, seed, side, count, digest of the source) matches, else
    rendered and written there.
    """
    check_choice("split", split, SPLITS)
    design = DEFAULT_DESIGN if design is None else design
    seed = check_integer("seed", seed, 0)
    side = check_integer("side", side, 8)
    if side > 56:
        raise ValueError(f"side must be an integer in [8, 56], got {side}")
    images, labels = load_fashion_mnist(root, split)
    if count is not None:
        count = check_integer("count", count, 1)
        images, labels = images[:count], labels[:count]
    source = images.numpy()
    digest = hashlib.sha1(source.tobytes() + labels.numpy().tobytes()).hexdigest()
    key = _cache_key(split, seed, side, len(source), design, digest)
    folder = cache_dir() if cache is None else Path(cache)
    path = _cache_path(folder, key)
    rendered = _read_cache(path, key)
    if rendered is None:
        rendered = render_clutter(source, seed=seed, side=side, design=design, stream=SPLITS.index(split))
        folder.mkdir(parents=True, exist_ok=True)
        partial = path.with_suffix(f".{os.getpid()}.tmp.npz")
        np.savez(partial, images=rendered, key=np.array(json.dumps(key, sort_keys=True)))
        partial.replace(path)
    return TensorImageDataset(torch.from_numpy(rendered), labels, classes=CLASS_NAMES)


def _read_cache(path: Path, key: dict) -> np.ndarray | None:
    """The cached images when ``path`` exists and records exactly ``key``, else ``None``."""
    if not path.exists():
        return None
    try:
        with np.load(path, allow_pickle=False) as stored:
            if json.loads(str(stored["key"])) != json.loads(json.dumps(key)):
                return None
            return np.array(stored["images"])
    except (OSError, ValueError, KeyError):
        return None
